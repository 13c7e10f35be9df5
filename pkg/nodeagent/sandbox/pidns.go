package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moby/sys/capability"
	"golang.org/x/sys/unix"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/sandbox/view"
)

// PID namespace modes of Config.PIDNamespace.
const (
	// PIDHost keeps the container in the agent's PID namespace: it sees
	// the host's processes.
	PIDHost = ""
	// PIDContainer gives the container a PID namespace of its own whose
	// PID 1 is the main process, as runc does.
	PIDContainer = "container"
	// PIDJoin puts the main process in the PID namespace passed to Start
	// (StartOptions.JoinPIDNamespace): a pod's shared one, or an
	// ephemeral container's target's.
	PIDJoin = "join"
)

// initArgvName is argv[0] of the init stage: the process that becomes the
// main process. It mounts the /proc of its PID namespace on the view's
// /proc, takes the container's user and working directory, and executes
// the command, which so keeps its PID: 1 in a namespace of its own.
const initArgvName = "jobkeeper-sandbox-init"

// Descriptors of the init stage, after stdin, stdout and stderr.
const (
	// stageConfigFD carries the stageConfig as JSON.
	stageConfigFD = 3
	// stageErrorFD is closed on a successful exec; otherwise the stage
	// writes a stageError to it.
	stageErrorFD = 4
)

// stageReady is the byte the init stage writes on stageErrorFD once it
// runs (its executable loaded and initialised).
const stageReady = 'R'

// joinFD is the descriptor a sandbox is started with that names the PID
// namespace to join (PIDJoin), after the control socket and the config
// pipe.
const joinFD = 5

// joinUserFD is the descriptor, after joinFD, that names the user
// namespace to enter (Config.JoinUserNamespace).
const joinUserFD = 6

func init() {
	if len(os.Args) > 0 && os.Args[0] == initArgvName {
		os.Exit(stage())
	}
}

// stageProcMounted is the byte the init stage writes on stageErrorFD once
// it has mounted its namespace's procfs where a stageConfig's ProcAt said.
const stageProcMounted = 'P'

// stageConfig is what the init stage does.
type stageConfig struct {
	// ProcAt, alone, asks the stage to mount its PID namespace's procfs
	// there (a directory of the view being built), answer
	// stageProcMounted, and wait for the next stageConfig.
	ProcAt string `json:"procAt,omitempty"`
	// Probe mounts /proc and exits 0: ProbePID.
	Probe bool `json:"probe,omitempty"`
	// Pause mounts /proc and then only reaps orphans, for ever: a pod's
	// shared namespace's PID 1 (Config.Pause).
	Pause bool `json:"pause,omitempty"`
	// Path, Argv and Env are the command's.
	Path string   `json:"path,omitempty"`
	Argv []string `json:"argv,omitempty"`
	Env  []string `json:"env,omitempty"`
	// Dir is the working directory.
	Dir string `json:"dir,omitempty"`
	// Cred is who the command runs as; nil: the sandbox's user.
	Cred *stageCred `json:"cred,omitempty"`
	// NoNewPrivileges sets no_new_privs before the exec
	// (Config.NoNewPrivileges).
	NoNewPrivileges bool `json:"noNewPrivileges,omitempty"`
	// AllCapabilities keeps every capability (Config.Privileged); else
	// the command keeps Capabilities only (limitCapabilities).
	AllCapabilities bool             `json:"allCapabilities,omitempty"`
	Capabilities    []capability.Cap `json:"capabilities,omitempty"`
	// Seccomp is the filter loaded before the command runs; none when
	// empty.
	Seccomp []unix.SockFilter `json:"seccomp,omitempty"`
	// EnterRoot makes the stage chroot into the directory of
	// stageRootFD first: an exec'd command's stage in a user namespace,
	// executed outside the view (userns.go).
	EnterRoot bool `json:"enterRoot,omitempty"`
}

// stageCred is a syscall.Credential that survives JSON.
type stageCred struct {
	UID, GID    uint32
	Groups      []uint32
	NoSetGroups bool
}

// stageError is why the stage did not run the command.
type stageError struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// stage is the init stage's main function; it returns only on failure.
func stage() int {
	// The bounding set is the thread's: the one that limits it must be
	// the one that executes the command. Never unlocked.
	runtime.LockOSThread()
	// Until it executes the command (which makes it dumpable again, as
	// any program), no process of the namespace may trace it or read its
	// memory: it holds every capability and, until the pivot, the host's
	// root.
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	errW := os.NewFile(stageErrorFD, "stage-error")
	syscall.CloseOnExec(stageErrorFD)
	// Loaded and initialised: the sandbox may now build the view, which
	// takes the host's files (the dynamic loader's among them) away.
	if _, err := errW.Write([]byte{stageReady}); err != nil {
		return 127
	}
	fail := func(reason, msg string) int {
		_ = json.NewEncoder(errW).Encode(stageError{Reason: reason, Message: msg})
		return 127
	}
	cfgR := os.NewFile(stageConfigFD, "stage-config")
	dec := json.NewDecoder(cfgR)
	var cfg stageConfig
	for {
		cfg = stageConfig{}
		if err := dec.Decode(&cfg); err != nil {
			_ = cfgR.Close()
			return fail(ReasonCreateContainerError, "reading the init stage's config: "+err.Error())
		}
		if cfg.ProcAt == "" {
			break
		}
		// Before the view replaces the host's root: the kernel lets a
		// user namespace mount a procfs only while one of the host's is
		// fully visible, and none of the host's will be beneath this one.
		if err := unix.Mount("proc", cfg.ProcAt, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return fail(ReasonCreateContainerError, "mounting /proc of the container's PID namespace: "+err.Error())
		}
		if _, err := errW.Write([]byte{stageProcMounted}); err != nil {
			return 127
		}
	}
	_ = cfgR.Close()
	if cfg.EnterRoot {
		if err := enterRoot(); err != nil {
			return fail(ReasonStartError, "entering the container's view: "+err.Error())
		}
	}
	// The view's pivot_root moved this process's root along.
	if err := unix.Chdir("/"); err != nil {
		return fail(ReasonCreateContainerError, "entering the container's view: "+err.Error())
	}
	if cfg.Probe {
		return 0
	}
	if cfg.Pause {
		if c := cfg.Cred; c != nil {
			if err := takeCred(c); err != nil {
				return fail(ReasonStartError, err.Error())
			}
		}
		// It only reaps: it keeps no capability a process of the
		// namespace could borrow, in no set.
		if err := limitCapabilities(nil); err != nil {
			return fail(ReasonStartError, err.Error())
		}
		if err := dropAllCapabilities(); err != nil {
			return fail(ReasonStartError, err.Error())
		}
		_ = errW.Close()
		pause()
	}
	// The capabilities' bounding set, then the seccomp filter (which
	// needs CAP_SYS_ADMIN or no_new_privs to load), then the user.
	if !cfg.AllCapabilities {
		if err := limitCapabilities(cfg.Capabilities); err != nil {
			return fail(ReasonStartError, err.Error())
		}
	} else if err := clearInheritedCapabilities(); err != nil {
		// A privileged container keeps its bounding set, but not the
		// ambient capabilities a stage in a user namespace was given
		// (inUserNamespace): a process of another user than root would
		// keep them across its execution.
		return fail(ReasonStartError, err.Error())
	}
	if err := loadSeccomp(cfg.Seccomp); err != nil {
		return fail(ReasonStartError, err.Error())
	}
	if c := cfg.Cred; c != nil {
		if err := takeCred(c); err != nil {
			return fail(ReasonStartError, err.Error())
		}
		if c.UID != 0 {
			// The kernel drops them when root becomes another user; a
			// stage in a user namespace was not its root (its uid is the
			// host's, unmapped there): drop them as it would, before the
			// working directory is entered as that user.
			if err := dropAllCapabilities(); err != nil {
				return fail(ReasonStartError, err.Error())
			}
		}
	}
	if cfg.Dir != "" {
		if err := os.Chdir(cfg.Dir); err != nil {
			return fail(ReasonStartError, "entering the working directory: "+err.Error())
		}
	}
	if cfg.NoNewPrivileges {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fail(ReasonStartError, "setting no_new_privs: "+err.Error())
		}
	}
	err := syscall.Exec(cfg.Path, cfg.Argv, cfg.Env)
	return fail(ReasonStartError, fmt.Sprintf("exec: %q: %v", cfg.Argv[0], err))
}

// takeCred makes the stage c's user, group and supplementary groups.
func takeCred(c *stageCred) error {
	if !c.NoSetGroups {
		groups := make([]int, len(c.Groups))
		for i, g := range c.Groups {
			groups[i] = int(g)
		}
		if err := syscall.Setgroups(groups); err != nil {
			return fmt.Errorf("setting supplementary groups: %w", err)
		}
	}
	if err := syscall.Setgid(int(c.GID)); err != nil {
		return fmt.Errorf("setting the group: %w", err)
	}
	if err := syscall.Setuid(int(c.UID)); err != nil {
		return fmt.Errorf("setting the user: %w", err)
	}
	return nil
}

// pidNamespaced reports whether the main process is in a PID namespace
// other than the sandbox's, whose /proc the view then shows.
func (s *supervisor) pidNamespaced() bool { return s.cfg.PIDNamespace != PIDHost }

// forkStage starts the init stage, before the view is built: this
// executable (through /proc/self/exe) may need files of the host, its
// dynamic loader, that the view does not have. It waits for its
// stageConfig (runStage) in a new PID namespace (PIDContainer) or the one
// to join, with files as its stdin, stdout and stderr (one terminal, its
// controlling one, with tty). An image view's pivot_root moves its root
// along; in host mode it enters the view itself (stageConfig.Root).
func (s *supervisor) forkStage(files []*os.File, tty bool) error {
	sys := &syscall.SysProcAttr{Setpgid: !tty, Setsid: tty, Setctty: tty}
	if s.cfg.PIDNamespace == PIDContainer {
		sys.Cloneflags = syscall.CLONE_NEWPID
	}
	// With a user namespace of its own, created with the PID namespace,
	// so that it owns it (mapped now: the sandbox still sees its own
	// /proc); or the pod's, entered.
	enter := s.userNS
	if s.userNamespaced() && enter == nil {
		s.inUserNamespace(sys, true)
	}
	// The stage keeps every capability: it mounts /proc and takes the
	// container's user before it limits them itself.
	// It is moved into the container's cgroups while the view is built
	// (cgroupMover.move), not born in them.
	pid, cfgW, errR, err := s.startStage(files, nil, enter, sys, nil)
	if err != nil {
		return fmt.Errorf("starting the container's init stage: %w", err)
	}
	s.stagePID, s.stageCfg, s.stageErr = pid, cfgW, errR
	s.stageCgroup = s.cgroups.move(pid)
	var b [1]byte
	if n, _ := io.ReadFull(errR, b[:]); n != 1 || b[0] != stageReady {
		_ = s.stageCfg.Close()
		_ = s.stageErr.Close()
		_ = syscall.Kill(pid, syscall.SIGKILL)
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, 0, nil)
		s.stagePID = 0
		if ws.Exited() && ws.ExitStatus() == enterFailedCode && s.userNS != nil {
			return errors.New("the container's init stage could not enter the pod's user namespace")
		}
		return fmt.Errorf("the container's init stage ended before it was ready (%v)", ws)
	}
	return nil
}

// startStage forks an init stage (this executable) as sys says, with
// files as its stdin, stdout and stderr, then its config pipe
// (stageConfigFD), its error pipe (stageErrorFD) and extra; enter, when
// set, is the user namespace its constructor enters (nsenter_cgo.go),
// given after extra. cwd is forkInNamespace's. It returns the stage's
// PID and its ends of the pipes.
func (s *supervisor) startStage(files, extra []*os.File, enter *os.File, sys *syscall.SysProcAttr, cwd *os.File) (int, *os.File, *os.File, error) {
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return 0, nil, nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		_ = cfgR.Close()
		_ = cfgW.Close()
		return 0, nil, nil, err
	}
	fds := make([]uintptr, 0, len(files)+len(extra)+3)
	for _, f := range append(append(append([]*os.File(nil), files...), cfgR, errW), extra...) {
		fds = append(fds, f.Fd())
	}
	env := []string{}
	if enter != nil {
		env = append(env, joinUserNSEnv+"="+strconv.Itoa(len(fds)))
		fds = append(fds, enter.Fd())
	}
	attr := &syscall.ProcAttr{Env: env, Files: fds, Sys: sys}
	pid, err := s.forkInNamespace("/proc/self/exe", []string{initArgvName}, attr, false, false, cwd)
	_ = cfgR.Close()
	_ = errW.Close()
	if err != nil {
		_ = cfgW.Close()
		_ = errR.Close()
		return 0, nil, nil, err
	}
	return pid, cfgW, errR, nil
}

// mountProc mounts the container's procfs on target, a directory of the
// view being built: in a PID namespace of the container's, the init stage
// mounts its namespace's; in the host's, the sandbox mounts one, or, in a
// user namespace, where the kernel refuses a procfs of the host's PID
// namespace, binds the host's (its processes are what hostPID shows).
func (s *supervisor) mountProc(target string) error {
	if !s.pidNamespaced() {
		err := unix.Mount("proc", target, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
		if errors.Is(err, unix.EPERM) && !view.InitialUserNamespace() {
			err = unix.Mount("/proc", target, "", unix.MS_BIND|unix.MS_REC, "")
		}
		return err
	}
	if s.stagePID == 0 {
		return errors.New("no init stage to mount the PID namespace's /proc")
	}
	if s.userNamespaced() {
		return s.mountProcFromOutside(target)
	}
	if err := json.NewEncoder(s.stageCfg).Encode(stageConfig{ProcAt: target}); err != nil {
		return fmt.Errorf("asking the init stage: %w", err)
	}
	var b [1]byte
	if n, _ := io.ReadFull(s.stageErr, b[:]); n == 1 && b[0] == stageProcMounted {
		return nil
	}
	rest, _ := io.ReadAll(s.stageErr)
	var se stageError
	if err := json.Unmarshal(append(b[:], rest...), &se); err != nil {
		return errors.New("the container's init stage ended before it mounted /proc")
	}
	return errors.New(se.Message)
}

// abandonStage ends a stage that will not run anything (the start failed
// before runStage): it reads end of file and exits; it is reaped here.
func (s *supervisor) abandonStage() {
	if s.stagePID == 0 {
		return
	}
	_ = s.stageCfg.Close()
	_ = s.stageErr.Close()
	_ = syscall.Kill(s.stagePID, syscall.SIGKILL)
	var ws syscall.WaitStatus
	_, _ = syscall.Wait4(s.stagePID, &ws, 0, nil)
	s.stagePID = 0
}

// runStage has the stage run argv as the main process (or, probing, only
// mount /proc and exit; for a pause sandbox, become the pause process). It
// returns once the command was executed, or why it was not.
func (s *supervisor) runStage(argv []string, probe bool) (int, string, error) {
	cfg := stageConfig{Probe: probe, Pause: s.cfg.Pause}
	if cfg.Pause && s.userNamespaced() {
		// Root of its namespace, not the host's unmapped root.
		cfg.Cred = &stageCred{}
	}
	if !probe && !cfg.Pause {
		var reason string
		var err error
		if cfg, reason, err = s.commandStage(argv); err != nil {
			s.abandonStage()
			return 0, reason, err
		}
	}
	if err := s.stageCgroup(); err != nil {
		s.abandonStage()
		return 0, ReasonCreateContainerError, err
	}
	pid, cfgW, errR := s.stagePID, s.stageCfg, s.stageErr
	s.stagePID = 0
	if reason, err := s.execStage(pid, cfgW, errR, cfg, time.Time{}); err != nil {
		return 0, reason, err
	}
	return pid, "", nil
}

// commandStage is the stageConfig that runs argv as a process of the
// container: its path in the view, environment, working directory, user,
// capabilities, seccomp filter and no_new_privs.
func (s *supervisor) commandStage(argv []string) (stageConfig, string, error) {
	cfg := stageConfig{NoNewPrivileges: s.cfg.NoNewPrivileges, AllCapabilities: s.cfg.Privileged, Capabilities: s.keep, Seccomp: s.filter}
	if len(argv) == 0 {
		return cfg, ReasonStartError, errors.New("no command")
	}
	path, err := lookPath(argv[0], s.cfg.Env, s.cfg.WorkingDir)
	if err != nil {
		return cfg, ReasonStartError, err
	}
	cfg.Path, cfg.Argv, cfg.Env, cfg.Dir = path, argv, s.cfg.Env, s.cfg.WorkingDir
	if c := s.cred; c != nil {
		cfg.Cred = &stageCred{UID: c.Uid, GID: c.Gid, Groups: c.Groups, NoSetGroups: c.NoSetGroups}
	} else if s.userNamespaced() {
		// The stage is born with the host's uid, which its namespace
		// does not map: it must take one that is.
		cfg.Cred = &stageCred{}
	}
	return cfg, "", nil
}

// execStage sends a waiting stage (pid, its config pipe cfgW and error
// pipe errR, both closed here) its config, and waits until it executed
// the command, or says why it did not (the stage is then reaped); with a
// deadline, no longer: a stage still there then is killed.
func (s *supervisor) execStage(pid int, cfgW, errR *os.File, cfg stageConfig, deadline time.Time) (string, error) {
	defer func() { _ = errR.Close() }()
	go func() {
		_ = json.NewEncoder(cfgW).Encode(cfg)
		_ = cfgW.Close()
	}()
	if !deadline.IsZero() {
		_ = errR.SetReadDeadline(deadline)
	}
	b, err := io.ReadAll(errR)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// Stopped, say, by a process of the container's that may signal
		// it: the supervisor's loop waits for it.
		_ = syscall.Kill(pid, syscall.SIGKILL)
		_ = cfgW.Close()
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, 0, nil)
		return ReasonStartError, fmt.Errorf("the command's init stage did not run it within %v and was killed", stageTimeout)
	}
	if len(b) == 0 {
		// Closed by a successful exec (or, probing, by the exit; for a
		// pause process, once it runs).
		return "", nil
	}
	var se stageError
	if err := json.Unmarshal(b, &se); err != nil {
		se = stageError{Reason: ReasonStartError, Message: "the container's init stage failed: " + string(b)}
	}
	// The stage exits; the loop does not reap it (it has not started, or
	// the stage is no process it knows), so reap it here.
	var ws syscall.WaitStatus
	_, _ = syscall.Wait4(pid, &ws, 0, nil)
	return se.Reason, errors.New(se.Message)
}

// stageTimeout bounds how long the supervisor waits for an exec'd
// command's stage (spawnStaged): it starts in milliseconds, and the
// supervisor's loop waits meanwhile.
const stageTimeout = 10 * time.Second

// enterRoot chroots into the directory of stageRootFD, then closes it.
func enterRoot() error {
	defer func() { _ = unix.Close(stageRootFD) }()
	if err := unix.Fchdir(stageRootFD); err != nil {
		return err
	}
	return unix.Chroot(".")
}

// forkInNamespace starts path: in the PID namespace to join (PIDJoin, and
// every command exec'd into a container with a namespace of its own: the
// main process's), else as attr says; with limit, with the container's
// capabilities only (limitCapabilities) and its seccomp filter, and with
// no_new_privs when the
// config asks; with cwd, from a thread whose working directory is cwd
// (a relative attr.Sys.Chroot is resolved there). setns for a PID
// namespace applies to the children of the calling thread only, and the
// bounding set, no_new_privs and (unshared) the working directory are the
// thread's, so the thread that forks is locked to the goroutine and thrown
// away afterwards.
func (s *supervisor) forkInNamespace(path string, argv []string, attr *syscall.ProcAttr, limit, inCgroup bool, cwd *os.File) (int, error) {
	return s.forkIn(s.pidNS, path, argv, attr, limit, inCgroup, cwd)
}

// forkIn is forkInNamespace in the PID namespace ns (none: the
// sandbox's).
func (s *supervisor) forkIn(ns *os.File, path string, argv []string, attr *syscall.ProcAttr, limit, inCgroup bool, cwd *os.File) (int, error) {
	cgroups := s.cgroups
	if !inCgroup {
		cgroups = nil
	}
	limit = limit && !s.cfg.Privileged
	ch := make(chan forkResult, 1)
	tids := make(chan forkThread, 1)
	if ns == nil && !limit && !s.cfg.NoNewPrivileges && cwd == nil {
		// Nothing of the thread's to change: locked only to know which
		// thread forks (awaitFork).
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			tids <- thisForkThread()
			pid, err := cgroups.fork(func() (int, error) { return syscall.ForkExec(path, argv, attr) })
			ch <- forkResult{pid, err}
		}()
		return awaitFork(tids, ch, stageTimeout)
	}
	go func() {
		// Not unlocked: the thread ends with the goroutine.
		runtime.LockOSThread()
		tids <- thisForkThread()
		if ns != nil {
			if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWPID); err != nil {
				ch <- forkResult{err: fmt.Errorf("entering the container's PID namespace: %w", err)}
				return
			}
		}
		if cwd != nil {
			if err := unix.Unshare(unix.CLONE_FS); err != nil {
				ch <- forkResult{err: fmt.Errorf("giving the forking thread a working directory of its own: %w", err)}
				return
			}
			if err := unix.Fchdir(int(cwd.Fd())); err != nil {
				ch <- forkResult{err: fmt.Errorf("entering the forking thread's working directory: %w", err)}
				return
			}
		}
		if s.cfg.NoNewPrivileges {
			// A thread's own flag: this one may have been started
			// before the sandbox set it.
			if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
				ch <- forkResult{err: fmt.Errorf("setting no_new_privs: %w", err)}
				return
			}
		}
		if limit {
			if err := limitCapabilities(s.keep); err != nil {
				ch <- forkResult{err: err}
				return
			}
			if err := loadSeccomp(s.filter); err != nil {
				ch <- forkResult{err: err}
				return
			}
		}
		pid, err := cgroups.fork(func() (int, error) { return syscall.ForkExec(path, argv, attr) })
		ch <- forkResult{pid, err}
	}()
	return awaitFork(tids, ch, stageTimeout)
}

// forkThread is the thread a fork is made from: its id, its children
// before the fork (a reused thread may have some) and the time just before
// the fork, in clock ticks since boot (as /proc/<pid>/stat's start time):
// a child of the thread that is not among before and started no earlier
// is the fork's (a thread that exits hands its children to another one,
// which may be this one).
type forkThread struct {
	tid    int
	before []int
	ticks  uint64
}

// thisForkThread is the calling thread's forkThread; the goroutine is
// locked to it, and makes the fork next.
func thisForkThread() forkThread {
	tid := unix.Gettid()
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
	// USER_HZ, the unit of start times, is 100 on Linux.
	return forkThread{tid, threadChildren(tid), uint64(ts.Nano() / int64(10*time.Millisecond))}
}

// threadChildren returns the live children of this process's thread tid.
func threadChildren(tid int) []int {
	// procFS, not the path: the supervisor's /proc may be the view's.
	path := fmt.Sprintf("self/task/%d/children", tid)
	var b []byte
	if procFS != nil {
		if fd, err := unix.Openat(int(procFS.Fd()), path, unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
			f := os.NewFile(uintptr(fd), "children")
			b, _ = io.ReadAll(f)
			_ = f.Close()
		}
	} else {
		b, _ = os.ReadFile("/proc/" + path)
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// forkResult is a fork's outcome.
type forkResult struct {
	pid int
	err error
}

// awaitFork waits for a fork by the thread tids names, whose outcome ch
// receives. The forking thread is suspended until the child executes its
// program (vfork); a child stopped before that (by a process of the
// container's that may signal it) would suspend it for ever, and the
// supervisor's loop with it. So a child that has not executed within
// timeout (stageTimeout) is killed and the fork fails. (A garbage
// collection that starts meanwhile waits for the suspended thread too, and
// then so does this timer: the bound holds while the supervisor does not
// collect, which is most of the time in a supervisor.)
func awaitFork(tids <-chan forkThread, ch <-chan forkResult, timeout time.Duration) (int, error) {
	ft := <-tids
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case r := <-ch:
		return r.pid, r.err
	case <-timer.C:
	}
	for _, pid := range threadChildren(ft.tid) {
		if !slices.Contains(ft.before, pid) && StartTime(pid) >= ft.ticks {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	// Killed, the child ends and the fork returns (as a success when the
	// child was past its last check: it is dead all the same, and the
	// loop reaps it as a child it does not know).
	if r := <-ch; r.err != nil {
		return 0, r.err
	}
	return 0, fmt.Errorf("the command's process did not start within %v (stopped before it ran?) and was killed", timeout)
}

// enterMainNamespace records the main process's PID namespace, which
// commands exec'd into the container join. pidfd names the main process.
func (s *supervisor) enterMainNamespace(pid int) error {
	if s.cfg.PIDNamespace != PIDContainer {
		return nil
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return fmt.Errorf("naming the container's PID namespace: %w", err)
	}
	s.pidNS = os.NewFile(uintptr(fd), "pidfd")
	return nil
}

// killNamespaced ends an attempt whose main process is in a PID namespace
// (whose processes the view's /proc numbers as the namespace does, so they
// cannot be found there): it kills the main process and the commands
// exec'd into the container, and reaps them until no child is left. In a
// namespace of its own the end of its PID 1 kills everything in it; in a
// joined one (PIDJoin), a process the attempt started that left both
// their process groups stays in it until that namespace ends.
func (s *supervisor) killNamespaced() {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if s.main > 0 && !s.mainEnded {
			_ = syscall.Kill(-s.main, syscall.SIGKILL)
			_ = syscall.Kill(s.main, syscall.SIGKILL)
		}
		for pid := range s.execs {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if errors.Is(err, syscall.ECHILD) {
				return
			}
			if err != nil || pid <= 0 {
				break
			}
			s.collected(pid, ws)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// probePID has the init stage (forked) only mount its namespace's /proc
// in the view: what ProbePID checks.
func (s *supervisor) probePID() error {
	pid, _, err := s.runStage(nil, true)
	if err != nil {
		return err
	}
	// exec into a container joins its namespace through a pidfd: the
	// kernel must open one and take it in setns (Linux 5.8), tried here
	// on our own, whose namespace we are in already.
	if fd, err := unix.PidfdOpen(pid, 0); err != nil {
		return fmt.Errorf("pidfd_open (Linux 5.3 or later): %w", err)
	} else {
		_ = unix.Close(fd)
	}
	if err := setnsByPidfdWorks(); err != nil {
		return fmt.Errorf("setns on a pidfd (Linux 5.8 or later): %w", err)
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
		return fmt.Errorf("waiting for the PID namespace probe: %w", err)
	}
	if !ws.Exited() || ws.ExitStatus() != 0 {
		return fmt.Errorf("the PID namespace probe ended with %v", ws)
	}
	return nil
}

// pause is the loop of a pod's shared PID namespace's PID 1, as the
// kubelet's pause container: the containers' processes orphaned in the
// namespace become its children, and it reaps them. Signals from outside
// the namespace do not reach it (PID 1 without handlers) but SIGKILL, which
// ends the namespace.
func pause() {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD)
	for range sigs {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if err != nil || pid <= 0 {
				break
			}
		}
	}
}

// setnsByPidfdWorks enters, through a pidfd of this process, the PID
// namespace it is in, on a thread thrown away afterwards: whether the
// kernel takes pidfds in setns. A kernel that does not says EINVAL (the
// descriptor is no namespace); one that does may still refuse a sandbox
// in a user namespace of its own the agent's namespace (EPERM), which is
// not a namespace it will ever join.
func setnsByPidfdWorks() error {
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		return err
	}
	defer func() { _ = unix.Close(fd) }()
	ch := make(chan error, 1)
	go func() {
		// Not unlocked: the thread ends with the goroutine.
		runtime.LockOSThread()
		ch <- unix.Setns(fd, unix.CLONE_NEWPID)
	}()
	if err := <-ch; err != nil && !errors.Is(err, unix.EPERM) {
		return err
	}
	return nil
}
