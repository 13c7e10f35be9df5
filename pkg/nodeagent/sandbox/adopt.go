package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// adoptTimeout bounds the wait for a durable sandbox's first message on a
// new connection.
const adoptTimeout = 10 * time.Second

// Adopt connects to the durable sandbox whose state directory is dir, left
// running by an agent that went away, and returns it as Start returns the
// sandboxes it starts: Exec, Signal, Kill, Done and Exit work the same. The
// sandbox closes the connection of any agent that held it before. It fails
// with ErrNotRunning when no sandbox listens there (its main process's end
// is then in ReadRecord, if it ever started), or when ctx ends first.
func Adopt(ctx context.Context, dir string) (*Sandbox, error) {
	rec, err := ReadRecord(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotRunning, err)
	}
	if !rec.Alive() {
		return nil, ErrNotRunning
	}
	d, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotRunning, err)
	}
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "unixpacket", socketPath(d))
	_ = d.Close()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotRunning, err)
	}
	ctrl := conn.(*net.UnixConn)
	stop := interrupt(ctx, func() { _ = ctrl.SetReadDeadline(longAgo) })
	_ = ctrl.SetReadDeadline(time.Now().Add(adoptTimeout))
	m, files, err := receive(ctrl)
	closeAll(files)
	stop()
	_ = ctrl.SetReadDeadline(time.Time{})
	s := &Sandbox{pid: rec.SandboxPID, startTime: rec.SandboxStart, stateDir: dir, ctrl: ctrl, mainPID: rec.MainPID, user: rec.User, done: make(chan struct{}), execs: map[uint64]chan message{}}
	switch {
	case err != nil && ctx.Err() != nil:
		_ = ctrl.Close()
		return nil, ctx.Err()
	case err != nil:
		// It ended meanwhile, or never answers: either way it is not
		// held; a sandbox that never answers ends at its own bound.
		_ = ctrl.Close()
		return nil, fmt.Errorf("%w: %v", ErrNotRunning, err)
	case m.Kind != kindAdopted:
		_ = ctrl.Close()
		return nil, fmt.Errorf("%w: unexpected first message %q", ErrNotRunning, m.Kind)
	case m.PID != rec.MainPID:
		_ = ctrl.Close()
		return nil, errors.New("the sandbox runs another main process than it recorded")
	}
	go s.read()
	return s, nil
}
