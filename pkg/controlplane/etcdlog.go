package controlplane

import (
	"errors"
	"io"
	"net"
	"net/http"

	"github.com/soheilhy/cmux"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// newEtcdLogger returns the logger of the embedded etcd: JSON lines, as etcd
// writes them, at level and above, to w. It never attaches stack traces
// (etcd's default logger adds one to every error), and it drops the errors
// etcd reports about its own listeners when it is stopped (see
// isListenerClosed), which are the normal end of a shutdown, not failures.
func newEtcdLogger(w io.Writer, level zapcore.Level) *zap.Logger {
	enc := zap.NewProductionEncoderConfig()
	enc.TimeKey = "ts"
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(w), level)
	return zap.New(closedListenerFilter{Core: core}, zap.AddCaller())
}

// closedListenerFilter is a zapcore.Core that drops entries whose error is a
// closed listener or server.
type closedListenerFilter struct {
	zapcore.Core
}

var _ zapcore.Core = closedListenerFilter{}

// With keeps the filter on the derived core.
func (f closedListenerFilter) With(fields []zapcore.Field) zapcore.Core {
	return closedListenerFilter{Core: f.Core.With(fields)}
}

// Check adds the filter itself, not the wrapped core, so that Write filters.
func (f closedListenerFilter) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if f.Enabled(e.Level) {
		return ce.AddCore(e, f)
	}
	return ce
}

// Write drops the entry if one of its error fields is a closed listener.
func (f closedListenerFilter) Write(e zapcore.Entry, fields []zapcore.Field) error {
	for _, field := range fields {
		if err, ok := field.Interface.(error); ok && field.Type == zapcore.ErrorType && isListenerClosed(err) {
			return nil
		}
	}
	return f.Core.Write(e, fields)
}

// isListenerClosed reports whether err is what a listener or server returns
// once it has been closed: etcd logs these at error level, with the message
// "setting up serving from embedded etcd failed.", every time it stops.
func isListenerClosed(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, http.ErrServerClosed) || errors.Is(err, cmux.ErrServerClosed)
}
