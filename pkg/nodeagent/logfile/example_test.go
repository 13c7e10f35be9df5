package logfile_test

import (
	"context"
	"os"
	"path/filepath"

	"k8s.io/utils/clock"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/logfile"
)

// ExampleRead stores two lines of a container and prints the last one.
func ExampleRead() {
	dir, _ := os.MkdirTemp("", "logs")
	defer func() { _ = os.RemoveAll(dir) }()
	path := filepath.Join(dir, "0.log")
	w, _ := logfile.NewWriter(path, 0, clock.RealClock{})
	_, _ = w.Stream("stdout").Write([]byte("first\nsecond\n"))
	_ = w.Close()
	_ = logfile.Read(context.Background(), path, logfile.ReadOptions{TailLines: 1}, os.Stdout)
	// Output: second
}
