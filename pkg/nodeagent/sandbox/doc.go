// Package sandbox runs one container attempt of the local node agent inside
// a small supervisor process, the sandbox, so that the attempt gets a private
// view of the filesystem and can be exec'd into, and so that nothing it
// starts outlives it.
//
// # Two modes
//
// Image mode (Config.Rootfs set): the container's root is its image. The
// view's root is one overlay whose lower layers are the image's unpacked
// layer directories (top first in the mount options; named relative to
// their common parent when the absolute paths would not fit in a page) and
// whose upper layer lives on a tmpfs private to the attempt, so every
// attempt, a restart included, starts from the pristine image and its
// writes vanish with it. /dev, /proc and /sys are a container runtime's
// (see Confinement below); /tmp and everything else are the image's. The
// pod's volumes and the agent's per-pod files
// (/etc/hosts, /etc/resolv.conf, /etc/hostname, given as ordinary file
// mounts) are bound at their paths resolved inside the image, so a link
// such as /etc/hosts -> /run/hosts leads to /run/hosts in the view, and
// what is missing is created in the upper layer. The sandbox then
// pivot_roots into the view and detaches the host's root: nothing of the
// host but those binds is reachable. When the kernel refuses the overlay
// the start fails; it never falls back to the host's filesystem.
//
// Host mode (Rootfs nil): "the host is the image": the container sees the
// host's filesystems, but through copy-on-write overlays whose upper layers
// live on a tmpfs private to the attempt, so writes to / stay in the
// container and vanish with it. /dev, /proc and /sys are as in image
// mode; /tmp is overlaid like any directory; the directories of
// Config.Hide (the agent's data directory) are empty; the pod's volumes
// (prepared on the host by the agent) are bound at their mount paths,
// read-only where asked. A host filesystem that cannot be overlaid is
// mounted read-only instead: nothing a container writes reaches the host
// except through a volume. The sandbox pivots into this view as into an
// image's and detaches the host's root (a chroot could be climbed out of
// with CAP_SYS_CHROOT).
//
// In either mode, with StartOptions.UTS, the sandbox is also in a UTS
// namespace of its own, where it sets Config.Hostname (the pod's) before
// anything runs: hostname and uname -n print it, in the main process and
// in exec'd ones, and the host's name is untouched. ProbeUTS says whether
// the machine allows it; where it does not, the agent starts sandboxes
// without it and they keep the host's name (Start drops Config.Hostname, so
// the host's name is never changed).
//
// With Config.PIDNamespace (pidns.go), the main process is in a PID
// namespace other than the sandbox's: a new one whose PID 1 it is
// (PIDContainer, as runc), or one to join (PIDJoin: a pod's shared one,
// whose PID 1 is a pause sandbox's main process, Config.Pause; or an
// ephemeral container's target's). The sandbox stays outside, in the
// agent's namespace, as a runtime's shim does. It forks the init stage,
// this executable again under another name, into that namespace before it
// builds the view (the executable's dynamic loader may not be in an
// image), lets it say it runs, has it mount its namespace's /proc in the
// view being built, builds the rest of the view (the pivot_root moves the
// stage's root along), then sends it the command: the stage takes the
// container's capabilities, seccomp filter, user and working directory and
// executes the command, which so keeps its PID. Commands exec'd into the
// container join the namespace (setns on a locked thread, through a pidfd
// of the main process). Killing the attempt kills the main process and the
// exec'd commands (in a namespace of its own, the end of PID 1 kills the
// rest), never processes found in /proc, which now numbers the namespace's.
// ProbePID says whether the machine allows it.
//
// Config.ReadOnlyRoot (readOnlyRootFilesystem) makes the root read-only
// once the view is built: the mount points of the volumes and the working
// directory are created first, then the root (in host mode, every overlay
// and the root, bound on itself for that) is remounted read-only, then the
// volumes are mounted with their own modes. Config.NoNewPrivileges
// (allowPrivilegeEscalation: false) sets no_new_privs on the sandbox
// before anything runs (and in the PID namespace's init stage), so the main
// process and exec'd commands inherit it.
//
// # Confinement
//
// As containerd and runc confine a container by default, in either mode:
//
//   - Volumes are mounted by handle (package view): the source, with
//     its subPath resolved inside it by openat2 RESOLVE_IN_ROOT (created
//     there when missing), and the mount point, resolved and created inside
//     the view, are O_PATH descriptors; the mount goes from one to the
//     other (open_tree, mount_setattr, move_mount) and the mount point,
//     resolved again, must show the source. A link swapped in by a
//     container sharing the volume cannot lead a mount out of it.
//   - Capabilities (capabilities.go): Config.Capabilities is the bounding
//     set of the main process and of every exec'd command, limited on the
//     thread that executes it (the init stage) or forks it; inheritable
//     and ambient are empty. Privileged keeps every one.
//   - seccomp (seccomp.go): Config.Seccomp compiled to BPF in pure Go and
//     loaded on that same thread, after the bounding set and before the
//     container's user is taken.
//   - /proc: with a PID namespace, a procfs of that namespace mounted by
//     its init stage before the view replaces the host's root (the stage
//     is asked with a stageConfig whose ProcAt is set): no procfs of the
//     host's is ever beneath it; in the host's PID namespace, one the
//     sandbox mounts (or, in a user namespace, the host's bound). The
//     kubelet's masked paths are hidden and its read-only paths made
//     read-only, unless UnmaskedProc or Privileged.
//   - /dev (opMinimalDev): a tmpfs with the OCI default devices bound from
//     the host's, a devpts instance and a shm of its own; a privileged
//     container's is the host's (opDev: an overlay of it as root).
//   - /sys: the host's, read-only but for a privileged container.
//
// Cgroups (cgroup.go): with StartOptions.Cgroup, the sandbox moves the
// init stage into the container's cgroups while it builds the view, and
// the stage runs the container's command only once it is there; for the
// other processes of the container (the main process where there is no
// init stage, an exec'd command) it moves itself into them just before
// the fork and back right after. The container's processes, and only
// they, are in them.
//
// Network namespaces (StartOptions.Network, as root): by default the
// sandbox shares the agent's network; it may instead be started into a new
// one (a pod's holder, which the agent then wires: package podnet) or into
// a pod's, so that its processes and every command exec'd into it are
// there from birth. Not done: IPC namespaces (the container shares the
// host's System V IPC); /sys still shows the host's network devices.
//
// # Users
//
// Config.User is resolved inside the view, after the pivot, as runc and
// containerd do: the image's user ("name", "uid", "name:group", "uid:gid",
// names looked up in the image's /etc/passwd and /etc/group), replaced by
// runAsUser and runAsGroup when set, plus the groups /etc/group lists the
// user in and the pod's supplementalGroups. HOME comes from passwd when the
// environment has none. The main process and every exec'd process (exec,
// exec probes) take that identity; the sandbox itself stays root in its
// namespace. A name the image does not know fails the start with
// CreateContainerError.
//
// The image's files are not trusted: /etc/passwd and /etc/group must be
// regular files (symbolic links resolved inside the image) of at most
// 1 MiB, or the start fails with CreateContainerError ("/etc/passwd of the
// image is not a regular file") instead of blocking on a FIFO or reading a
// device; a mount point the image already has is bound over, never opened;
// and only a regular file is executed.
//
// Run by root, the sandbox has every id. Run by another user that has
// subordinate ids (/etc/subuid, /etc/subgid) and newuidmap/newgidmap
// (StartOptions.SubIDs, DetectSubIDs), its user namespace maps that user
// as 0 and ids 1 to 65536 onto the user's range, as rootless Podman does:
// the parent writes the mapping with the helpers while the sandbox waits,
// and the sandbox then executes itself again as the namespace's root (a
// process executed before the mapping holds no capability there). A
// container may then run as any of those users; the image's files, which
// the agent's user unpacked, all belong to root. Without subordinate ids
// the namespace maps only that user, as 0: a container can run as root
// (uid 0, gid 0) and nothing else, and a container asking for any other
// user, group or supplemental group fails to start with
// CreateContainerError saying so and what to configure; it never runs as
// someone else. Groups only the image's /etc/group adds are dropped there,
// and the processes keep the agent's groups (setgroups is denied in such a
// namespace).
//
// Run by root with Config.UserNamespace (hostUsers: false), the sandbox
// stays root of the host's namespace but the container's processes run in
// user namespaces mapping its ids 0 to 65535 onto the pod's range of the
// host's, and the view's host files are idmapped mounts through them
// (userns.go says how, and what differs from a runtime with one namespace
// per pod).
//
// # The process
//
// The sandbox is the agent's own executable started again under the name
// ArgvName; the package's init function recognises that name and runs the
// supervisor instead of the program's main. It is started in a new mount
// namespace (and, for a user other than root, a new user namespace mapping
// that user to root; and, when asked, a new UTS namespace), so nothing it
// mounts is visible outside. Where that is not possible, Config.Isolate is
// false and the sandbox runs the attempt on the host filesystem; the agent
// then refuses pods that have volumes, and images.
//
// The main process gets the sandbox's stdin, stdout and stderr, which the
// sandbox then lets go of; with Config.TTY they are one terminal, which
// becomes the main process's controlling terminal in a session of its own.
//
// The command is looked up in the PATH of the container's environment
// inside the view; the working directory is created inside the view when
// missing.
//
// The agent and the sandbox talk over a socket pair (SOCK_SEQPACKET) that
// also carries file descriptors: the sandbox reports the main process's
// start and exit, runs exec requests inside its view (and namespaces), and
// relays signals. A signal goes to the main process alone, as a container
// runtime signals PID 1, so a shell that traps SIGTERM stops its children
// itself; Kill, and the main process's end, kill everything else.
// When the agent goes away (even by SIGKILL) the socket closes. A sandbox
// that is not durable then kills everything the attempt started. A
// durable one (Config.StateDir, durable.go) is to its container what a
// container runtime's shim is: it was started in a session of its own,
// without a parent-death signal, and writes the container's log itself, so
// the container keeps running; it records the main process and its end in
// the state directory and listens there for a restarted agent (Adopt),
// which takes it over; and if none comes within Config.OrphanTimeout (five
// minutes by default) it stops the container (SIGTERM, then SIGKILL after
// Config.StopGrace) and ends, so nothing is left running for ever. The
// sandbox is a child subreaper, so processes that daemonise are still its
// descendants and die with it.
//
// The agent never waits on a sandbox without a bound. Start waits for the
// sandbox's first message at most StartOptions.Timeout (by default
// DefaultStartTimeout, two minutes, the kubelet's runtime request timeout)
// and no longer than its context; then it kills the sandbox and everything
// in its session and fails with CreateContainerError ("the container did
// not start within ..."). Exec gives up when its context ends, whether
// sending the request or waiting for the answer, and a command the sandbox
// starts after that is killed (kindExecCancel); Signal and Kill give up
// sending after a few seconds, and Kill then kills the session from the
// agent's side.
//
// Files: config.go (what the agent asks for), cgroup.go (the container's
// cgroups), capabilities.go and
// seccomp.go (what the container's processes may do), user.go
// and idmap.go (who the processes run as), supervisor.go (the sandbox
// process), pidns.go (PID namespaces: the init stage, the pause process,
// joining), client.go (the agent's side), durable.go and adopt.go (a
// sandbox that outlives its agent), protocol.go (the messages),
// procfs.go (finding a session's processes), userns.go (a user namespace
// of the container's own as root). Package view builds the
// filesystem view (the plan, the mounts, volumes by handle, the pivot);
// package imagetest builds small images for tests.
package sandbox
