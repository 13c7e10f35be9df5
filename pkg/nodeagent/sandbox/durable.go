package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/utils/clock"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/logfile"
)

// A durable sandbox (Config.StateDir set) is to its container what a
// container runtime's shim is: it outlives the agent. Its state directory
// holds:
//
//   - control.sock: a listening socket; a restarted agent connects to it
//     (Adopt) and the sandbox serves it as it served the agent that
//     started it (exec, signals, kill, the main process's end);
//   - state.json: the main process's PID and start time, written once it
//     runs;
//   - exit.json: how the main process ended, written when it has, before
//     the exit is reported to an agent, so an agent that was away when it
//     happened reads it there.
//
// The sandbox writes the container's log itself (Config.LogPath), so the
// output of a container whose agent is away is neither lost nor blocked.
// When its agent goes away the sandbox kills the commands that agent
// exec'd (their streams went with it) and keeps the main process running
// for Config.OrphanTimeout; then it stops the container as the kubelet
// would (SIGTERM to the main process, everything killed after
// Config.StopGrace), records the exit and ends. Paths are used only before
// the sandbox enters the container's view: afterwards it reaches these
// files through directory descriptors.

// Files in a durable sandbox's state directory.
const (
	socketName = "control.sock"
	stateName  = "state.json"
	exitName   = "exit.json"
)

// DefaultOrphanTimeout is how long a durable sandbox waits for an agent to
// adopt it after its own went away: long enough for `jobkeeper up` to be
// restarted by hand or by a supervisor, short enough that a container whose
// node agent never comes back does not run on unnoticed.
const DefaultOrphanTimeout = 5 * time.Minute

// DefaultStopGrace is the grace period of an orphaned container's stop when
// Config.StopGrace is 0: the pods' default terminationGracePeriodSeconds.
const DefaultStopGrace = 30 * time.Second

// ErrNotRunning is returned by Adopt when no sandbox listens in the state
// directory: it ended (ReadRecord says how) or never started.
var ErrNotRunning = errors.New("no sandbox runs there")

// stateRecord is state.json.
type stateRecord struct {
	// SandboxPID and SandboxStart identify the sandbox process (see
	// KillSession).
	SandboxPID   int    `json:"sandboxPID"`
	SandboxStart uint64 `json:"sandboxStart"`
	// MainPID is the container's main process.
	MainPID int `json:"mainPID"`
	// StartedAt is when the main process started.
	StartedAt time.Time `json:"startedAt"`
	// LogPath is the container's log (Config.LogPath).
	LogPath string `json:"logPath"`
	// User is who the main process runs as, when the sandbox was given a
	// User.
	User *Identity `json:"user,omitempty"`
}

// exitRecord is exit.json.
type exitRecord struct {
	// Code and Signal are as in Exit.
	Code   int32 `json:"code"`
	Signal int32 `json:"signal,omitempty"`
	// FinishedAt is when the main process ended.
	FinishedAt time.Time `json:"finishedAt"`
}

// Record is what a durable sandbox left in its state directory.
type Record struct {
	// SandboxPID and SandboxStart identify the sandbox process.
	SandboxPID   int
	SandboxStart uint64
	// MainPID is the main process's PID.
	MainPID int
	// StartedAt is when the main process started.
	StartedAt time.Time
	// LogPath is where the sandbox stores the container's output.
	LogPath string
	// User is who the main process runs as (nil: the sandbox's user).
	User *Identity
	// Exited is true once the main process ended; Exit says how.
	Exited bool
	Exit   Exit
}

// ReadRecord reads the state directory of a durable sandbox. It fails
// (os.ErrNotExist) when no main process was ever started there.
func ReadRecord(dir string) (Record, error) {
	var st stateRecord
	if err := readJSON(filepath.Join(dir, stateName), &st); err != nil {
		return Record{}, err
	}
	rec := Record{SandboxPID: st.SandboxPID, SandboxStart: st.SandboxStart, MainPID: st.MainPID, StartedAt: st.StartedAt, LogPath: st.LogPath, User: st.User}
	var ex exitRecord
	switch err := readJSON(filepath.Join(dir, exitName), &ex); {
	case err == nil:
		rec.Exited = true
		rec.Exit = Exit{Code: ex.Code, Signal: ex.Signal, FinishedAt: ex.FinishedAt}
	case !errors.Is(err, os.ErrNotExist):
		return rec, err
	}
	return rec, nil
}

// Alive reports whether the sandbox process of rec still runs.
func (rec Record) Alive() bool {
	return rec.SandboxPID > 1 && StartTime(rec.SandboxPID) == rec.SandboxStart
}

// readJSON decodes a small JSON file.
func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decoding %s: %w", path, err)
	}
	return nil
}

// socketPath names the control socket in the directory open as dir. Going
// through /proc keeps the name short whatever the directory's path (a
// socket's path may not exceed 107 bytes).
func socketPath(dir *os.File) string {
	return "/proc/self/fd/" + strconv.Itoa(int(dir.Fd())) + "/" + socketName
}

// durable is the supervisor's side of a durable sandbox.
type durable struct {
	// dir is the state directory.
	dir *os.File
	// logDir is the log file's directory, log the log's writer.
	logDir *os.File
	log    *logfile.Writer
	// ln is the control socket's listener.
	ln *net.UnixListener
	// copies are the goroutines storing stdout and stderr.
	copies sync.WaitGroup
	// orphanTimeout and stopGrace are the Config's, defaults applied.
	orphanTimeout, stopGrace time.Duration
	// logPath is Config.LogPath, recorded for the next agent.
	logPath string
	// self and selfStart identify this process, read before the view
	// (whose /proc may be a PID namespace's) is entered.
	self      int
	selfStart uint64
}

// openDurable opens what a durable sandbox needs before it enters the
// container's view: its state directory, its log file and its listener.
func openDurable(cfg Config) (*durable, error) {
	d := &durable{orphanTimeout: cfg.OrphanTimeout, stopGrace: cfg.StopGrace, logPath: cfg.LogPath, self: os.Getpid()}
	d.selfStart = StartTime(d.self)
	if d.orphanTimeout <= 0 {
		d.orphanTimeout = DefaultOrphanTimeout
	}
	if d.stopGrace <= 0 {
		d.stopGrace = DefaultStopGrace
	}
	var err error
	if d.dir, err = os.Open(cfg.StateDir); err != nil {
		return nil, fmt.Errorf("opening the sandbox's state directory: %w", err)
	}
	if cfg.LogPath == "" {
		d.close()
		return nil, errors.New("a durable sandbox needs a log path")
	}
	if d.logDir, err = os.Open(filepath.Dir(cfg.LogPath)); err != nil {
		d.close()
		return nil, fmt.Errorf("opening the log directory: %w", err)
	}
	if d.log, err = logfile.NewWriterIn(d.logDir, filepath.Base(cfg.LogPath), cfg.LogMaxSize, clock.RealClock{}); err != nil {
		d.close()
		return nil, err
	}
	_ = unix.Unlinkat(int(d.dir.Fd()), socketName, 0)
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: socketPath(d.dir), Net: "unixpacket"})
	if err != nil {
		d.close()
		return nil, fmt.Errorf("listening for the agent: %w", err)
	}
	// The name above only resolves in this process; the socket is removed
	// by descriptor (close).
	ln.SetUnlinkOnClose(false)
	d.ln = ln
	return d, nil
}

// output starts storing the main process's output: it returns the write
// ends of the two pipes to give the process, which the caller closes once
// the process has them.
func (d *durable) output() (stdout, stderr *os.File, err error) {
	or, ow, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("creating the output pipe: %w", err)
	}
	er, ew, err := os.Pipe()
	if err != nil {
		_ = or.Close()
		_ = ow.Close()
		return nil, nil, fmt.Errorf("creating the output pipe: %w", err)
	}
	for stream, r := range map[string]*os.File{"stdout": or, "stderr": er} {
		d.copies.Go(func() {
			_, _ = io.Copy(d.log.Stream(stream), r)
			_ = r.Close()
		})
	}
	return ow, ew, nil
}

// writeState records the main process once it runs.
func (d *durable) writeState(mainPID int, startedAt time.Time, user *Identity) error {
	return d.writeFile(stateName, stateRecord{SandboxPID: d.self, SandboxStart: d.selfStart, MainPID: mainPID, StartedAt: startedAt, LogPath: d.logPath, User: user})
}

// finish stores what is left of the output (waiting a bounded time for the
// pipes to close: every process of the attempt was killed) and records the
// main process's end.
func (d *durable) finish(code, sig int32, finishedAt time.Time) {
	done := make(chan struct{})
	go func() { d.copies.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
	_ = d.log.Close()
	_ = d.writeFile(exitName, exitRecord{Code: code, Signal: sig, FinishedAt: finishedAt})
}

// writeFile writes v as JSON to name in the state directory, atomically
// (renamed into place).
func (d *durable) writeFile(name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	dirfd := int(d.dir.Fd())
	tmp := "." + name + ".tmp"
	fd, err := unix.Openat(dirfd, tmp, unix.O_CREAT|unix.O_TRUNC|unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	// No fsync: the file is for the next agent on this running kernel; a
	// machine that crashes takes the container with it anyway.
	f := os.NewFile(uintptr(fd), tmp)
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dirfd, tmp, dirfd, name)
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return nil
}

// close stops listening and closes the descriptors; the log is closed by
// finish.
func (d *durable) close() {
	if d.ln != nil {
		_ = unix.Unlinkat(int(d.dir.Fd()), socketName, 0)
		_ = d.ln.Close()
	}
	for _, f := range []*os.File{d.dir, d.logDir} {
		if f != nil {
			_ = f.Close()
		}
	}
}

// accept hands every connection of an agent to conns until the listener
// is closed. A peer that is not this sandbox's user (the agent's) is
// refused.
func (d *durable) accept(conns chan<- *net.UnixConn) {
	for {
		c, err := d.ln.AcceptUnix()
		if err != nil {
			return
		}
		if !sameUser(c) {
			_ = c.Close()
			continue
		}
		conns <- c
	}
}

// sameUser reports whether the peer of c runs as this process's user.
func sameUser(c *net.UnixConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || cerr != nil {
		return false
	}
	return int(cred.Uid) == os.Getuid()
}
