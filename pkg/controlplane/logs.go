package controlplane

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"gopkg.in/natefinch/lumberjack.v2"
	"k8s.io/klog/v2"
)

// Rotation limits of every log file under <data-dir>/logs. A file is rotated
// when it reaches LogMaxSizeMB; the LogMaxBackups most recent rotated files
// are kept, gzip-compressed, beside it, and older ones are deleted. A log thus
// takes at most LogMaxSizeMB plus its compressed backups (a few MB each).
const (
	// LogMaxSizeMB is the size, in megabytes, at which a log file is rotated.
	LogMaxSizeMB = 50
	// LogMaxBackups is how many rotated files of each log are kept.
	LogMaxBackups = 3
)

// newRotatingLog returns a writer appending to the log file at path that
// rotates it at LogMaxSizeMB. The file is created, mode 0600, on first write.
func newRotatingLog(path string) *lumberjack.Logger {
	return &lumberjack.Logger{
		Filename:   path,
		MaxSize:    LogMaxSizeMB,
		MaxBackups: LogMaxBackups,
		Compress:   true,
	}
}

// RedirectKlog sends everything logged through klog (the apiserver's and the
// garbage collector's logs are voluminous) to the file at path, appending and
// rotating it (LogMaxSizeMB, LogMaxBackups), and keeps only fatal messages on
// stderr. Closing the returned writer closes the file.
func RedirectKlog(path string) (io.Closer, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("creating log directory: %w", err)
	}
	w := newRotatingLog(path)
	// Open the file now, so that an unwritable log fails here rather than on
	// the first log line (which klog would report on stderr).
	if _, err := w.Write(nil); err != nil {
		return nil, fmt.Errorf("opening log file: %w", err)
	}
	fs := flag.NewFlagSet("klog-redirect", flag.ContinueOnError)
	klog.InitFlags(fs)
	for k, v := range map[string]string{"logtostderr": "false", "alsologtostderr": "false", "stderrthreshold": "FATAL", "one_output": "true"} {
		if err := fs.Set(k, v); err != nil {
			w.Close()
			return nil, fmt.Errorf("configuring klog: %w", err)
		}
	}
	klog.SetOutput(w)
	return w, nil
}
