package controlplane

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/klog/v2"
)

// RedirectKlog sends everything logged through klog (the apiserver's and the
// garbage collector's logs are voluminous) to the file at path, appending,
// and keeps only fatal messages on stderr. It returns the open file.
func RedirectKlog(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("creating log directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening log file: %w", err)
	}
	fs := flag.NewFlagSet("klog-redirect", flag.ContinueOnError)
	klog.InitFlags(fs)
	for k, v := range map[string]string{"logtostderr": "false", "alsologtostderr": "false", "stderrthreshold": "FATAL", "one_output": "true"} {
		if err := fs.Set(k, v); err != nil {
			f.Close()
			return nil, fmt.Errorf("configuring klog: %w", err)
		}
	}
	klog.SetOutput(f)
	return f, nil
}
