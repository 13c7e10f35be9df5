package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// StartOptions say how to start a sandbox.
type StartOptions struct {
	// Executable is the program to start as the sandbox; it must link this
	// package (the agent passes its own executable).
	Executable string
	// Config is what the sandbox runs.
	Config Config
	// Namespaces starts the sandbox in a new mount namespace, and in a new
	// user namespace (mapping the current user to root) when the current
	// user is not root. Required by Config.Isolate.
	Namespaces bool
	// SubIDs, for an agent that is not root, maps the user's subordinate
	// ids into the sandbox's user namespace (DetectSubIDs); nil maps the
	// user alone, as 0.
	SubIDs *SubIDs
	// UTS also starts the sandbox in a new UTS namespace, where it sets
	// Config.Hostname; it requires Namespaces (see ProbeUTS). Without it
	// the sandbox keeps the host's name and Config.Hostname is ignored.
	UTS bool
	// JoinPIDNamespace names the PID namespace the main process and the
	// commands exec'd into the container join (Config.PIDNamespace
	// PIDJoin): a /proc/<pid>/ns/pid file or a pidfd of a process in it.
	JoinPIDNamespace *os.File
	// JoinUserNamespace, with JoinPIDNamespace and Config.UserNamespace,
	// names the user namespace (a /proc/<pid>/ns/user file) the
	// container's processes enter instead of one of their own: that of
	// the process whose PID namespace they join (the pod's pause, a
	// target container's), so that a pod's containers share one, as with
	// the kubelet's runtimes. A build without cgo cannot enter one
	// (canEnterUserNamespace) and ignores it.
	JoinUserNamespace *os.File
	// Network is the sandbox's network namespace: the agent's
	// (NetworkHost), a new one (NetworkNew: loopback alone, and down, for
	// the agent to wire, as a pod's holder), or the one
	// JoinNetworkNamespace names (NetworkJoin: a pod's, which the
	// container's processes and the commands exec'd into it are in). A
	// sandbox is in it from its first instruction: it is started into it.
	// Both need root (an agent that is not root has no network namespace
	// to give a pod yet): Start refuses them otherwise.
	Network string
	// JoinNetworkNamespace names the network namespace of NetworkJoin (a
	// /proc/<pid>/ns/net file).
	JoinNetworkNamespace *os.File
	// Stdin, Stdout and Stderr are the main process's; nil is /dev/null.
	Stdin, Stdout, Stderr *os.File
	// Cgroup, when not nil, puts the container's processes (the main
	// process and exec'd commands) in its cgroups (cgroup.go).
	Cgroup *CgroupFiles
	// Timeout bounds how long the sandbox may take to build the view and
	// report that the main process runs; 0 means DefaultStartTimeout.
	Timeout time.Duration
}

// The network namespaces of StartOptions.Network.
const (
	NetworkHost = ""
	NetworkNew  = "new"
	NetworkJoin = "join"
)

// DefaultStartTimeout is how long Start waits for a sandbox by default:
// the kubelet's runtime request timeout.
const DefaultStartTimeout = 2 * time.Minute

// controlWriteTimeout bounds a request sent without a caller's context
// (Signal, Kill), so that a sandbox that stopped reading its control socket
// does not block the agent. A variable for tests.
var controlWriteTimeout = 5 * time.Second

// StartFailure is returned by Start when nothing runs; Reason is a
// container runtime's reason (ReasonStartError, ReasonCreateContainerError).
type StartFailure struct {
	// Reason is a CamelCase reason.
	Reason string
	// Message explains it.
	Message string
}

// Error implements error.
func (e *StartFailure) Error() string { return e.Reason + ": " + e.Message }

// Exit is how an attempt's main process ended.
type Exit struct {
	// Code is the exit code, 128+signal for a killed process.
	Code int32
	// Signal killed the process, 0 if it exited.
	Signal int32
	// Lost is true when the sandbox itself died without reporting (it was
	// killed); Code and Signal then describe the sandbox's end.
	Lost bool
	// FinishedAt is when the main process ended, as the sandbox saw it;
	// zero when it did not say (Lost).
	FinishedAt time.Time
}

// Sandbox is a running sandbox, seen from the agent.
type Sandbox struct {
	// cmd is the sandbox process; nil for an adopted sandbox, which is
	// not this process's child.
	cmd *exec.Cmd
	// pid is the sandbox process's PID, also its session id.
	pid int
	// stateDir is a durable sandbox's state directory, "" otherwise.
	stateDir string
	// ctrl is the agent's end of the control socket.
	ctrl *net.UnixConn
	// mainPID is the main process's PID.
	mainPID int
	// user is who the main process runs as; nil when the sandbox was
	// given no User.
	user *Identity
	// startTime is the sandbox's start time, for KillSession.
	startTime uint64
	// done is closed once the sandbox has exited and exit is set.
	done chan struct{}
	// exit is how the main process ended.
	exit Exit

	// mu guards nextID and execs.
	mu sync.Mutex
	// nextID numbers exec requests.
	nextID uint64
	// execs are the exec requests waiting for an answer. A request whose
	// caller gave up is removed; should the sandbox start it anyway, it is
	// asked to kill it (kindExecCancel).
	execs map[uint64]chan message
	// sendMu serialises writes on ctrl.
	sendMu sync.Mutex
	// killOnce makes Kill's backstop start once.
	killOnce sync.Once
}

// Start starts a sandbox and waits until its main process runs. A
// *StartFailure says why nothing runs. When the sandbox has not reported
// within o.Timeout, or ctx ends first, it is killed with everything in its
// session and Start fails with ReasonCreateContainerError: a sandbox stuck
// building the view (a FUSE filesystem that never answers, say) must not
// hold the pod's worker for ever.
func Start(ctx context.Context, o StartOptions) (*Sandbox, error) {
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = DefaultStartTimeout
	}
	deadline := time.Now().Add(timeout)
	if (o.Config.PIDNamespace == PIDJoin) != (o.JoinPIDNamespace != nil) {
		return nil, &StartFailure{Reason: ReasonCreateContainerError, Message: "a PID namespace to join needs PIDJoin, and PIDJoin one to join"}
	}
	if !canEnterUserNamespace || o.JoinPIDNamespace == nil || o.Config.UserNamespace == nil {
		o.JoinUserNamespace = nil
	}
	switch {
	case (o.Network == NetworkJoin) != (o.JoinNetworkNamespace != nil):
		return nil, &StartFailure{Reason: ReasonCreateContainerError, Message: "a network namespace to join needs NetworkJoin, and NetworkJoin one to join"}
	case o.Network != NetworkHost && o.Network != NetworkNew && o.Network != NetworkJoin:
		return nil, &StartFailure{Reason: ReasonCreateContainerError, Message: fmt.Sprintf("unknown network namespace mode %q", o.Network)}
	case o.Network != NetworkHost && !CanNetwork():
		return nil, &StartFailure{Reason: ReasonCreateContainerError, Message: "a network namespace of the pod's needs the agent to run as root, or with CAP_NET_ADMIN and CAP_SYS_ADMIN in its user namespace"}
	}
	ctrl, peer, err := socketPair()
	if err != nil {
		return nil, err
	}
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		_ = ctrl.Close()
		_ = peer.Close()
		return nil, fmt.Errorf("creating the sandbox config pipe: %w", err)
	}
	uts := o.Namespaces && o.UTS
	if !uts {
		// Only a UTS namespace of its own may be renamed.
		o.Config.Hostname = ""
	}
	subIDs := o.SubIDs
	if !o.Namespaces || os.Getuid() == 0 {
		subIDs = nil
	}
	args := []string{ArgvName}
	if subIDs != nil {
		args = append(args, argIDMapWait)
	}
	cmd := &exec.Cmd{
		Path:        o.Executable,
		Args:        args,
		Env:         []string{},
		ExtraFiles:  extraFiles(peer, cfgR, o.JoinPIDNamespace, o.JoinUserNamespace, o.Cgroup, &o.Config),
		SysProcAttr: sysProcAttr(o.Namespaces, uts, subIDs != nil),
	}
	if o.Network == NetworkNew {
		cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWNET
	}
	// exec.Cmd treats a nil *os.File field as "no file"; keep nil as nil.
	if o.Stdin != nil {
		cmd.Stdin = o.Stdin
	}
	if o.Stdout != nil {
		cmd.Stdout = o.Stdout
	}
	if o.Stderr != nil {
		cmd.Stderr = o.Stderr
	}
	if o.Network == NetworkJoin {
		err = startIn(o.JoinNetworkNamespace, cmd)
	} else {
		err = cmd.Start()
	}
	_ = peer.Close()
	_ = cfgR.Close()
	if err != nil {
		_ = cfgW.Close()
		_ = ctrl.Close()
		return nil, &StartFailure{Reason: ReasonCreateContainerError, Message: fmt.Sprintf("starting the sandbox: %v", err)}
	}
	s := &Sandbox{cmd: cmd, pid: cmd.Process.Pid, stateDir: o.Config.StateDir, ctrl: ctrl, done: make(chan struct{}), execs: map[uint64]chan message{}}
	s.startTime = StartTime(cmd.Process.Pid)
	if subIDs != nil {
		if err := subIDs.mapIDs(cmd.Process.Pid); err != nil {
			_ = cfgW.Close()
			s.abandon()
			return nil, &StartFailure{Reason: ReasonCreateContainerError, Message: "mapping the sandbox's subordinate ids: " + err.Error()}
		}
	}
	setOOMScoreAdj(cmd.Process.Pid, o.Config.OOMScoreAdj)
	first, err := s.handshake(ctx, cfgW, o.Config, deadline)
	switch {
	case ctx.Err() != nil && err != nil:
		s.abandon()
		return nil, &StartFailure{Reason: ReasonCreateContainerError, Message: fmt.Sprintf("starting the container was abandoned (%v); its sandbox was killed", ctx.Err())}
	case errors.Is(err, os.ErrDeadlineExceeded):
		s.abandon()
		return nil, &StartFailure{Reason: ReasonCreateContainerError, Message: fmt.Sprintf("the container did not start within %v: its sandbox did not report and was killed", timeout)}
	case err != nil:
		st := s.abandon()
		return nil, &StartFailure{Reason: ReasonCreateContainerError, Message: fmt.Sprintf("the sandbox ended before starting the container (%v; %s)", err, st)}
	case first.Kind == kindStartFailed:
		s.abandon()
		return nil, &StartFailure{Reason: first.Reason, Message: first.Message}
	case first.Kind != kindStarted:
		s.abandon()
		return nil, &StartFailure{Reason: ReasonCreateContainerError, Message: "unexpected first message from the sandbox: " + first.Kind}
	}
	s.mainPID, s.user = first.PID, first.User
	go s.read()
	return s, nil
}

// handshake sends the sandbox its config over cfgW (closing it) and reads
// the sandbox's first message. Both give up at deadline
// (os.ErrDeadlineExceeded) or when ctx ends.
func (s *Sandbox) handshake(ctx context.Context, cfgW *os.File, cfg Config, deadline time.Time) (message, error) {
	_ = cfgW.SetWriteDeadline(deadline)
	_ = s.ctrl.SetReadDeadline(deadline)
	stop := interrupt(ctx, func() {
		_ = cfgW.SetWriteDeadline(longAgo)
		_ = s.ctrl.SetReadDeadline(longAgo)
	})
	defer stop()
	err := json.NewEncoder(cfgW).Encode(cfg)
	_ = cfgW.Close()
	if err != nil {
		return message{}, fmt.Errorf("sending the sandbox its config: %w", err)
	}
	m, files, err := receive(s.ctrl)
	closeAll(files)
	stop()
	// From here on the socket is read by read(), for as long as the
	// sandbox lives.
	_ = s.ctrl.SetReadDeadline(time.Time{})
	return m, err
}

// CanNetwork says whether this process may give sandboxes network
// namespaces of their own and enter them: as root, or holding
// CAP_NET_ADMIN and CAP_SYS_ADMIN in its user namespace, as up does in the
// rootless node (where the pods' namespaces are children of its own).
func CanNetwork() bool {
	return os.Getuid() == 0 || holds(unix.CAP_NET_ADMIN, unix.CAP_SYS_ADMIN)
}

// longAgo is a deadline that has passed: setting it interrupts a blocked
// read or write.
var longAgo = time.Unix(1, 0)

// interrupt calls f once ctx ends, until stop is called. Once stop has
// returned, f is not running and will not run.
func interrupt(ctx context.Context, f func()) (stop func()) {
	fired := make(chan struct{})
	cancel := context.AfterFunc(ctx, func() {
		defer close(fired)
		f()
	})
	return sync.OnceFunc(func() {
		if !cancel() {
			// f has started: wait for it to finish.
			<-fired
		}
	})
}

// sysProcAttr starts the sandbox as the leader of a new session, in new
// namespaces when asked: mount (and user, when not root) namespaces, and
// with uts a UTS namespace. A user namespace maps the user as 0, unless
// mappedLater: its parent then maps it with subordinate ids.
func sysProcAttr(namespaces, uts, mappedLater bool) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setsid: true}
	if !namespaces {
		return attr
	}
	attr.Cloneflags = syscall.CLONE_NEWNS
	if uts {
		// Owned by the new user namespace when there is one, so the
		// sandbox may set its hostname.
		attr.Cloneflags |= syscall.CLONE_NEWUTS
	}
	if uid := os.Getuid(); uid != 0 {
		attr.Cloneflags |= syscall.CLONE_NEWUSER
		if mappedLater {
			return attr
		}
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
		attr.GidMappingsEnableSetgroups = false
	}
	return attr
}

// abandon kills a sandbox that failed to start, and whatever it started in
// its session, and reaps it; it returns how it ended.
func (s *Sandbox) abandon() string {
	_ = s.ctrl.Close()
	KillSession(s.cmd.Process.Pid, s.startTime)
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	close(s.done)
	if s.cmd.ProcessState == nil {
		return "unknown"
	}
	return s.cmd.ProcessState.String()
}

// read dispatches the sandbox's messages until it exits, then reaps it.
func (s *Sandbox) read() {
	reported := false
	for {
		m, files, err := receive(s.ctrl)
		closeAll(files)
		if err != nil {
			break
		}
		switch m.Kind {
		case kindExited:
			s.exit, reported = Exit{Code: m.Code, Signal: m.Signal}, true
			if m.At != 0 {
				s.exit.FinishedAt = time.Unix(0, m.At)
			}
		case kindExecStarted, kindExecFailed, kindExecExited:
			// Under mu, so that Exec, having removed its request, knows
			// whether the answer is in its channel.
			s.mu.Lock()
			ch := s.execs[m.ID]
			if m.Kind != kindExecStarted {
				delete(s.execs, m.ID)
			}
			if ch != nil {
				ch <- m
			}
			s.mu.Unlock()
			if ch == nil && m.Kind == kindExecStarted {
				s.cancelExec(m.ID)
			}
		}
	}
	s.wait()
	_ = s.ctrl.Close()
	if !reported {
		s.exit = s.lostExit()
		// Whatever the sandbox left behind is still in its session.
		KillSession(s.pid, s.startTime)
	}
	s.mu.Lock()
	for id, ch := range s.execs {
		ch <- message{Kind: kindExecExited, ID: id, Code: 137, Signal: int32(syscall.SIGKILL)}
		delete(s.execs, id)
	}
	s.mu.Unlock()
	close(s.done)
}

// wait waits for the sandbox process to end: reaps it when it is this
// process's child, else waits a bounded time for it to be gone (it closed
// its control socket on its way out).
func (s *Sandbox) wait() {
	if s.cmd != nil {
		_ = s.cmd.Wait()
		return
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if st, ok := readStat(s.pid); !ok || st.startTime != s.startTime || st.state == 'Z' {
			return
		}
	}
}

// lostExit is the end of a sandbox that did not report its main process's
// exit: the one a durable sandbox recorded (it reported to an agent that
// was away), else the sandbox's own end.
func (s *Sandbox) lostExit() Exit {
	if s.stateDir != "" {
		if rec, err := ReadRecord(s.stateDir); err == nil && rec.Exited {
			return rec.Exit
		}
	}
	ex := Exit{Code: 137, Signal: int32(syscall.SIGKILL), Lost: true}
	if s.cmd != nil {
		if ws, ok := s.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			ex.Signal = int32(ws.Signal())
			ex.Code = 128 + ex.Signal
		}
	}
	return ex
}

// PID is the main process's PID.
func (s *Sandbox) PID() int { return s.mainPID }

// User is who the main process runs as, in the container's ids (an
// adopted sandbox's from its state directory); nil when the sandbox was
// given no User (it runs as the sandbox's own user).
func (s *Sandbox) User() *Identity { return s.user }

// SandboxPID is the sandbox process's PID, also its session id.
func (s *Sandbox) SandboxPID() int { return s.pid }

// SandboxStartTime is the sandbox process's start time (see KillSession).
func (s *Sandbox) SandboxStartTime() uint64 { return s.startTime }

// Done is closed when the sandbox has exited: the main process ended and
// nothing of the attempt is left.
func (s *Sandbox) Done() <-chan struct{} { return s.done }

// Exit is how the main process ended; valid once Done is closed.
func (s *Sandbox) Exit() Exit { return s.exit }

// Signal sends sig to the main process alone, as a container runtime
// signals a container's PID 1: a shell that traps it decides what happens
// to its children. It fails when the sandbox does not take the request
// within a few seconds.
func (s *Sandbox) Signal(sig syscall.Signal) error {
	return s.sendWithin(controlWriteTimeout, message{Kind: kindSignal, Signal: int32(sig)})
}

// Kill kills every process of the attempt; it returns at once. If the
// sandbox does not end within a few seconds, it and its session are killed
// from here.
func (s *Sandbox) Kill() {
	s.killOnce.Do(func() {
		go func() {
			t := time.NewTimer(5 * time.Second)
			defer t.Stop()
			select {
			case <-s.done:
			case <-t.C:
				KillSession(s.pid, s.startTime)
			}
		}()
	})
	go func() { _ = s.sendWithin(controlWriteTimeout, message{Kind: kindKill}) }()
}

// sendWithin writes a message to the sandbox, giving up after timeout.
func (s *Sandbox) sendWithin(timeout time.Duration, m message) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return s.send(ctx, m)
}

// send writes a message to the sandbox, giving up (with ctx's error) when
// ctx ends first: a sandbox that stopped reading fills the socket's buffer.
func (s *Sandbox) send(ctx context.Context, m message, files ...*os.File) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	stop := interrupt(ctx, func() { _ = s.ctrl.SetWriteDeadline(longAgo) })
	err := send(s.ctrl, m, files...)
	stop()
	_ = s.ctrl.SetWriteDeadline(time.Time{})
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// cancelExec asks the sandbox to kill exec request id, whose caller gave
// up before it started; it returns at once.
func (s *Sandbox) cancelExec(id uint64) {
	go func() { _ = s.sendWithin(controlWriteTimeout, message{Kind: kindExecCancel, ID: id}) }()
}

// ExecProcess is a command started in the sandbox by Exec.
type ExecProcess struct {
	// PID is its process id.
	PID int
	// ch receives its end.
	ch chan message
}

// Wait waits for the command to end and returns its exit code (128+signal
// when killed), or ctx's error.
func (p *ExecProcess) Wait(ctx context.Context) (int32, error) {
	select {
	case m := <-p.ch:
		return m.Code, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// Exec starts argv inside the sandbox's view, with the container's
// environment and working directory, and stdin, stdout and stderr attached
// to the three files (one terminal when tty). The files may be closed once
// Exec returns. When ctx ends before the sandbox has started the command,
// Exec returns an error wrapping ctx's, and the command, should the
// sandbox start it later, is killed.
func (s *Sandbox) Exec(ctx context.Context, argv []string, tty bool, stdin, stdout, stderr *os.File) (*ExecProcess, error) {
	select {
	case <-s.done:
		return nil, errors.New("container is not running")
	default:
	}
	ch := make(chan message, 2)
	s.mu.Lock()
	s.nextID++
	id := s.nextID
	s.execs[id] = ch
	s.mu.Unlock()
	forget := func() {
		s.mu.Lock()
		delete(s.execs, id)
		s.mu.Unlock()
	}
	if err := s.send(ctx, message{Kind: kindExec, ID: id, Argv: argv, TTY: tty}, stdin, stdout, stderr); err != nil {
		forget()
		return nil, fmt.Errorf("asking the sandbox to exec: %w", err)
	}
	var m message
	select {
	case m = <-ch:
	case <-ctx.Done():
		forget()
		select {
		case m = <-ch:
			// The answer came meanwhile; the caller is told the command
			// did not run, so it must not.
			if m.Kind == kindExecStarted {
				s.cancelExec(id)
			}
		default:
		}
		return nil, fmt.Errorf("waiting for the sandbox to start the command: %w", ctx.Err())
	}
	switch m.Kind {
	case kindExecStarted:
		return &ExecProcess{PID: m.PID, ch: ch}, nil
	case kindExecFailed:
		return nil, &StartFailure{Reason: m.Reason, Message: m.Message}
	default:
		return nil, errors.New("container stopped before the command started")
	}
}

// extraFiles are a sandbox's descriptors after stdin, stdout and stderr:
// controlFD, configFD, joinFD when a PID namespace is to be joined,
// joinUserFD when a user namespace is too (cfg.JoinUserNamespace says
// so), then the cgroup files, whose numbers it writes into cfg.
func extraFiles(peer, cfgR, join, joinUser *os.File, cg *CgroupFiles, cfg *Config) []*os.File {
	files := []*os.File{peer, cfgR}
	if join != nil {
		files = append(files, join)
	}
	cfg.JoinUserNamespace = join != nil && joinUser != nil
	if cfg.JoinUserNamespace {
		files = append(files, joinUser)
	}
	cfg.CgroupEnter, cfg.CgroupLeave = nil, nil
	if cg != nil {
		for _, f := range cg.Enter {
			cfg.CgroupEnter = append(cfg.CgroupEnter, 3+len(files))
			files = append(files, f)
		}
		for _, f := range cg.Leave {
			cfg.CgroupLeave = append(cfg.CgroupLeave, 3+len(files))
			files = append(files, f)
		}
	}
	return files
}

// setOOMScoreAdj writes the oom_score_adj of the sandbox of pid while it
// waits for its config, so that every process it starts inherits it (the
// init stage, the main process, exec'd commands), as runc sets a
// container's. The sandbox itself may not lower it (a user namespace of
// its own holds no CAP_SYS_RESOURCE that counts); the agent may as root.
// Without the right (an agent that is not root asking for less than its
// own) the sandbox keeps the agent's score.
func setOOMScoreAdj(pid int, v *int) {
	if v == nil {
		return
	}
	_ = os.WriteFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid), []byte(strconv.Itoa(*v)), 0)
}

// startIn starts cmd in the network namespace ns: from a thread that
// entered it (a process is born in its parent thread's namespace), which
// is thrown away afterwards.
func startIn(ns *os.File, cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	go func() {
		// Not unlocked: the thread ends with the goroutine.
		runtime.LockOSThread()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("entering the pod's network namespace: %w", err)
			return
		}
		errc <- cmd.Start()
	}()
	return <-errc
}
