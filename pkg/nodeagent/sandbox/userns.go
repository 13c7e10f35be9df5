package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moby/sys/capability"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/sandbox/view"
)

// A container with Config.UserNamespace (hostUsers: false, the agent
// running as root) runs in a user namespace that maps its ids 0 to Size-1
// onto the pod's range of the host's: its root is, on the host, an
// unprivileged user that owns nothing, and its capabilities count only
// for what the namespace owns.
//
// The sandbox stays root of the host's namespace, as a runtime's shim: it
// builds the view (mount namespace owned by the host's user namespace) and
// makes every host file it shows an idmapped mount through the
// container's namespace (package view, Spec.IDMap), so that the image's
// files, the volumes and what the container writes keep their stored ids.
//
//   - The init stage is forked into a new user namespace with the mapping
//     (and, with PIDContainer, a new PID namespace, which the user
//     namespace owns); the view's mounts are idmapped through it. The
//     stage cannot mount in the sandbox's mount namespace, so the
//     namespace's procfs is mounted by a short-lived helper (this
//     executable as procArgvName) that the sandbox forks into that PID
//     namespace, root of the host's.
//   - A container joining its pod's PID namespace (shareProcessNamespace:
//     the pause sandbox, itself started with the pod's mapping; an
//     ephemeral container's target) enters that process's user namespace
//     instead (StartOptions.JoinUserNamespace), so that a pod's
//     containers share one, as with the kubelet's runtimes.
//   - A command exec'd into the container (kubectl exec, an exec probe)
//     goes through an init stage too, in the container's PID namespace
//     and cgroups, which enters the main process's user namespace before
//     its Go runtime starts (nsenter_cgo.go: a process of a multithreaded
//     program cannot enter one). The sandbox has pivoted into the view by
//     then, where this executable and its dynamic loader are not: the
//     stage is executed from a copy of the host's root filesystem and
//     /proc the sandbox cloned before the pivot (a chroot through its
//     descriptor), and then chroots into the view through a descriptor of
//     the view's root, before it limits its capabilities, loads the
//     seccomp filter and takes the container's user, as the main process's
//     stage does. It runs as the host's root, not dumpable (unmapped in
//     the namespace), until then, so a process of the container cannot
//     trace it or open its /proc entries while it still holds that copy.
//   - Every stage takes the container's user (root of the namespace when
//     no other is asked): a process that kept the host's uid would be
//     unmapped inside.
//
// Differences from the kubelet's runtimes: a pod's containers that do not
// share a process namespace have a user namespace each, with the pod's
// mapping (they see none of each other's processes anyway). A build
// without cgo (canEnterUserNamespace false) gives each exec'd command and
// each container a namespace of its own with the mapping: ids, files and
// signals between processes of the same user behave as in one namespace,
// but the kernel lets no process read another's /proc files, trace it or
// (as root) signal one of another user across namespaces.

// procArgvName is argv[0] of the helper that mounts the procfs of the PID
// namespace it is born in at argv[1].
const procArgvName = "jobkeeper-sandbox-proc"

// enterFailedCode is the exit code of a stage whose constructor could
// not enter the user namespace it was given (nsenter_cgo.go).
const enterFailedCode = 126

// joinUserNSEnv names, in an exec'd command's stage's environment, the
// descriptor of the user namespace nsenter_cgo.go enters.
const joinUserNSEnv = "_JOBKEEPER_SANDBOX_USERNS_FD"

// stageRootFD is the descriptor of the view's root an exec'd command's
// stage (stageConfig.EnterRoot) chroots into.
const stageRootFD = 5

func init() {
	if len(os.Args) == 2 && os.Args[0] == procArgvName {
		if err := unix.Mount("proc", os.Args[1], "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			fmt.Fprint(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// userNamespaced reports whether the container's processes run in user
// namespaces of their own (Config.UserNamespace).
func (s *supervisor) userNamespaced() bool { return s.cfg.UserNamespace != nil }

// checkUserNamespace says why the sandbox cannot give the container its
// own user namespace.
func (s *supervisor) checkUserNamespace() error {
	m := s.cfg.UserNamespace
	switch {
	case m == nil:
		return nil
	case !view.InitialUserNamespace():
		return errors.New("a user namespace of the container's own (hostUsers: false) needs a sandbox run by root")
	case !s.cfg.Isolate || !s.pidNamespaced():
		return errors.New("a user namespace of the container's own (hostUsers: false) needs the sandbox's mount namespace and a PID namespace")
	case s.cfg.JoinUserNamespace && (s.cfg.PIDNamespace != PIDJoin || !canEnterUserNamespace):
		return errors.New("a user namespace to enter needs a PID namespace to join and a build with cgo")
	case uint64(m.HostUID)+uint64(m.Size) > 1<<32-1 || uint64(m.HostGID)+uint64(m.Size) > 1<<32-1:
		return fmt.Errorf("the user namespace's mapping (%d ids from uid %d, gid %d) goes past the last id", m.Size, m.HostUID, m.HostGID)
	case m.Size == 0 || m.HostUID == 0 || m.HostGID == 0:
		return fmt.Errorf("the user namespace's mapping (%d ids from uid %d, gid %d) maps nothing or the host's root", m.Size, m.HostUID, m.HostGID)
	}
	return nil
}

// idMaps are the mappings Go's clone writes for the stage's namespace.
func (m *IDMapping) idMaps() (uids, gids []syscall.SysProcIDMap) {
	return []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(m.HostUID), Size: int(m.Size)}},
		[]syscall.SysProcIDMap{{ContainerID: 0, HostID: int(m.HostGID), Size: int(m.Size)}}
}

// writeIDMaps writes the mapping of the user namespace of pid, a stage
// forked without (inUserNamespace), through the sandbox's own procfs
// (procFS: the view's /proc numbers the container's PID namespace).
func (m *IDMapping) writeIDMaps(pid int) error {
	if procFS == nil {
		return errors.New("no procfs of the sandbox's to write the user namespace's mapping")
	}
	for _, f := range []struct {
		name string
		host uint32
	}{{"uid_map", m.HostUID}, {"gid_map", m.HostGID}} {
		fd, err := unix.Openat(int(procFS.Fd()), strconv.Itoa(pid)+"/"+f.name, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("writing the user namespace's %s: %w", f.name, err)
		}
		_, err = unix.Write(fd, []byte(fmt.Sprintf("0 %d %d\n", f.host, m.Size)))
		_ = unix.Close(fd)
		if err != nil {
			return fmt.Errorf("writing the user namespace's %s: %w", f.name, err)
		}
	}
	return nil
}

// ids is what the namespace lets the container's processes be.
func (m *IDMapping) ids() namespaceIDs {
	r := []idRange{{first: 0, size: uint64(m.Size)}}
	return namespaceIDs{uids: r, gids: r, setgroups: true}
}

// inUserNamespace adds to a stage's clone a new user namespace with the
// container's mapping, which Go's clone writes when mapNow (the sandbox
// still sees its own PID namespace's /proc there); else the caller writes
// it (writeIDMaps) before it sends the stage its config. The stage keeps the host's uid, which the namespace
// does not map (so that no process of the container, whose root is the
// range's first id, may trace it or open its /proc entries), and so would
// lose every capability at its execution: it keeps them as ambient ones,
// of its namespace, until it takes the container's own.
func (s *supervisor) inUserNamespace(sys *syscall.SysProcAttr, mapNow bool) {
	sys.Cloneflags |= syscall.CLONE_NEWUSER
	if mapNow {
		sys.UidMappings, sys.GidMappings = s.cfg.UserNamespace.idMaps()
		sys.GidMappingsEnableSetgroups = true
	}
	last := lastCap()
	for c := capability.Cap(0); c <= last; c++ {
		sys.AmbientCaps = append(sys.AmbientCaps, uintptr(c))
	}
}

// prepareUserNamespace runs once the init stage waits, before the view is
// built: it opens the stage's user namespace (the view's idmapped mounts
// go through it) and clones the host's mount tree, from which exec'd
// commands' stages are executed. Both are kept open for the sandbox's
// life.
func (s *supervisor) prepareUserNamespace() error {
	if s.userNS == nil {
		// The one the stage was born in.
		ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", s.stagePID))
		if err != nil {
			return fmt.Errorf("opening the container's user namespace: %w", err)
		}
		s.userNS = ns
	} else if err := s.checkJoinedMapping(); err != nil {
		// The one it entered: the pod's, or so the agent believed (a
		// process whose PID was reused would give another's).
		return err
	}
	if s.cfg.Pause {
		// Nothing is exec'd into a pause sandbox.
		return nil
	}
	// A private copy: what the host mounts or unmounts later does not
	// reach it. The view's SetUp makes the namespace's mounts private
	// anyway; doing it first keeps the copy out of the host's peer groups.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	tree, err := cloneHostTree()
	if err != nil {
		return fmt.Errorf("copying the host's root for exec'd commands (open_tree, Linux 5.2 or later): %w", err)
	}
	s.hostTree = os.NewFile(uintptr(tree), "host-tree")
	return nil
}

// checkJoinedMapping checks that the user namespace the stage entered
// (Config.JoinUserNamespace) maps what the container's config says: the
// view's mounts and the container's ids go by it.
func (s *supervisor) checkJoinedMapping() error {
	m := s.cfg.UserNamespace
	for _, f := range []struct {
		name string
		host uint32
	}{{"uid_map", m.HostUID}, {"gid_map", m.HostGID}} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", s.stagePID, f.name))
		if err != nil {
			return fmt.Errorf("reading the pod's user namespace's %s: %w", f.name, err)
		}
		want := []string{"0", strconv.FormatUint(uint64(f.host), 10), strconv.FormatUint(uint64(m.Size), 10)}
		if got := strings.Fields(string(b)); !slices.Equal(got, want) {
			return fmt.Errorf("the user namespace to enter maps %q, not the pod's range (%s)", strings.TrimSpace(string(b)), strings.Join(want, " "))
		}
	}
	return nil
}

// cloneHostTree returns a detached copy of what the stage's execution
// needs of the host: the root filesystem (this executable's dynamic
// loader and libraries), with the host's /proc (for /proc/self/exe) and
// /usr, /lib, /lib64 and /etc where they are filesystems of their own.
// Nothing else is in it, so the container's sandbox keeps no other
// filesystem of the host's mounted (another pod's tmpfs volume, a
// removable disk) for its life. A kernel that cannot attach mounts to a
// detached tree gets a copy of every mount instead, which does.
func cloneHostTree() (int, error) {
	root, err := unix.OpenTree(unix.AT_FDCWD, "/", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return -1, err
	}
	for _, p := range []string{"/proc", "/usr", "/lib", "/lib64", "/etc"} {
		if mounted, err := mountinfo.Mounted(p); err != nil || !mounted {
			continue
		}
		sub, err := unix.OpenTree(unix.AT_FDCWD, p, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err == nil {
			err = unix.MoveMount(sub, "", root, strings.TrimPrefix(p, "/"), unix.MOVE_MOUNT_F_EMPTY_PATH)
			_ = unix.Close(sub)
		}
		if err != nil {
			_ = unix.Close(root)
			return unix.OpenTree(unix.AT_FDCWD, "/", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		}
	}
	return root, nil
}

// viewIDMap is the view's Spec.IDMap: the stage's namespace.
func (s *supervisor) viewIDMap() *view.IDMap {
	if s.userNS == nil {
		return nil
	}
	m := s.cfg.UserNamespace
	return &view.IDMap{UserNS: int(s.userNS.Fd()), UID: m.HostUID, GID: m.HostGID}
}

// openViewRoot keeps a descriptor of the view's root, once the sandbox is
// in it, for exec'd commands' stages to chroot into.
func (s *supervisor) openViewRoot() error {
	f, err := os.OpenFile("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening the container's root: %w", err)
	}
	s.viewRoot = f
	return nil
}

// mountProcFromOutside mounts the procfs of the init stage's PID
// namespace on target with a helper forked into that namespace: the
// stage, in a user namespace that does not own the sandbox's mount
// namespace, may not mount there.
func (s *supervisor) mountProcFromOutside(target string) error {
	ns := s.pidNS
	if ns == nil {
		fd, err := unix.PidfdOpen(s.stagePID, 0)
		if err != nil {
			return fmt.Errorf("naming the container's PID namespace: %w", err)
		}
		ns = os.NewFile(uintptr(fd), "stage-pidfd")
		defer func() { _ = ns.Close() }()
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer func() { _ = errR.Close() }()
	attr := &syscall.ProcAttr{Env: []string{}, Files: []uintptr{^uintptr(0), ^uintptr(0), errW.Fd()}}
	pid, err := s.forkIn(ns, "/proc/self/exe", []string{procArgvName, target}, attr, false, false, nil)
	_ = errW.Close()
	if err != nil {
		return fmt.Errorf("starting the /proc helper: %w", err)
	}
	msg, _ := io.ReadAll(io.LimitReader(errR, 4096))
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
		return fmt.Errorf("waiting for the /proc helper: %w", err)
	}
	if !ws.Exited() || ws.ExitStatus() != 0 {
		return fmt.Errorf("mounting /proc of the container's PID namespace: %s (%v)", strings.TrimSpace(string(msg)), ws)
	}
	return nil
}

// spawnStaged starts a command exec'd into a container with a user
// namespace: an init stage forked into a new one with the container's
// mapping, in the container's PID namespace and cgroups, executed from
// the host's mount tree copy and told to chroot into the view
// (stageConfig.EnterRoot) before it takes the container's capabilities,
// seccomp filter and user and executes argv.
func (s *supervisor) spawnStaged(argv []string, files []*os.File, tty bool) (int, string, error) {
	cfg, reason, err := s.commandStage(argv)
	if err != nil {
		return 0, reason, err
	}
	cfg.EnterRoot = true
	sys := &syscall.SysProcAttr{Setpgid: !tty, Setsid: tty, Setctty: tty,
		// Resolved by the child (before its namespace is mapped, without
		// nsenter_cgo.go: it can then pass no directory of the
		// container's) from the forking thread's working directory, the
		// sandbox's own procfs: its descriptor of the copy, inherited.
		Chroot: "self/fd/" + strconv.Itoa(int(s.hostTree.Fd()))}
	// The main process's namespace, entered before the stage's runtime
	// starts (nsenter_cgo.go); without cgo, one of its own, mapped below.
	enter := s.userNS
	if !canEnterUserNamespace {
		enter = nil
		s.inUserNamespace(sys, false)
	}
	// Born outside the container's cgroups and moved in before it is
	// given the command, as the main process's stage: the memory the
	// stage's runtime takes first stays charged to the sandbox.
	pid, cfgW, errR, err := s.startStage(files, []*os.File{s.viewRoot}, enter, sys, procFS)
	if err != nil {
		return 0, ReasonStartError, fmt.Errorf("exec: %q: starting its init stage: %w", argv[0], err)
	}
	deadline := time.Now().Add(stageTimeout)
	_ = errR.SetReadDeadline(deadline)
	var b [1]byte
	if n, _ := io.ReadFull(errR, b[:]); n != 1 || b[0] != stageReady {
		_ = cfgW.Close()
		_ = errR.Close()
		_ = syscall.Kill(pid, syscall.SIGKILL)
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, 0, nil)
		why := "it ended before it was ready"
		if ws.Exited() && ws.ExitStatus() == enterFailedCode {
			why = "it could not enter the container's user namespace"
		} else if ws.Signaled() {
			why = "it was not ready within " + stageTimeout.String()
		}
		return 0, ReasonStartError, fmt.Errorf("exec: %q: starting its init stage: %s", argv[0], why)
	}
	// Before its config: the stage takes the container's user once it
	// has it, and runs it in the container's cgroups.
	err = nil
	if !canEnterUserNamespace {
		err = s.cfg.UserNamespace.writeIDMaps(pid)
	}
	if err == nil {
		err = s.cgroups.move(pid)()
	}
	if err != nil {
		_ = cfgW.Close()
		_ = errR.Close()
		_ = syscall.Kill(pid, syscall.SIGKILL)
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, 0, nil)
		return 0, ReasonStartError, fmt.Errorf("exec: %q: %w", argv[0], err)
	}
	reason, err = s.execStage(pid, cfgW, errR, cfg, deadline)
	if err != nil {
		return 0, reason, err
	}
	return pid, "", nil
}
