package sandbox

import "time"

// ArgvName is argv[0] of a sandbox process. The package's init function
// turns a process started under this name into a sandbox.
const ArgvName = "jobkeeper-sandbox"

// Config is what one sandbox runs. The agent sends it over a pipe as JSON.
type Config struct {
	// Isolate asks for the private filesystem view (the process must have
	// been started in a new mount namespace). False runs on the host's.
	Isolate bool `json:"isolate,omitempty"`
	// Scratch is an existing, empty host directory on which the sandbox
	// mounts the tmpfs that holds the overlays' upper layers and the new
	// root. Required with Isolate. In image mode it may not hold ',', ':'
	// or a backslash (overlay's separators).
	Scratch string `json:"scratch,omitempty"`
	// Mounts are the container's volume mounts, in the order given.
	Mounts []Mount `json:"mounts,omitempty"`
	// Probe makes the sandbox build the view and exit without running
	// anything (the agent's availability check).
	Probe bool `json:"probe,omitempty"`
	// Command is the container's command and arguments, expanded. The first
	// element is looked up in the container's PATH inside the view.
	Command []string `json:"command,omitempty"`
	// Env is the container's environment as NAME=value pairs. exec
	// requests run with it too.
	Env []string `json:"env,omitempty"`
	// WorkingDir is the directory the main process and exec'd commands
	// start in; it is created inside the view when missing. Empty: the
	// view's root.
	WorkingDir string `json:"workingDir,omitempty"`
	// Rootfs, when not nil, is the container's image: the view's root is
	// an overlay of its layers (image mode). Nil: the view is a
	// copy-on-write view of the host's filesystems (host mode). Requires
	// Isolate.
	Rootfs *Rootfs `json:"rootfs,omitempty"`
	// User is who the main process and exec'd commands run as, resolved
	// inside the view. Nil: the sandbox's own user (root in its namespace).
	User *User `json:"user,omitempty"`
	// Hostname is the container's hostname (the pod's), set in the
	// sandbox's own UTS namespace, which StartOptions.UTS asks for; Start
	// drops it otherwise, so that the host's name is never changed. Empty:
	// the host's name.
	Hostname string `json:"hostname,omitempty"`
	// TTY says the sandbox's stdin, stdout and stderr are one terminal:
	// the main process gets it as its controlling terminal, in a session
	// of its own.
	TTY bool `json:"tty,omitempty"`
	// PIDNamespace is PIDHost, PIDContainer or PIDJoin (see there); any
	// but PIDHost needs Isolate (the view gets the namespace's /proc).
	PIDNamespace string `json:"pidNamespace,omitempty"`
	// ReadOnlyRoot makes the view's root filesystem read-only
	// (readOnlyRootFilesystem): in image mode the image's overlay, in host
	// mode every overlay of the host's directories and the root itself.
	// Volumes, /dev, /proc and /sys keep their own modes. The mount points
	// of the volumes and the working directory are created first.
	ReadOnlyRoot bool `json:"readOnlyRoot,omitempty"`
	// NoNewPrivileges sets no_new_privs on the main process and exec'd
	// commands (allowPrivilegeEscalation: false): a setuid or file
	// capability program gains nothing.
	NoNewPrivileges bool `json:"noNewPrivileges,omitempty"`
	// OOMScoreAdj is the oom_score_adj of the main process and exec'd
	// commands; nil keeps the sandbox's. A value below the sandbox's needs
	// CAP_SYS_RESOURCE: without it the sandbox's stays.
	OOMScoreAdj *int `json:"oomScoreAdj,omitempty"`
	// Capabilities are the capabilities the container's processes may
	// hold, named as capabilities(7) names them ("CAP_CHOWN"): the bounding
	// set of the main process and of every exec'd command, so that one
	// running as root has exactly these and one running as another user
	// none, but what a file among them grants. ContainerCapabilities
	// computes them from a securityContext. Empty: none. Names the kernel
	// does not have are ignored, as runc ignores them. Not used with
	// Privileged.
	Capabilities []string `json:"capabilities,omitempty"`
	// Privileged runs the container as the kubelet's runtimes run a
	// privileged one: every capability, the host's devices in /dev, and
	// /proc and /sys without masked or read-only paths.
	Privileged bool `json:"privileged,omitempty"`
	// Hide are host directories a host-mode view (Rootfs nil) shows empty
	// (an empty read-only tmpfs over each): the agent's data directory,
	// whose credentials, images and other pods' files the host's programs
	// must not read. Volumes whose sources lie in them are still mounted
	// (their sources are opened on the host's side). Image mode shows
	// nothing of the host's anyway.
	Hide []string `json:"hide,omitempty"`
	// Seccomp is the container's seccomp profile, loaded into the main
	// process and every exec'd command; nil: Unconfined. Not used with
	// Privileged. A profile that cannot be compiled fails the start
	// (CreateContainerError naming it).
	Seccomp *Seccomp `json:"seccomp,omitempty"`
	// UnmaskedProc leaves the container's /proc without masked and
	// read-only paths (procMount: Unmasked).
	UnmaskedProc bool `json:"unmaskedProc,omitempty"`
	// Pause makes the main process a pause process instead of Command: PID
	// 1 of a new PID namespace (PIDContainer) that only reaps the
	// processes orphaned in it, for a pod whose containers share it.
	Pause bool `json:"pause,omitempty"`
	// CgroupEnter and CgroupLeave are the sandbox's descriptors of the
	// cgroup.procs files of the container's cgroups and of the sandbox's
	// own (one per hierarchy, in the same order), set by Start from
	// StartOptions.Cgroup (cgroup.go).
	CgroupEnter []int `json:"cgroupEnter,omitempty"`
	CgroupLeave []int `json:"cgroupLeave,omitempty"`
	// CgroupViews are the container's cgroup directories the view shows
	// at their hierarchies' mount points (view.Spec.Cgroups).
	CgroupViews []CgroupView `json:"cgroupViews,omitempty"`
	// StateDir, when set, makes the sandbox durable (see durable.go): an
	// existing host directory, private to this attempt, where the sandbox
	// listens for a restarted agent (control.sock), records its main
	// process (state.json) and that process's end (exit.json). A durable
	// sandbox outlives its agent: when the control socket closes it keeps
	// the container running and waits OrphanTimeout for an agent to adopt
	// it (Adopt) before stopping it.
	StateDir string `json:"stateDir,omitempty"`
	// LogPath is the host file where a durable sandbox itself stores the
	// main process's stdout and stderr (package logfile's format), rotated
	// at LogMaxSize (0: logfile.DefaultMaxSize). Durable sandboxes only.
	LogPath    string `json:"logPath,omitempty"`
	LogMaxSize int64  `json:"logMaxSize,omitempty"`
	// OrphanTimeout is how long a durable sandbox whose agent went away
	// waits for another to adopt it; 0 means DefaultOrphanTimeout.
	OrphanTimeout time.Duration `json:"orphanTimeout,omitempty"`
	// StopGrace is the grace period of the stop that follows: SIGTERM to
	// the main process, then everything is killed after it. 0 means
	// DefaultStopGrace.
	StopGrace time.Duration `json:"stopGrace,omitempty"`
	// UserNamespace, when set, runs the container's processes in a user
	// namespace that maps the container's ids 0 to Size-1 onto the host's
	// from HostUID and HostGID (hostUsers: false; the pod's range, which
	// the agent allocates as the kubelet does): the container's root is
	// an unprivileged user of the host's. See userns.go. Needs a sandbox
	// run by root, Isolate, and a PID namespace (PIDContainer or PIDJoin).
	UserNamespace *IDMapping `json:"userNamespace,omitempty"`
	// JoinUserNamespace, set by Start from StartOptions.JoinUserNamespace,
	// says the sandbox has joinUserFD: the user namespace its container's
	// processes enter instead of a new one.
	JoinUserNamespace bool `json:"joinUserNamespace,omitempty"`
}

// IDMapping is a user namespace's mapping of the container's ids 0 to
// Size-1 onto the host's, from HostUID (users) and HostGID (groups).
type IDMapping struct {
	HostUID uint32 `json:"hostUID"`
	HostGID uint32 `json:"hostGID"`
	Size    uint32 `json:"size"`
}

// Rootfs is the root filesystem of a container run from an image.
type Rootfs struct {
	// Layers are the image's unpacked layer directories on the host, bottom
	// first. overlayfs reads whiteouts (0/0 character devices) and opaque
	// directories (the trusted.overlay.opaque or, in a user namespace,
	// user.overlay.opaque extended attribute) in them. A path may not hold
	// ',', ':' or a backslash (overlay's separators).
	Layers []string `json:"layers"`
}

// User is the identity a container's processes take; see resolveUser.
type User struct {
	// Image is the image config's User: "", "name", "uid", "name:group",
	// "uid:gid", names looked up in the view's /etc/passwd and /etc/group.
	Image string `json:"image,omitempty"`
	// RunAsUser and RunAsGroup override the user and group parts of Image.
	RunAsUser  *int64 `json:"runAsUser,omitempty"`
	RunAsGroup *int64 `json:"runAsGroup,omitempty"`
	// SupplementalGroups are added to the user's groups.
	SupplementalGroups []int64 `json:"supplementalGroups,omitempty"`
	// StrictGroups leaves out the groups the image's /etc/group lists the
	// user in (supplementalGroupsPolicy: Strict): the primary group and
	// SupplementalGroups only.
	StrictGroups bool `json:"strictGroups,omitempty"`
}

// CgroupView is one of the container's cgroup directories, shown at its
// hierarchy's mount point.
type CgroupView struct {
	// Source is the host's directory of the container's cgroup.
	Source string `json:"source"`
	// Target is the hierarchy's mount point, below /sys.
	Target string `json:"target"`
}

// Identity is who a container's main process runs as, in the container's
// own ids (what `id` shows inside it), as the runtime reports it for the
// container's status (status.containerStatuses[].user).
type Identity struct {
	// UID and GID are the user and primary group.
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	// Groups are the supplementary groups, the primary group first.
	Groups []uint32 `json:"groups,omitempty"`
}

// Mount is one volume mount of the container.
type Mount struct {
	// Source is the host path: a directory or file the agent prepared for
	// the volume, or a hostPath.
	Source string `json:"source"`
	// SubPath, when set, is the path below Source that is mounted
	// (volumeMounts' subPath): relative, without "..", resolved inside
	// Source by handle (symbolic links cannot lead out of it) and created
	// there as a directory when missing. Needs openat2 (Linux 5.6).
	SubPath string `json:"subPath,omitempty"`
	// Target is the absolute path inside the container.
	Target string `json:"target"`
	// ReadOnly mounts it read-only.
	ReadOnly bool `json:"readOnly,omitempty"`
	// RecursiveReadOnly makes every mount below Source read-only too
	// (with ReadOnly; needs mount_setattr, RecursiveReadOnlySupported).
	RecursiveReadOnly bool `json:"recursiveReadOnly,omitempty"`
	// Image makes this an image volume (an image volume source of the
	// pod): Source is ignored, and the volume is a read-only overlay of
	// Layers, the image's unpacked layer directories, bottom first (none:
	// an empty directory).
	Image  bool     `json:"image,omitempty"`
	Layers []string `json:"layers,omitempty"`
}
