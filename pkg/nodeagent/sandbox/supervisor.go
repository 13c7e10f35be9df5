package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/moby/sys/capability"
	"golang.org/x/sys/unix"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/sandbox/view"
)

// Descriptors a sandbox is started with, after stdin, stdout and stderr.
const (
	// controlFD is the sandbox's end of the control socket.
	controlFD = 3
	// configFD is a pipe carrying the Config as JSON, closed after it.
	configFD = 4
)

// Reasons a container attempt fails to start, as container runtimes report
// them in the terminated state.
const (
	// ReasonStartError: the command could not be executed.
	ReasonStartError = "StartError"
	// ReasonCreateContainerError: the container's view could not be built.
	ReasonCreateContainerError = "CreateContainerError"
	// ReasonCreateContainerConfigError: a volume mount of the container
	// cannot be resolved inside its volume or its root (a subPath or
	// mount point that leads nowhere, or out of it).
	ReasonCreateContainerConfigError = "CreateContainerConfigError"
)

func init() {
	if len(os.Args) > 0 && os.Args[0] == ArgvName {
		if len(os.Args) > 1 && os.Args[1] == argIDMapWait {
			err := waitForIDMap()
			fmt.Fprintln(os.Stderr, "jobkeeper sandbox: waiting for its user namespace's ids:", err)
			os.Exit(2)
		}
		os.Exit(supervise())
	}
}

// supervisor is the state of a sandbox process.
type supervisor struct {
	// ctrl is the control socket.
	ctrl *net.UnixConn
	// cfg is what to run.
	cfg Config
	// cred is who the container's processes run as; nil: the sandbox's
	// own user.
	cred *syscall.Credential
	// cgroups puts the container's processes in its cgroups; nil when
	// the agent gave none.
	cgroups *cgroupMover
	// identity is cred as reported to the agent; nil with cred.
	identity *Identity
	// main is the main process's PID (also its process group, which
	// Kill ends).
	main int
	// execs maps exec'd processes to their requests.
	execs map[int]execRequest
	// stagePID is the init stage forked before the view was built,
	// waiting for its stageConfig on stageCfg and answering on stageErr;
	// 0 once it was given one (or without PID namespace).
	stagePID           int
	stageCfg, stageErr *os.File
	// stageCgroup waits for the stage's move into the container's
	// cgroups (cgroupMover.move).
	stageCgroup func() error
	// pidNS names the PID namespace commands exec'd into the container
	// join: the main process's own (a pidfd), or the one joined; nil in
	// the host's.
	pidNS *os.File
	// mainEnded is set once the main process was reaped, with its exit.
	mainEnded         bool
	mainCode, mainSig int32
	// mainEndedAt is when it was reaped.
	mainEndedAt time.Time
	// dur is the durable part; nil for a sandbox that dies with its agent.
	dur *durable
	// keep are the capabilities the container's processes keep
	// (Config.Capabilities), unless Config.Privileged.
	keep []capability.Cap
	// filter is the seccomp filter of the container's processes
	// (Config.Seccomp); none when empty.
	filter []unix.SockFilter
	// userNS, hostTree and viewRoot serve a container with a user
	// namespace (userns.go): the init stage's namespace, the copy of the
	// host's mount tree exec'd commands' stages are executed from, and
	// the view's root they enter.
	userNS, hostTree, viewRoot *os.File
}

// execRequest is a command exec'd for an agent.
type execRequest struct {
	// id is the agent's request id.
	id uint64
	// conn is the connection of the agent that asked; its answers go
	// there only.
	conn *net.UnixConn
}

// event is something the supervisor's loop reacts to.
type event struct {
	// msg is a control message, when err is nil and files may be set.
	msg message
	// files came with msg.
	files []*os.File
	// err ends the control socket (the agent is gone).
	err error
	// conn is the connection msg or err came from.
	conn *net.UnixConn
}

// supervise is the sandbox's main function; it returns the exit code.
func supervise() int {
	s := &supervisor{execs: map[int]execRequest{}}
	ctrlFile := os.NewFile(controlFD, "control")
	conn, err := net.FileConn(ctrlFile)
	_ = ctrlFile.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "jobkeeper sandbox: no control socket:", err)
		return 2
	}
	s.ctrl = conn.(*net.UnixConn)
	// durOut are the write ends of a durable sandbox's output pipes until
	// the main process has them.
	var durOut []*os.File
	if err := s.readConfig(); err != nil {
		s.fail(ReasonCreateContainerError, err.Error())
		return 2
	}
	if s.cgroups, err = newCgroupMover(s.cfg); err != nil {
		s.fail(ReasonCreateContainerError, err.Error())
		return 2
	}
	if !s.cfg.Privileged {
		s.keep, _ = parseCapabilities(s.cfg.Capabilities)
		if sc := s.cfg.Seccomp; sc != nil {
			// A privileged container runs unconfined, as containerd
			// runs it.
			if s.filter, err = compileSeccomp(sc, s.cfg.Capabilities); err != nil {
				s.fail(ReasonCreateContainerError, seccompError(sc, err))
				return 2
			}
		}
	}
	if s.cfg.Hostname != "" {
		// Start sends a hostname only to a sandbox in a UTS namespace of
		// its own.
		if err := unix.Sethostname([]byte(s.cfg.Hostname)); err != nil {
			s.fail(ReasonCreateContainerError, fmt.Sprintf("setting the hostname %q: %v", s.cfg.Hostname, err))
			return 2
		}
	}
	if s.cfg.StateDir != "" && !s.cfg.Probe {
		// Before the view (and the init stage): the durable files are
		// reached by descriptor from inside it, and the output pipes are
		// the main process's stdout and stderr.
		if s.dur, err = openDurable(s.cfg); err != nil {
			s.fail(ReasonCreateContainerError, err.Error())
			return 2
		}
		defer s.dur.close()
		out, errOut, err := s.dur.output()
		if err != nil {
			s.fail(ReasonCreateContainerError, err.Error())
			return 2
		}
		durOut = []*os.File{out, errOut}
		defer closeAll(durOut)
	}
	if s.pidNamespaced() && !s.cfg.Isolate {
		s.fail(ReasonCreateContainerError, "a PID namespace needs the sandbox's private mount namespace")
		return 2
	}
	if err := s.checkUserNamespace(); err != nil {
		s.fail(ReasonCreateContainerError, err.Error())
		return 2
	}
	if s.cfg.PIDNamespace == PIDJoin {
		// Not for the container's processes.
		syscall.CloseOnExec(joinFD)
		s.pidNS = os.NewFile(joinFD, "pidns")
	}
	if s.cfg.JoinUserNamespace {
		syscall.CloseOnExec(joinUserFD)
		s.userNS = os.NewFile(joinUserFD, "userns")
	}
	if s.pidNamespaced() {
		stdio := []*os.File{os.Stdin, os.Stdout, os.Stderr}
		if durOut != nil {
			stdio[1], stdio[2] = durOut[0], durOut[1]
		}
		if s.cfg.Probe || s.cfg.Pause {
			devNull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
			if err != nil {
				s.fail(ReasonCreateContainerError, err.Error())
				return 2
			}
			stdio = []*os.File{devNull, devNull, devNull}
			defer func() { _ = devNull.Close() }()
		}
		if err := s.forkStage(stdio, s.cfg.TTY); err != nil {
			s.fail(ReasonCreateContainerError, err.Error())
			return 2
		}
		// A start that fails before runStage lets it go.
		defer s.abandonStage()
		if s.userNamespaced() {
			if err := s.prepareUserNamespace(); err != nil {
				s.fail(ReasonCreateContainerError, err.Error())
				return 2
			}
		}
	}
	if s.cfg.Rootfs != nil && !s.cfg.Isolate {
		s.fail(ReasonCreateContainerError, "running an image needs the sandbox's private mount namespace")
		return 2
	}
	// The processes of the attempt are found in this procfs, never in
	// the view's.
	if err := openProcFS(); err != nil {
		s.fail(ReasonCreateContainerError, "opening /proc: "+err.Error())
		return 2
	}
	// What the user namespace maps, read while /proc/self is the
	// sandbox's: a view with a PID namespace of the container's has the
	// container's procfs.
	ids, err := readNamespaceIDs()
	if err != nil {
		s.fail(ReasonCreateContainerError, err.Error())
		return 2
	}
	if m := s.cfg.UserNamespace; m != nil {
		ids = m.ids()
	}
	if s.cfg.Isolate {
		spec := viewSpec(s.cfg)
		spec.IDMap = s.viewIDMap()
		if err := view.SetUp(spec, s.mountProc); err != nil {
			reason := ReasonCreateContainerError
			var ve *view.VolumeError
			if errors.As(err, &ve) {
				reason = ReasonCreateContainerConfigError
			}
			s.fail(reason, "building the container's filesystem view: "+err.Error())
			return 2
		}
		if s.userNamespaced() {
			if err := s.openViewRoot(); err != nil {
				s.fail(ReasonCreateContainerError, err.Error())
				return 2
			}
		}
	}
	if s.cfg.Probe {
		if s.pidNamespaced() {
			if err := s.probePID(); err != nil {
				s.fail(ReasonCreateContainerError, err.Error())
				return 2
			}
		}
		_ = send(s.ctrl, message{Kind: kindStarted})
		return 0
	}
	if s.cfg.User != nil {
		cred, id, err := lookupUser(*s.cfg.User, ids)
		if err != nil {
			s.fail(ReasonCreateContainerError, err.Error())
			return 2
		}
		s.cred, s.cfg.Env, s.identity = cred, withHome(s.cfg.Env, id.home), id.report()
	}
	if s.cfg.NoNewPrivileges {
		// Inherited by every process the sandbox starts: the main process
		// and exec'd commands.
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			s.fail(ReasonCreateContainerError, "setting no_new_privs: "+err.Error())
			return 2
		}
	}
	// Orphans of the attempt become our children, so they can be found
	// and killed with it.
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	// Signals sent to the sandbox are not for us (the agent's Signal goes
	// to the main process); SIGCHLD drives the reaping.
	sigs := make(chan os.Signal, 64)
	signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	if dir := s.cfg.WorkingDir; dir != "" {
		mkdir := func() error { return os.MkdirAll(dir, 0o755) }
		if s.userNamespaced() {
			// The container's root's, as a runtime in its namespace
			// would make it.
			mkdir = func() error { return view.MkdirOwned(dir, s.viewIDMap()) }
		}
		if err := mkdir(); err != nil {
			s.fail(ReasonCreateContainerError, fmt.Sprintf("creating working directory %s: %v", dir, err))
			return 2
		}
	}
	stdio := []*os.File{os.Stdin, os.Stdout, os.Stderr}
	if durOut != nil {
		stdio[1], stdio[2] = durOut[0], durOut[1]
	}
	var pid int
	var reason string
	if s.pidNamespaced() {
		pid, reason, err = s.runStage(s.cfg.Command, false)
	} else {
		pid, reason, err = s.spawn(s.cfg.Command, stdio, s.cfg.TTY)
	}
	startedAt := time.Now()
	if durOut != nil {
		// The main process has them: the log ends when it and its
		// children are gone.
		closeAll(durOut)
		durOut = nil
	}
	if err != nil {
		if s.dur != nil {
			_ = s.dur.log.Close()
		}
		s.fail(reason, err.Error())
		return 2
	}
	s.main = pid
	if err := s.enterMainNamespace(pid); err != nil {
		s.killAll()
		s.fail(ReasonCreateContainerError, err.Error())
		return 2
	}
	if s.dur != nil {
		if err := s.dur.writeState(pid, startedAt, s.identity); err != nil {
			s.killAll()
			s.fail(ReasonCreateContainerError, "recording the container's state: "+err.Error())
			return 2
		}
	}
	// The sandbox's stdin, stdout and stderr are the container's (pipes,
	// or its terminal): let go of them so that the output ends, and the
	// terminal hangs up, when the container's processes end.
	devNull, _ := os.Open(os.DevNull)
	if devNull != nil {
		_ = unix.Dup2(int(devNull.Fd()), 0)
		_ = unix.Dup2(int(devNull.Fd()), 1)
		_ = unix.Dup2(int(devNull.Fd()), 2)
		_ = devNull.Close()
	}
	if err := send(s.ctrl, message{Kind: kindStarted, PID: pid, User: s.identity}); err != nil && s.dur == nil {
		s.killAll()
		return 2
	}
	return s.loop(sigs)
}

// readConfig reads the Config from its pipe.
func (s *supervisor) readConfig() error {
	f := os.NewFile(configFD, "config")
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(f)
	if err != nil {
		return fmt.Errorf("reading sandbox config: %w", err)
	}
	if err := json.Unmarshal(b, &s.cfg); err != nil {
		return fmt.Errorf("decoding sandbox config: %w", err)
	}
	return nil
}

// fail reports that nothing runs.
func (s *supervisor) fail(reason, msg string) {
	_ = send(s.ctrl, message{Kind: kindStartFailed, Reason: reason, Message: msg})
}

// loop serves the control socket and reaps children until the main
// process has ended or, for a sandbox that is not durable, the agent is
// gone. A durable sandbox whose agent went away waits for another (see
// durable.go).
func (s *supervisor) loop(sigs chan os.Signal) int {
	events := make(chan event, 16)
	s.serve(s.ctrl, events)
	conns := make(chan *net.UnixConn)
	if s.dur != nil {
		go s.dur.accept(conns)
	}
	// orphaned and stopDue run while no agent is connected: the wait for
	// one, then the grace period of the stop that follows.
	var orphaned, stopDue <-chan time.Time
	var orphanTimer, stopTimer *time.Timer
	for {
		select {
		case sig := <-sigs:
			if sig != syscall.SIGCHLD {
				continue
			}
			s.reap()
		case c := <-conns:
			// A restarted agent: it takes over from the one before (gone,
			// or about to be).
			if s.ctrl != nil {
				s.dropAgent()
			}
			s.ctrl = c
			if orphanTimer != nil {
				orphanTimer.Stop()
				orphaned, orphanTimer = nil, nil
			}
			if err := send(c, message{Kind: kindAdopted, PID: s.main}); err == nil {
				s.serve(c, events)
			}
		case ev := <-events:
			if ev.conn != s.ctrl {
				closeAll(ev.files)
				continue
			}
			if ev.err != nil {
				if s.dur == nil {
					// The agent is gone (or broke the protocol): nothing
					// may outlive it.
					s.killAll()
					return 1
				}
				s.dropAgent()
				if stopTimer == nil && orphanTimer == nil {
					orphanTimer = time.NewTimer(s.dur.orphanTimeout)
					orphaned = orphanTimer.C
				}
				continue
			}
			s.handle(ev.msg, ev.files)
		case <-orphaned:
			// No agent came back: stop the container as its agent would.
			orphaned, orphanTimer = nil, nil
			_ = syscall.Kill(s.main, syscall.SIGTERM)
			stopTimer = time.NewTimer(s.dur.stopGrace)
			stopDue = stopTimer.C
		case <-stopDue:
			stopDue = nil
			_ = syscall.Kill(-s.main, syscall.SIGKILL)
			s.killDescendants()
		}
		if s.mainEnded {
			// The container is over when its main process is.
			s.killAll()
			if s.dur != nil {
				s.dur.finish(s.mainCode, s.mainSig, s.mainEndedAt)
			}
			s.tell(message{Kind: kindExited, Code: s.mainCode, Signal: s.mainSig, At: s.mainEndedAt.UnixNano()})
			return 0
		}
	}
}

// serve reads the messages of an agent's connection into events until it
// ends.
func (s *supervisor) serve(c *net.UnixConn, events chan<- event) {
	go func() {
		for {
			m, files, err := receive(c)
			events <- event{msg: m, files: files, err: err, conn: c}
			if err != nil {
				return
			}
		}
	}()
}

// dropAgent lets go of the current agent's connection: the commands it
// exec'd lose their streams with it, so they are killed.
func (s *supervisor) dropAgent() {
	for pid, req := range s.execs {
		if req.conn == s.ctrl {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
	_ = s.ctrl.Close()
	s.ctrl = nil
}

// tell sends m to the current agent, if one is connected.
func (s *supervisor) tell(m message) {
	if s.ctrl != nil {
		_ = send(s.ctrl, m)
	}
}

// handle acts on a request of the agent.
func (s *supervisor) handle(m message, files []*os.File) {
	defer closeAll(files)
	switch m.Kind {
	case kindSignal:
		// The main process only, as a runtime signals PID 1; Kill and
		// the main process's end take care of the rest.
		_ = syscall.Kill(s.main, syscall.Signal(m.Signal))
	case kindKill:
		_ = syscall.Kill(-s.main, syscall.SIGKILL)
		s.killDescendants()
	case kindExec:
		if len(files) != 3 {
			_ = send(s.ctrl, message{Kind: kindExecFailed, ID: m.ID, Reason: ReasonStartError, Message: "exec request without its three streams"})
			return
		}
		pid, reason, err := s.spawn(m.Argv, files, m.TTY)
		if err != nil {
			_ = send(s.ctrl, message{Kind: kindExecFailed, ID: m.ID, Reason: reason, Message: err.Error()})
			return
		}
		s.execs[pid] = execRequest{id: m.ID, conn: s.ctrl}
		_ = send(s.ctrl, message{Kind: kindExecStarted, ID: m.ID, PID: pid})
	case kindExecCancel:
		for pid, req := range s.execs {
			if req.id == m.ID && req.conn == s.ctrl {
				// Its own process group (or session, for a terminal).
				_ = syscall.Kill(-pid, syscall.SIGKILL)
			}
		}
	}
}

// spawn starts argv in the view with the container's environment, user and
// working directory, in a process group of its own (a session, for a
// terminal). It returns a reason when it fails.
func (s *supervisor) spawn(argv []string, files []*os.File, tty bool) (int, string, error) {
	if s.userNamespaced() {
		return s.spawnStaged(argv, files, tty)
	}
	if len(argv) == 0 {
		return 0, ReasonStartError, errors.New("no command")
	}
	path, err := lookPath(argv[0], s.cfg.Env, s.cfg.WorkingDir)
	if err != nil {
		return 0, ReasonStartError, err
	}
	fds := make([]uintptr, len(files))
	for i, f := range files {
		fds[i] = f.Fd()
	}
	attr := &syscall.ProcAttr{
		Dir:   s.cfg.WorkingDir,
		Env:   s.cfg.Env,
		Files: fds,
		Sys:   &syscall.SysProcAttr{Setpgid: !tty, Setsid: tty, Setctty: tty, Credential: s.cred},
	}
	pid, err := s.forkInNamespace(path, argv, attr, true, true, nil)
	if err != nil {
		return 0, ReasonStartError, fmt.Errorf("exec: %q: %w", argv[0], err)
	}
	return pid, "", nil
}

// reap collects every child that ended without waiting.
func (s *supervisor) reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err != nil || pid <= 0 {
			return
		}
		s.collected(pid, ws)
	}
}

// collected records a reaped child: the main process's exit, or the end of
// an exec request, which is answered.
func (s *supervisor) collected(pid int, ws syscall.WaitStatus) {
	code, sig := exitOf(ws)
	if pid == s.main {
		s.mainEnded, s.mainCode, s.mainSig, s.mainEndedAt = true, code, sig, time.Now()
		return
	}
	if req, ok := s.execs[pid]; ok {
		delete(s.execs, pid)
		if req.conn == s.ctrl {
			s.tell(message{Kind: kindExecExited, ID: req.id, Code: code, Signal: sig})
		}
	}
}

// exitOf converts a wait status to an exit code and signal.
func exitOf(ws syscall.WaitStatus) (int32, int32) {
	if ws.Signaled() {
		return 128 + int32(ws.Signal()), int32(ws.Signal())
	}
	return int32(ws.ExitStatus()), 0
}

// killAll ends the attempt: the main process's group, then every
// descendant, until none is left.
func (s *supervisor) killAll() {
	if s.main > 0 {
		_ = syscall.Kill(-s.main, syscall.SIGKILL)
	}
	s.killDescendants()
	for pid, req := range s.execs {
		if req.conn == s.ctrl {
			s.tell(message{Kind: kindExecExited, ID: req.id, Code: 137, Signal: int32(syscall.SIGKILL)})
		}
		delete(s.execs, pid)
	}
}

// killDescendants kills the sandbox's children and reaps them; their own
// children are then ours (we are a subreaper), and so on until no child is
// left.
func (s *supervisor) killDescendants() {
	if s.pidNamespaced() {
		s.killNamespaced()
		return
	}
	self := os.Getpid()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		found := false
		for _, p := range processes() {
			if p.ppid == self || (p.session == self && p.pid != self) {
				found = true
				_ = syscall.Kill(p.pid, syscall.SIGKILL)
			}
		}
		s.reap()
		if !found {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// lookPath finds the executable as a container runtime does: a name with a
// slash is a path (relative to the working directory), anything else is
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
	pathEnv := ""
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

// executable reports whether p is a regular executable file (execve
// refuses anything else).
func executable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return errors.New("not an executable file")
	}
	return nil
}

// viewSpec is what package view builds of cfg.
func viewSpec(cfg Config) view.Spec {
	spec := view.Spec{Scratch: cfg.Scratch, ReadOnlyRoot: cfg.ReadOnlyRoot, WorkingDir: cfg.WorkingDir,
		Privileged: cfg.Privileged, UnmaskedProc: cfg.UnmaskedProc, Hide: cfg.Hide}
	if cfg.Rootfs != nil {
		spec.Rootfs = &view.Rootfs{Layers: cfg.Rootfs.Layers}
	}
	for _, m := range cfg.Mounts {
		spec.Mounts = append(spec.Mounts, view.Mount{Source: m.Source, SubPath: m.SubPath, Target: m.Target, ReadOnly: m.ReadOnly, RecursiveReadOnly: m.RecursiveReadOnly,
			Image: m.Image, Layers: m.Layers})
	}
	for _, c := range cfg.CgroupViews {
		spec.Cgroups = append(spec.Cgroups, view.CgroupBind{Source: c.Source, Target: c.Target})
	}
	return spec
}
