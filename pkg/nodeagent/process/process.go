package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/cgroup"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/logfile"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/sandbox"
)

// Name is the runtime's name for --runtime.
const Name = "process"

// ReasonNoCommand is the terminated reason of a container without command.
const ReasonNoCommand = "NoCommand"

// ReasonStartError is the terminated reason of a command that could not be
// executed (not found, not executable), as container runtimes report it.
const ReasonStartError = "StartError"

// Isolation modes of Options.Isolation.
const (
	// IsolationAuto gives each container a private filesystem view when
	// this machine allows it (probed by New).
	IsolationAuto = "auto"
	// IsolationOff never does: containers see the host's filesystem, and
	// specs with mounts are refused.
	IsolationOff = "off"
)

// ReasonCreateContainerError is the terminated reason of a container whose
// filesystem view could not be built.
const ReasonCreateContainerError = sandbox.ReasonCreateContainerError

// Options configure the process runtime.
type Options struct {
	// StateDir holds one file per running sandbox and the sandboxes'
	// scratch directories (required).
	StateDir string
	// LogMaxSize is the log rotation size; 0 means logfile.DefaultMaxSize.
	LogMaxSize int64
	// Clock times grace periods and stamps log lines; nil means the real clock.
	Clock clock.WithTicker
	// Isolation is IsolationAuto (default) or IsolationOff.
	Isolation string
	// Executable is the program started as each attempt's sandbox; it must
	// link package sandbox. Default: this process's executable.
	Executable string
	// OrphanTimeout is how long the attempt of a spec with a StateDir
	// keeps running after the agent went away, waiting for a restarted
	// agent to adopt it, before its sandbox stops it; 0 means
	// sandbox.DefaultOrphanTimeout (5 minutes).
	OrphanTimeout time.Duration
	// Hide are host directories the host-mode view of every container
	// shows empty (sandbox.Config.Hide): the agent's data directory.
	Hide []string
	// StartTimeout bounds how long a sandbox may take to report that the
	// container's command runs (building the view and resolving the user
	// included), and the isolation probe; a sandbox that takes longer is
	// killed and the start fails with CreateContainerError. 0 means
	// sandbox.DefaultStartTimeout, the kubelet's runtime request timeout
	// (2 minutes).
	StartTimeout time.Duration
	// Cgroups makes each attempt's cgroup below its pod's
	// (Spec.CgroupParent) and enforces its limits; nil: containers get
	// none, and CgroupsReason says why.
	Cgroups       *cgroup.Manager
	CgroupsReason string
}

// Runtime runs containers as host processes, each in a sandbox (package
// sandbox).
type Runtime struct {
	// opts are the options with defaults applied.
	opts Options
	// isolated is true when containers get a private filesystem view.
	isolated bool
	// isolationReason says why they do not.
	isolationReason string
	// rro is true when containers get a private view and the kernel can
	// make mounts recursively read-only.
	rro bool
	// uts is true when each container gets a UTS namespace of its own,
	// named after its pod (only with isolated).
	uts bool
	// utsReason says why it does not.
	utsReason string
	// subIDs are the subordinate ids sandboxes map, for an agent that is
	// not root; nil: they map the user alone.
	subIDs *sandbox.SubIDs
	// pidns is true when each container gets a PID namespace (only with
	// isolated).
	pidns bool
	// pidnsReason says why it does not.
	pidnsReason string
	// userns is true when containers can have a user namespace of their
	// own (hostUsers: false: as root, with idmapped mounts); usernsReason
	// says why they cannot.
	userns       bool
	usernsReason string
	// podNS are the pods' shared PID namespaces (shareProcessNamespace).
	podNS podNamespaces

	// mu guards running.
	mu sync.Mutex
	// running maps sandbox PIDs to their handles.
	running map[int]*handle
}

var (
	_ runtime.Runtime       = (*Runtime)(nil)
	_ runtime.Isolator      = (*Runtime)(nil)
	_ runtime.Killer        = (*Runtime)(nil)
	_ runtime.PIDNamespacer = (*Runtime)(nil)
	_ runtime.Adopter       = (*Runtime)(nil)
	_ runtime.CgroupRuntime = (*Runtime)(nil)
)

// New returns a process runtime. It first kills what the sandboxes of a
// previous run of the agent left behind (recorded in opts.StateDir), then
// probes whether containers can have a private filesystem view.
func New(ctx context.Context, opts Options) (*Runtime, error) {
	if opts.StateDir == "" {
		return nil, errors.New("process runtime: StateDir is required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Isolation == "" {
		opts.Isolation = IsolationAuto
	}
	if opts.Isolation != IsolationAuto && opts.Isolation != IsolationOff {
		return nil, fmt.Errorf("process runtime: unknown isolation %q (want %q or %q)", opts.Isolation, IsolationAuto, IsolationOff)
	}
	if opts.Executable == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("process runtime: finding the agent's executable: %w", err)
		}
		opts.Executable = exe
	}
	if err := os.MkdirAll(opts.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating process state dir: %w", err)
	}
	killStale(ctx, opts.StateDir)
	r := &Runtime{opts: opts, running: map[int]*handle{}}
	switch opts.Isolation {
	case IsolationOff:
		r.isolationReason = "disabled by the agent's options"
	default:
		if err := sandbox.Probe(ctx, opts.Executable, filepath.Join(r.scratchRoot(), "probe"), opts.StartTimeout); err != nil {
			r.isolationReason = err.Error()
		} else {
			r.isolated = true
		}
	}
	r.probeSubIDs(ctx)
	r.probeUTS(ctx)
	r.probePID(ctx)
	r.probeUserNamespaces(ctx)
	r.rro = r.isolated && sandbox.RecursiveReadOnlySupported()
	return r, nil
}

// probeSubIDs finds out, for an agent that is not root, whether its
// sandboxes can map the user's subordinate ids (so that containers may
// run as other users than root), and logs the answer.
func (r *Runtime) probeSubIDs(ctx context.Context) {
	if !r.isolated || os.Getuid() == 0 {
		return
	}
	logger := klog.FromContext(ctx)
	ids, err := sandbox.DetectSubIDs()
	if err == nil {
		err = sandbox.ProbeSubIDs(ctx, r.opts.Executable, filepath.Join(r.scratchRoot(), "probe-subids"), r.opts.StartTimeout, ids)
	}
	if err != nil {
		logger.Info("Containers can run as root only (their user namespace maps this user alone)", "reason", err.Error(), "advice", sandbox.SubIDAdvice)
		return
	}
	r.subIDs = ids
	logger.Info("Containers' user namespaces map this user's subordinate ids: containers may run as users 0 to 65536", "uid", ids.UID, "gid", ids.GID, "size", ids.Size)
}

// probeUTS finds out whether containers can have a UTS namespace of their
// own, named after the pod, and logs the answer. A machine that does not
// allow it runs containers with the host's name: never a reason to fail
// one.
func (r *Runtime) probeUTS(ctx context.Context) {
	logger := klog.FromContext(ctx)
	switch {
	case !r.isolated:
		r.utsReason = "containers get no namespaces: " + r.isolationReason
	default:
		if err := sandbox.ProbeUTS(ctx, r.opts.Executable, r.opts.StartTimeout); err != nil {
			r.utsReason = "no UTS namespace: " + err.Error()
		} else {
			r.uts = true
		}
	}
	if r.uts {
		logger.Info("Containers get a UTS namespace of their own: hostname prints the pod's hostname")
	} else {
		logger.Info("WARNING: containers see this host's hostname, not their pod's", "reason", r.utsReason)
	}
}

// probePID finds out whether containers can have PID namespaces, and logs
// the answer. A machine that does not allow it runs containers in the
// host's PID namespace: never a reason to fail one.
func (r *Runtime) probePID(ctx context.Context) {
	logger := klog.FromContext(ctx)
	switch {
	case !r.isolated:
		r.pidnsReason = "containers get no namespaces: " + r.isolationReason
	default:
		if err := sandbox.ProbePID(ctx, r.opts.Executable, filepath.Join(r.scratchRoot(), "probe-pid"), r.opts.StartTimeout); err != nil {
			r.pidnsReason = "no PID namespace: " + err.Error()
		} else {
			r.pidns = true
		}
	}
	if r.pidns {
		logger.Info("Containers get a PID namespace of their own (their pod's with shareProcessNamespace): the main process is PID 1 and ps shows the container's processes")
	} else {
		logger.Info("WARNING: containers see every process of this host", "reason", r.pidnsReason)
	}
}

// probeUserNamespaces finds out whether containers can have a user
// namespace of their own, and logs the answer. A pod with hostUsers: false
// is refused where they cannot.
func (r *Runtime) probeUserNamespaces(ctx context.Context) {
	logger := klog.FromContext(ctx)
	switch {
	case os.Getuid() != 0:
		r.usernsReason = "the node agent does not run as root: every container's sandbox already has a user namespace mapping the agent's user"
	case !r.pidns:
		r.usernsReason = "containers get no PID namespace (" + r.pidnsReason + "), which a user namespace of their own needs"
	default:
		if err := sandbox.ProbeUserNamespace(ctx, r.opts.Executable, filepath.Join(r.scratchRoot(), "probe-userns"), r.opts.StartTimeout); err != nil {
			r.usernsReason = "no user namespace with idmapped mounts: " + err.Error()
		} else {
			r.userns = true
		}
	}
	if r.userns {
		logger.Info("Pods with hostUsers: false get a user namespace of their own, with idmapped volumes")
	} else if os.Getuid() == 0 {
		logger.Info("Pods with hostUsers: false are refused", "reason", r.usernsReason)
	}
}

// UserNamespaces implements runtime.UserNamespacer.
func (r *Runtime) UserNamespaces() (bool, string) { return r.userns, r.usernsReason }

// PIDNamespaces implements runtime.PIDNamespacer.
func (r *Runtime) PIDNamespaces() (bool, string) { return r.pidns, r.pidnsReason }

// SharedPIDNamespaces implements runtime.PIDNamespacer: only as root. As
// another user each sandbox has a user namespace of its own, which may not
// enter a PID namespace another sandbox's user namespace owns.
func (r *Runtime) SharedPIDNamespaces() (bool, string) {
	switch {
	case !r.pidns:
		return false, r.pidnsReason
	case os.Getuid() != 0:
		return false, "the node agent does not run as root: each container has a user namespace of its own, which may not enter another container's PID namespace"
	}
	return true, ""
}

// RecursiveReadOnlyMounts implements runtime.RecursiveReadOnlyMounter:
// where containers get a private view and the kernel has mount_setattr
// (Linux 5.12), as runc needs it.
func (r *Runtime) RecursiveReadOnlyMounts() bool { return r.rro }

// Isolation implements runtime.Isolator.
func (r *Runtime) Isolation() (bool, string) { return r.isolated, r.isolationReason }

// NetworkNamespaces implements runtime.NetworkJoiner: a sandbox joins a
// network namespace as root, or from an agent with CAP_NET_ADMIN and
// CAP_SYS_ADMIN in its user namespace, which owns the pods' (entering
// one needs CAP_SYS_ADMIN in the user namespace that owns it): the
// rootless node's.
func (r *Runtime) NetworkNamespaces() (bool, string) {
	if !sandbox.CanNetwork() {
		return false, "joining a network namespace needs root, or CAP_NET_ADMIN and CAP_SYS_ADMIN in the agent's user namespace"
	}
	return true, ""
}

// UTS reports whether containers get a UTS namespace of their own, where
// their hostname is Spec.Hostname; when not, reason says why, and they see
// the host's name.
func (r *Runtime) UTS() (ok bool, reason string) { return r.uts, r.utsReason }

// scratchRoot holds the sandboxes' scratch directories.
func (r *Runtime) scratchRoot() string { return filepath.Join(r.opts.StateDir, "scratch") }

// Name implements runtime.Runtime.
func (r *Runtime) Name() string { return Name }

// Start implements runtime.Runtime. It returns once the container's command
// runs, or fails with a *runtime.StartError; a sandbox that has not started
// the command within Options.StartTimeout, or when ctx ends, is killed
// and the start fails with CreateContainerError.
func (r *Runtime) Start(ctx context.Context, spec runtime.Spec) (runtime.Handle, error) {
	if len(spec.Command) == 0 {
		msg := "the container sets neither command nor args: in host mode the process runtime does not look at images, so it does not know their entrypoint"
		if spec.Rootfs != nil {
			msg = "neither the container nor its image sets a command (entrypoint or cmd)"
		}
		return nil, &runtime.StartError{Reason: ReasonNoCommand, Message: msg}
	}
	if spec.Rootfs != nil && !r.isolated {
		return nil, &runtime.StartError{Reason: ReasonCreateContainerError, Message: "running an image needs a private mount namespace, which this node cannot give: " + r.isolationReason}
	}
	if spec.ReadOnlyRoot && !r.isolated {
		return nil, &runtime.StartError{Reason: ReasonCreateContainerError, Message: "readOnlyRootFilesystem needs a private filesystem view, which this node cannot give: " + r.isolationReason}
	}
	if len(spec.Mounts) > 0 && !r.isolated {
		return nil, &runtime.StartError{Reason: ReasonCreateContainerError, Message: "the container has volume mounts but this node cannot give it a private filesystem view: " + r.isolationReason}
	}
	cfg := sandboxConfig(spec, r.isolated)
	if cfg.Rootfs == nil {
		cfg.Hide = r.opts.Hide
	}
	if durable(spec) {
		cfg.StateDir, cfg.LogPath, cfg.LogMaxSize = spec.StateDir, spec.LogPath, r.opts.LogMaxSize
		cfg.OrphanTimeout, cfg.StopGrace = r.opts.OrphanTimeout, spec.GracePeriod
	}
	if r.isolated {
		if err := os.MkdirAll(r.scratchRoot(), 0o700); err != nil {
			return nil, fmt.Errorf("creating scratch directory: %w", err)
		}
		dir, err := os.MkdirTemp(r.scratchRoot(), "c-")
		if cfg.StateDir != "" {
			// Kept with the attempt: the next run of the agent, which
			// clears the scratch root, must not touch it.
			dir = filepath.Join(cfg.StateDir, "scratch")
			err = os.Mkdir(dir, 0o700)
		}
		if err != nil {
			return nil, fmt.Errorf("creating scratch directory: %w", err)
		}
		cfg.Scratch = dir
	}
	pc, err := r.pidNamespace(ctx, spec)
	if err == nil && spec.NetworkNamespace != "" {
		if pc.net, err = openNetworkNamespace(spec.NetworkNamespace); err != nil {
			if pc.release != nil {
				pc.release()
			}
			pc.close()
		}
	}
	if err != nil {
		if cfg.Scratch != "" {
			_ = os.Remove(cfg.Scratch)
		}
		return nil, err
	}
	cfg.PIDNamespace = pc.mode
	if pc.join != nil || pc.release != nil {
		// Its PID namespace is another sandbox's (the pod's pause, or a
		// target container's), which ends with the agent: the attempt
		// cannot outlive it.
		cfg.StateDir, cfg.LogPath = "", ""
	}
	cg, err := r.newAttemptCgroup(spec)
	if err != nil {
		if cfg.Scratch != "" {
			_ = os.Remove(cfg.Scratch)
		}
		if pc.release != nil {
			pc.release()
		}
		pc.close()
		return nil, err
	}
	if cg != nil && cfg.Isolate {
		// The container reads its own limits at /sys/fs/cgroup, as runc
		// shows them.
		for _, d := range cg.c.Dirs() {
			cfg.CgroupViews = append(cfg.CgroupViews, sandbox.CgroupView{Source: d.Source, Target: d.Target})
		}
	}
	h, err := r.start(ctx, spec, cfg, pc, cg)
	if err != nil {
		if cfg.Scratch != "" {
			_ = os.Remove(cfg.Scratch)
		}
		cg.started()
		cg.remove()
	}
	return h, err
}

// sandboxIDMapping is the sandbox's user namespace mapping of a pod's
// range; nil without one.
func sandboxIDMapping(r *runtime.IDRange) *sandbox.IDMapping {
	if r == nil {
		return nil
	}
	return &sandbox.IDMapping{HostUID: r.HostID, HostGID: r.HostID, Size: r.Length}
}

// close closes the namespaces' descriptors (the sandbox has its own).
func (pc pidChoice) close() {
	for _, f := range []*os.File{pc.join, pc.users, pc.net} {
		if f != nil {
			_ = f.Close()
		}
	}
}

// sandboxConfig is what the sandbox of spec runs, before its scratch
// directory is chosen. In host mode Spec.User is nil (the agent's user and
// groups) or names the agent's user with the pod's supplemental groups.
func sandboxConfig(spec runtime.Spec, isolate bool) sandbox.Config {
	cfg := sandbox.Config{Isolate: isolate, Command: spec.Command, Env: spec.Env, WorkingDir: spec.WorkingDir, Hostname: spec.Hostname, TTY: spec.TTY, ReadOnlyRoot: spec.ReadOnlyRoot, NoNewPrivileges: spec.NoNewPrivileges, OOMScoreAdj: spec.OOMScoreAdj,
		Privileged: spec.Privileged, UnmaskedProc: spec.UnmaskedProc}
	if !spec.Privileged {
		// As containerd: its default set, with the container's additions
		// and drops.
		cfg.Capabilities = sandbox.ContainerCapabilities(spec.CapabilitiesAdd, spec.CapabilitiesDrop)
	}
	if sc := spec.Seccomp; sc != nil {
		cfg.Seccomp = &sandbox.Seccomp{RuntimeDefault: sc.RuntimeDefault, Profile: sc.Profile, Name: sc.Name}
	}
	for _, m := range spec.Mounts {
		cfg.Mounts = append(cfg.Mounts, sandbox.Mount{Source: m.Source, SubPath: m.SubPath, Target: m.Target, ReadOnly: m.ReadOnly, RecursiveReadOnly: m.RecursiveReadOnly,
			Image: m.ImageVolume != "", Layers: m.Layers})
	}
	cfg.UserNamespace = sandboxIDMapping(spec.UserNamespace)
	if spec.Rootfs != nil {
		cfg.Rootfs = &sandbox.Rootfs{Layers: spec.Rootfs.Layers}
	}
	if u := spec.User; u != nil {
		cfg.User = &sandbox.User{Image: u.Image, RunAsUser: u.RunAsUser, RunAsGroup: u.RunAsGroup,
			SupplementalGroups: u.SupplementalGroups, StrictGroups: u.StrictGroups}
	}
	return cfg
}

// start runs the sandbox of one attempt with its output going to the log:
// stored by the sandbox itself when it is durable, else by this process.
func (r *Runtime) start(ctx context.Context, spec runtime.Spec, cfg sandbox.Config, pc pidChoice, cg *attemptCgroup) (runtime.Handle, error) {
	if cfg.StateDir != "" {
		return r.startDurable(ctx, spec, cfg, pc, cg)
	}
	release := func() {
		if pc.release != nil {
			pc.release()
		}
	}
	defer pc.close()
	lw, err := logfile.NewWriter(spec.LogPath, r.opts.LogMaxSize, r.opts.Clock)
	if err != nil {
		release()
		return nil, err
	}
	std, err := newStdio(spec, lw)
	if err != nil {
		release()
		_ = lw.Close()
		return nil, err
	}
	startedAt := r.opts.Clock.Now()
	sb, err := sandbox.Start(ctx, sandbox.StartOptions{
		SubIDs:     r.subIDs,
		Executable: r.opts.Executable,
		Config:     cfg,
		Namespaces: cfg.Isolate,
		UTS:        cfg.Isolate && r.uts,
		Stdin:      std.child[0],
		Stdout:     std.child[1],
		Stderr:     std.child[2],
		Timeout:    r.opts.StartTimeout,
		Cgroup:     cg.sandboxFiles(),

		JoinPIDNamespace:  pc.join,
		JoinUserNamespace: pc.users,
		Network:           pc.network(),

		JoinNetworkNamespace: pc.net,
	})
	cg.started()
	if err != nil {
		release()
		// What the sandbox printed before failing is kept in the log.
		std.started()
		std.wait()
		_ = lw.Close()
		return nil, startError(err, "")
	}
	std.started()
	h := &handle{rt: r, sb: sb, pid: sb.PID(), done: make(chan struct{}), started: startedAt, stdio: std, cg: cg}
	spid := sb.SandboxPID()
	pidFile := r.recordSandbox(sb, spec.PodNamespace+"/"+spec.PodName+"/"+spec.ContainerName)
	r.mu.Lock()
	r.running[spid] = h
	r.mu.Unlock()
	go func() {
		<-sb.Done()
		release()
		std.wait()
		_ = lw.Close()
		_ = os.Remove(pidFile)
		if cfg.Scratch != "" {
			_ = os.Remove(cfg.Scratch)
		}
		h.finish(cg.ended(resultOf(sb.Exit(), startedAt, r.opts.Clock.Now())))
		cg.remove()
		r.mu.Lock()
		delete(r.running, spid)
		r.mu.Unlock()
	}()
	return h, nil
}

// recordSandbox records a running sandbox in the state directory (see
// killStale) and returns the file.
func (r *Runtime) recordSandbox(sb *sandbox.Sandbox, what string) string {
	return r.recordDurable(sb, what, "")
}

// forgetSandbox removes the record of a sandbox that ended.
func (r *Runtime) forgetSandbox(sb *sandbox.Sandbox) {
	_ = os.Remove(filepath.Join(r.opts.StateDir, strconv.Itoa(sb.SandboxPID())))
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
		h.sb.Kill()
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

// resultOf turns the main process's exit into a container result.
func resultOf(ex sandbox.Exit, startedAt, finishedAt time.Time) runtime.Result {
	res := runtime.Result{StartedAt: startedAt, FinishedAt: finishedAt, ExitCode: ex.Code, Signal: ex.Signal}
	res.Reason = runtime.ReasonFor(res.ExitCode)
	if ex.Lost {
		res.Message = "the container's sandbox process was killed"
	}
	return res
}

// handle is one running attempt.
type handle struct {
	// rt is the owning runtime.
	rt *Runtime
	// sb is the attempt's sandbox.
	sb *sandbox.Sandbox
	// pid is the main process's id.
	pid int
	// started is when the process started.
	started time.Time
	// stdio are the main process's streams; nil for a durable sandbox,
	// which stores its output itself in the log at logPath.
	stdio   *stdio
	logPath string
	// done is closed when the process has ended and its output is stored.
	done chan struct{}
	// stopOnce makes Stop idempotent.
	stopOnce sync.Once

	// cg is the attempt's cgroup; nil when it has none.
	cg *attemptCgroup

	// mu guards result.
	mu sync.Mutex
	// result is set before done is closed.
	result runtime.Result
}

var (
	_ runtime.Handle        = (*handle)(nil)
	_ runtime.Execer        = (*handle)(nil)
	_ runtime.Attacher      = (*handle)(nil)
	_ runtime.UserReporter  = (*handle)(nil)
	_ runtime.Resizer       = (*handle)(nil)
	_ runtime.StatsReporter = (*handle)(nil)
)

// User implements runtime.UserReporter: who the sandbox says the main
// process runs as.
func (h *handle) User() *runtime.ContainerUser {
	id := h.sb.User()
	if id == nil {
		return nil
	}
	u := &runtime.ContainerUser{UID: int64(id.UID), GID: int64(id.GID)}
	for _, g := range id.Groups {
		u.SupplementalGroups = append(u.SupplementalGroups, int64(g))
	}
	return u
}

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

// Stop implements runtime.Handle: SIGTERM to the main process alone, as a
// container runtime signals PID 1, and after grace every process of the
// attempt is killed.
func (h *handle) Stop(grace time.Duration) {
	h.stopOnce.Do(func() {
		select {
		case <-h.done:
			return
		default:
		}
		if grace <= 0 {
			h.sb.Kill()
			return
		}
		t := h.rt.opts.Clock.NewTimer(grace)
		go func() {
			defer t.Stop()
			// In here: a sandbox that stopped reading its requests
			// holds Signal for a few seconds.
			_ = h.sb.Signal(syscall.SIGTERM)
			select {
			case <-h.done:
			case <-t.C():
				h.sb.Kill()
			}
		}()
	})
}

// startError returns err, a sandbox's StartFailure in it made the
// runtime's StartError (its message after prefix), so that the container
// is reported with the failure's reason.
func startError(err error, prefix string) error {
	var sf *sandbox.StartFailure
	if errors.As(err, &sf) {
		return &runtime.StartError{Reason: sf.Reason, Message: prefix + sf.Message}
	}
	return err
}

// Exec implements runtime.Execer.
func (h *handle) Exec(ctx context.Context, req runtime.ExecRequest) (int32, error) {
	p, err := h.sb.Exec(ctx, req.Command, req.TTY, req.Stdin, req.Stdout, req.Stderr)
	if err != nil {
		return 0, startError(err, "")
	}
	return p.Wait(ctx)
}

// Attach implements runtime.Attacher.
func (h *handle) Attach(ctx context.Context, req runtime.AttachRequest) error {
	if h.stdio == nil {
		return h.attachLog(ctx, req)
	}
	return h.stdio.attach(ctx, req)
}
