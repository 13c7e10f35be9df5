package sandbox

import (
	"fmt"
	"os"
)

// Probe reports whether sandboxes with a private filesystem view can be
// started here: it starts one in new namespaces that builds the view on
// scratch (an empty directory, removed afterwards) and exits. The error
// says what the machine lacks.
func Probe(executable, scratch string) error {
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		return fmt.Errorf("creating probe directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(scratch) }()
	s, err := Start(StartOptions{
		Executable: executable,
		Namespaces: true,
		Config:     Config{Isolate: true, Scratch: scratch, Probe: true},
	})
	if err != nil {
		return err
	}
	<-s.Done()
	return nil
}
