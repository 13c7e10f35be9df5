package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/logfile"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/sandbox"
)

// Attempts that outlive the agent: a spec with a StateDir, and neither a
// stdin nor a terminal (which the agent holds) nor a PID namespace of
// another sandbox's, runs in a durable sandbox (sandbox.Config.StateDir),
// which stores the container's output itself and which the next run of the
// agent takes over (Adopt).

// durable reports whether the attempt of spec outlives the agent: it has a
// state directory and no stdin or terminal (which the agent holds). A
// container sharing a PID namespace is decided once that is chosen.
func durable(spec runtime.Spec) bool {
	return spec.StateDir != "" && !spec.Stdin && !spec.TTY
}

// recordDurable records a running sandbox, durable when stateDir (its
// Config.StateDir) is set, and returns the file.
func (r *Runtime) recordDurable(sb *sandbox.Sandbox, what, stateDir string) string {
	pidFile := filepath.Join(r.opts.StateDir, strconv.Itoa(sb.SandboxPID()))
	_ = os.WriteFile(pidFile, []byte(fmt.Sprintf("%s\n%d\n%s\n", what, sb.SandboxStartTime(), stateDir)), 0o600)
	return pidFile
}

// startDurable runs the sandbox of one attempt that outlives the agent:
// the sandbox stores the container's output itself.
func (r *Runtime) startDurable(ctx context.Context, spec runtime.Spec, cfg sandbox.Config, pc pidChoice, cg *attemptCgroup) (runtime.Handle, error) {
	defer pc.close()
	startedAt := r.opts.Clock.Now()
	// Named before the container runs: an agent killed right after the
	// start still finds it.
	cg.record(cfg.StateDir)
	sb, err := sandbox.Start(ctx, sandbox.StartOptions{
		SubIDs:     r.subIDs,
		Executable: r.opts.Executable,
		Config:     cfg,
		Namespaces: cfg.Isolate,
		UTS:        cfg.Isolate && r.uts,
		Timeout:    r.opts.StartTimeout,
		Cgroup:     cg.sandboxFiles(),

		Network:              pc.network(),
		JoinNetworkNamespace: pc.net,
	})
	cg.started()
	if err != nil {
		return nil, startError(err, "")
	}
	return r.hold(sb, spec.PodNamespace+"/"+spec.PodName+"/"+spec.ContainerName, cfg.StateDir, spec.LogPath, startedAt, cfg.Scratch, cg), nil
}

// hold records a durable sandbox that runs (in memory and in the state
// directory, where the next run finds it) and returns its handle, which
// ends once the sandbox has. Its output is in the log at logPath, which
// the sandbox writes; scratch is removed at the end.
func (r *Runtime) hold(sb *sandbox.Sandbox, what, stateDir, logPath string, startedAt time.Time, scratch string, cg *attemptCgroup) *handle {
	h := &handle{rt: r, sb: sb, pid: sb.PID(), done: make(chan struct{}), started: startedAt, logPath: logPath, cg: cg}
	spid := sb.SandboxPID()
	pidFile := r.recordDurable(sb, what, stateDir)
	r.mu.Lock()
	r.running[spid] = h
	r.mu.Unlock()
	go func() {
		<-sb.Done()
		_ = os.Remove(pidFile)
		if scratch != "" {
			_ = os.Remove(scratch)
		}
		h.finish(cg.ended(resultOf(sb.Exit(), startedAt, r.opts.Clock.Now())))
		cg.remove()
		r.mu.Lock()
		delete(r.running, spid)
		r.mu.Unlock()
	}()
	return h
}

// Adopt implements runtime.Adopter: it takes over the durable sandbox of
// the attempt whose state directory is dir, or reads how its container
// ended while no agent held it.
func (r *Runtime) Adopt(ctx context.Context, dir string) (runtime.Adopted, error) {
	sb, err := sandbox.Adopt(ctx, dir)
	if err == nil {
		rec, _ := sandbox.ReadRecord(dir)
		scratch := filepath.Join(dir, "scratch")
		h := r.hold(sb, dir, dir, rec.LogPath, rec.StartedAt, scratch, r.adoptedCgroup(dir))
		return runtime.Adopted{Found: true, Handle: h, PID: sb.PID(), NetPID: sb.SandboxPID(), StartedAt: rec.StartedAt}, nil
	}
	if !errors.Is(err, sandbox.ErrNotRunning) {
		return runtime.Adopted{}, err
	}
	rec, rerr := sandbox.ReadRecord(dir)
	switch {
	case errors.Is(rerr, os.ErrNotExist):
		return runtime.Adopted{}, nil
	case rerr != nil:
		return runtime.Adopted{}, rerr
	case !rec.Exited:
		// It ran, and ended without a word: killed, or its machine
		// rebooted. What happened to the container is not known.
		return runtime.Adopted{}, nil
	}
	cg := r.adoptedCgroup(dir)
	res := cg.ended(resultOf(rec.Exit, rec.StartedAt, rec.Exit.FinishedAt))
	cg.remove()
	return runtime.Adopted{Found: true, PID: rec.MainPID, StartedAt: rec.StartedAt, Result: res}, nil
}

// attachLog streams a durable attempt's output from now on, as Attach does
// for the others: the sandbox stores it in the log, so it is followed there,
// stdout and stderr each to their client. The attempt has no stdin: a
// client's is drained.
func (h *handle) attachLog(ctx context.Context, req runtime.AttachRequest) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	running := func() bool {
		select {
		case <-h.done:
			return false
		default:
			return true
		}
	}
	if req.Stdin != nil {
		go func() {
			_, _ = io.Copy(io.Discard, req.Stdin)
		}()
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for stream, w := range map[string]io.Writer{"stdout": req.Stdout, "stderr": req.Stderr} {
		if w == nil {
			continue
		}
		wg.Go(func() {
			errs <- logfile.Read(ctx, h.logPath, logfile.ReadOptions{TailLines: 0, Follow: true, Running: running, PollInterval: 100 * time.Millisecond, Stream: stream}, w)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil && ctx.Err() == nil {
			return err
		}
	}
	return nil
}
