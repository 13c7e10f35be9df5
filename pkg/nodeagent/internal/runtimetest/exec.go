package runtimetest

import (
	"context"
	"strings"
	"sync"
	"time"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// FakeExecer runs exec requests with a function.
type FakeExecer struct {
	// Run gets the command and where its output goes.
	Run func(ctx context.Context, cmd []string, out *strings.Builder) (int32, error)
	// mu guards commands.
	mu sync.Mutex
	// commands are the commands run so far.
	commands [][]string
}

// Exec implements runtime.Execer.
func (f *FakeExecer) Exec(ctx context.Context, req runtime.ExecRequest) (int32, error) {
	f.mu.Lock()
	f.commands = append(f.commands, req.Command)
	f.mu.Unlock()
	var out strings.Builder
	code, err := f.Run(ctx, req.Command, &out)
	_, _ = req.Stdout.WriteString(out.String())
	return code, err
}

// ExecHandle is a runtime handle that can exec.
type ExecHandle struct{ runtime.Execer }

// PID implements runtime.Handle.
func (ExecHandle) PID() int { return 0 }

// Done implements runtime.Handle.
func (ExecHandle) Done() <-chan struct{} { return nil }

// Result implements runtime.Handle.
func (ExecHandle) Result() runtime.Result { return runtime.Result{} }

// Stop implements runtime.Handle.
func (ExecHandle) Stop(time.Duration) {}

// Commands returns the commands run so far.
func (f *FakeExecer) Commands() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]string(nil), f.commands...)
}
