package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/logfile"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// Name is the runtime's name for --runtime.
const Name = "process"

// ReasonNoCommand is the terminated reason of a container without command.
const ReasonNoCommand = "NoCommand"

// ReasonStartError is the terminated reason of a command that could not be
// executed (not found, not executable), as container runtimes report it.
const ReasonStartError = "StartError"

// Options configure the process runtime.
type Options struct {
	// StateDir holds one file per running process group (required).
	StateDir string
	// LogMaxSize is the log rotation size; 0 means logfile.DefaultMaxSize.
	LogMaxSize int64
	// Clock times grace periods and stamps log lines; nil means the real clock.
	Clock clock.WithTicker
}

// Runtime runs containers as host processes.
type Runtime struct {
	// opts are the options with defaults applied.
	opts Options

	// mu guards running.
	mu sync.Mutex
	// running maps process group ids to their handles.
	running map[int]*handle
}

var _ runtime.Runtime = (*Runtime)(nil)

// New returns a process runtime, killing the process groups that a previous
// run of the agent left behind in opts.StateDir.
func New(ctx context.Context, opts Options) (*Runtime, error) {
	if opts.StateDir == "" {
		return nil, errors.New("process runtime: StateDir is required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if err := os.MkdirAll(opts.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating process state dir: %w", err)
	}
	killStale(ctx, opts.StateDir)
	return &Runtime{opts: opts, running: map[int]*handle{}}, nil
}

// killStale kills the recorded process groups of a previous run.
func killStale(ctx context.Context, dir string) {
	logger := klog.FromContext(ctx)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		pgid, err := strconv.Atoi(e.Name())
		if err == nil && pgid > 1 {
			if got, err := syscall.Getpgid(pgid); err == nil && got == pgid {
				logger.Info("Killing process group left by a previous run", "pgid", pgid)
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
			}
		}
		_ = os.Remove(filepath.Join(dir, e.Name()))
	}
}

// Name implements runtime.Runtime.
func (r *Runtime) Name() string { return Name }

// Start implements runtime.Runtime.
func (r *Runtime) Start(ctx context.Context, spec runtime.Spec) (runtime.Handle, error) {
	if len(spec.Command) == 0 {
		return nil, &runtime.StartError{Reason: ReasonNoCommand, Message: "the process runtime does not pull or run images: the container must set command (and args) to run on the host"}
	}
	path, err := lookPath(spec.Command[0], spec.Env, spec.WorkingDir)
	if err != nil {
		return nil, &runtime.StartError{Reason: ReasonStartError, Message: err.Error()}
	}
	lw, err := logfile.NewWriter(spec.LogPath, r.opts.LogMaxSize, r.opts.Clock)
	if err != nil {
		return nil, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		_ = lw.Close()
		return nil, fmt.Errorf("creating output pipe: %w", err)
	}
	er, ew, err := os.Pipe()
	if err != nil {
		_ = lw.Close()
		_ = pr.Close()
		_ = pw.Close()
		return nil, fmt.Errorf("creating output pipe: %w", err)
	}
	cmd := &exec.Cmd{
		Path:        path,
		Args:        spec.Command,
		Env:         spec.Env,
		Dir:         spec.WorkingDir,
		Stdout:      pw,
		Stderr:      ew,
		SysProcAttr: sysProcAttr(),
	}
	startedAt := r.opts.Clock.Now()
	err = cmd.Start()
	_ = pw.Close()
	_ = ew.Close()
	if err != nil {
		_ = pr.Close()
		_ = er.Close()
		_ = lw.Close()
		return nil, &runtime.StartError{Reason: ReasonStartError, Message: err.Error()}
	}
	h := &handle{
		rt:      r,
		pid:     cmd.Process.Pid,
		done:    make(chan struct{}),
		started: startedAt,
	}
	pidFile := filepath.Join(r.opts.StateDir, strconv.Itoa(h.pid))
	_ = os.WriteFile(pidFile, []byte(spec.PodNamespace+"/"+spec.PodName+"/"+spec.ContainerName+"\n"), 0o600)
	r.mu.Lock()
	r.running[h.pid] = h
	r.mu.Unlock()

	var copiers sync.WaitGroup
	copiers.Add(2)
	go func() { defer copiers.Done(); _, _ = io.Copy(lw.Stream("stdout"), pr); _ = pr.Close() }()
	go func() { defer copiers.Done(); _, _ = io.Copy(lw.Stream("stderr"), er); _ = er.Close() }()
	go func() {
		err := cmd.Wait()
		// The container is over when its main process is: kill what it left.
		_ = syscall.Kill(-h.pid, syscall.SIGKILL)
		copiers.Wait()
		_ = lw.Close()
		_ = os.Remove(pidFile)
		h.finish(resultOf(cmd.ProcessState, err, startedAt, r.opts.Clock.Now()))
		r.mu.Lock()
		delete(r.running, h.pid)
		r.mu.Unlock()
	}()
	return h, nil
}

// KillAll kills every running process group at once (agent shutdown) and
// waits up to timeout for them to be reaped.
func (r *Runtime) KillAll(timeout time.Duration) {
	r.mu.Lock()
	hs := make([]*handle, 0, len(r.running))
	for _, h := range r.running {
		hs = append(hs, h)
	}
	r.mu.Unlock()
	for _, h := range hs {
		_ = syscall.Kill(-h.pid, syscall.SIGKILL)
	}
	deadline := time.After(timeout)
	for _, h := range hs {
		select {
		case <-h.done:
		case <-deadline:
			return
		}
	}
}

// resultOf turns a process state into a container result.
func resultOf(ps *os.ProcessState, waitErr error, startedAt, finishedAt time.Time) runtime.Result {
	res := runtime.Result{StartedAt: startedAt, FinishedAt: finishedAt}
	if ps == nil {
		res.ExitCode, res.Reason, res.Message = 128, ReasonStartError, fmt.Sprint(waitErr)
		return res
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		res.Signal = int32(ws.Signal())
		res.ExitCode = 128 + res.Signal
	} else {
		res.ExitCode = int32(ps.ExitCode())
	}
	res.Reason = runtime.ReasonFor(res.ExitCode)
	return res
}

// lookPath finds the executable like a container runtime would: a name with
// a slash is a path (relative to the working directory), anything else is
// searched in the container's PATH.
func lookPath(name string, env []string, dir string) (string, error) {
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := executable(p); err != nil {
			return "", fmt.Errorf("exec: %q: %w", name, err)
		}
		return p, nil
	}
	pathEnv := os.Getenv("PATH")
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v
		}
	}
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			continue
		}
		p := filepath.Join(d, name)
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("exec: %q: executable file not found in $PATH", name)
}

// executable reports whether p is a regular executable file.
func executable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if st.IsDir() || st.Mode().Perm()&0o111 == 0 {
		return errors.New("not an executable file")
	}
	return nil
}

// handle is one running process group.
type handle struct {
	// rt is the owning runtime.
	rt *Runtime
	// pid is the process (and group) id.
	pid int
	// started is when the process started.
	started time.Time
	// done is closed when the process has ended and its output is stored.
	done chan struct{}
	// stopOnce makes Stop idempotent.
	stopOnce sync.Once

	// mu guards result.
	mu sync.Mutex
	// result is set before done is closed.
	result runtime.Result
}

var _ runtime.Handle = (*handle)(nil)

// PID implements runtime.Handle.
func (h *handle) PID() int { return h.pid }

// Done implements runtime.Handle.
func (h *handle) Done() <-chan struct{} { return h.done }

// Result implements runtime.Handle.
func (h *handle) Result() runtime.Result {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.result
}

// finish records the result and closes done.
func (h *handle) finish(res runtime.Result) {
	h.mu.Lock()
	h.result = res
	h.mu.Unlock()
	close(h.done)
}

// Stop implements runtime.Handle: SIGTERM to the group, SIGKILL after grace.
func (h *handle) Stop(grace time.Duration) {
	h.stopOnce.Do(func() {
		select {
		case <-h.done:
			return
		default:
		}
		_ = syscall.Kill(-h.pid, syscall.SIGTERM)
		if grace <= 0 {
			_ = syscall.Kill(-h.pid, syscall.SIGKILL)
			return
		}
		t := h.rt.opts.Clock.NewTimer(grace)
		go func() {
			defer t.Stop()
			select {
			case <-h.done:
			case <-t.C():
				_ = syscall.Kill(-h.pid, syscall.SIGKILL)
			}
		}()
	})
}
