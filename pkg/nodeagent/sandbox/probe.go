package sandbox

import (
	"context"
	"fmt"
	"os"
	"time"
)

// Probe reports whether sandboxes with a private filesystem view can be
// started here: it starts one in new namespaces that builds the view on
// scratch (an empty directory, removed afterwards) and exits, within
// timeout (0: DefaultStartTimeout) and while ctx lasts. The error says
// what the machine lacks.
func Probe(ctx context.Context, executable, scratch string, timeout time.Duration) error {
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		return fmt.Errorf("creating probe directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(scratch) }()
	s, err := Start(ctx, StartOptions{
		Executable: executable,
		Namespaces: true,
		Config:     Config{Isolate: true, Scratch: scratch, Probe: true},
		Timeout:    timeout,
	})
	if err != nil {
		return err
	}
	<-s.Done()
	return nil
}
