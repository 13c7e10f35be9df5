package controlplane

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

func TestEtcdLogger(t *testing.T) {
	cases := map[string]struct {
		level   zapcore.Level
		log     func(*zap.Logger)
		wantOut bool
	}{
		"closed listener": {
			log: func(l *zap.Logger) {
				l.Error("setting up serving from embedded etcd failed.", zap.Error(&net.OpError{Op: "accept", Net: "tcp", Err: net.ErrClosed}))
			},
		},
		"closed server": {
			log: func(l *zap.Logger) {
				l.Error("setting up serving from embedded etcd failed.", zap.Error(fmt.Errorf("serving: %w", http.ErrServerClosed)))
			},
		},
		"closed listener, from a derived logger": {
			log: func(l *zap.Logger) {
				l.With(zap.String("member", "x")).Warn("stopping insecure grpc server due to error", zap.Error(net.ErrClosed))
			},
		},
		"other error": {
			log:     func(l *zap.Logger) { l.Error("disk full", zap.Error(errors.New("no space left on device"))) },
			wantOut: true,
		},
		"below the level": {
			log: func(l *zap.Logger) { l.Info("request stats") },
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			tc.log(newEtcdLogger(&buf, zapcore.WarnLevel))
			out := buf.String()
			if got := out != ""; got != tc.wantOut {
				t.Errorf("logged %q, want output: %v", out, tc.wantOut)
			}
			if strings.Contains(out, "stacktrace") {
				t.Errorf("logged a stack trace: %s", out)
			}
		})
	}
}
