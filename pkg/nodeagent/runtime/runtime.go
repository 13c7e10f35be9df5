package runtime

import (
	"context"
	"io"
	"os"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Spec is one container attempt, fully resolved by the pod worker.
type Spec struct {
	// PodNamespace is the pod's namespace (for logging).
	PodNamespace string
	// PodName is the pod's name (for logging).
	PodName string
	// PodUID is the pod's UID.
	PodUID string
	// ContainerName is the container's name.
	ContainerName string
	// Attempt is the restart count of this attempt (0 for the first run).
	Attempt int32
	// Command is the expanded command followed by the expanded args. Empty
	// means the container declared no command.
	Command []string
	// Env is the resolved environment as NAME=value pairs, in order.
	Env []string
	// WorkingDir is the directory the process starts in. In host mode
	// (Rootfs nil) it exists on the host; in image mode it is a path inside
	// the container's view and is created there when missing, as runc does.
	WorkingDir string
	// LogPath is the file the container's stdout and stderr go to.
	LogPath string
	// Annotations are the pod's annotations (the simulated runtime reads
	// its instructions from them).
	Annotations map[string]string
	// Mounts are the container's volume mounts, host paths prepared by
	// the agent. A runtime that cannot give a container its own
	// filesystem view refuses a spec with mounts.
	Mounts []Mount
	// Rootfs, when not nil, is the container's image: its layers are the
	// view's root. Nil: the host is the image (the view is a private
	// copy-on-write view of the host's root).
	Rootfs *Rootfs
	// User is who the container's processes run as. Nil: the agent's own
	// user and groups. In host mode the agent sets it only to give the
	// agent's user the pod's supplemental groups (as root).
	User *User
	// Hostname is the pod's hostname (its spec.hostname or its name, at
	// most 63 characters). A runtime that gives the container a UTS
	// namespace of its own sets it there; empty, or without one, the
	// container sees the host's name.
	Hostname string
	// Stdin gives the main process a stdin the runtime keeps open (a
	// pipe, or the terminal with TTY) and that attaching clients write
	// to; false: /dev/null.
	Stdin bool
	// StdinOnce closes that stdin once the first client that attached
	// with stdin detaches (without TTY, as containerd does).
	StdinOnce bool
	// TTY makes a terminal the main process's stdin, stdout and stderr;
	// what it prints still goes to the log, as stdout.
	TTY bool
	// ReadOnlyRoot makes the container's root filesystem read-only
	// (securityContext.readOnlyRootFilesystem); its volumes keep their own
	// modes. Only a runtime with a private filesystem view (Isolator) can;
	// the agent does not ask others.
	ReadOnlyRoot bool
	// UserNamespace, when set, runs the container's processes in a user
	// namespace that maps its ids 0 to Length-1 onto the host's from
	// HostID (a pod with hostUsers: false; the range is the pod's). The
	// agent sets it only where the runtime is a UserNamespacer that says
	// it can.
	UserNamespace *IDRange
	// NoNewPrivileges runs the container's processes with no_new_privs
	// (securityContext.allowPrivilegeEscalation: false).
	NoNewPrivileges bool
	// OOMScoreAdj is the oom_score_adj of the container's processes, as
	// the kubelet computes it from the pod's QoS class; nil leaves the
	// runtime's own.
	OOMScoreAdj *int
	// Privileged runs the container as a privileged one
	// (securityContext.privileged): every capability, the host's devices,
	// /proc without masked paths.
	Privileged bool
	// CapabilitiesAdd and CapabilitiesDrop are the container's
	// securityContext.capabilities, applied by the runtime to its default
	// set, as CRI passes them. Not used with Privileged.
	CapabilitiesAdd, CapabilitiesDrop []string
	// UnmaskedProc leaves /proc without masked and read-only paths
	// (securityContext.procMount: Unmasked).
	UnmaskedProc bool
	// Seccomp is the container's seccomp profile; nil: Unconfined. Not
	// used with Privileged.
	Seccomp *Seccomp
	// PIDNamespace is the container's process namespace, as CRI's
	// NamespaceMode: PIDNamespaceContainer (the default, ""), Pod or
	// Target. A runtime without PID namespaces (PIDNamespacer) runs every
	// container in the host's.
	PIDNamespace PIDNamespaceMode
	// PIDTarget is the running attempt whose namespace a Target container
	// joins (an ephemeral container's targetContainerName).
	PIDTarget Handle
	// StateDir is an existing directory private to this attempt where a
	// runtime whose attempts outlive the agent (Adopter) keeps what a
	// restarted agent needs to take the attempt over. Empty: the attempt
	// dies with the agent.
	StateDir string
	// CgroupParent is the pod's cgroup (a cgroupfs path), in which a
	// runtime that makes cgroups (CgroupRuntime) makes the container's,
	// as CRI's cgroup_parent; empty: the container gets no cgroup.
	CgroupParent string
	// Resources are what the container's cgroup gets, as the kubelet
	// asks a CRI runtime; with CgroupParent.
	Resources *runtimeapi.LinuxContainerResources
	// NetworkNamespace is the file of the pod's network namespace (a pod
	// with a network of its own), which the container's processes, and
	// every command exec'd into it, are in; empty: the host's. Only a
	// NetworkJoiner that says it can is given one.
	NetworkNamespace string
	// GracePeriod is the pod's termination grace period: how long a stop
	// the runtime decides on its own (an attempt whose agent never came
	// back) waits between SIGTERM and SIGKILL.
	GracePeriod time.Duration
}

// PIDNamespaceMode says which PID namespace a container's processes are in.
type PIDNamespaceMode string

// PID namespace modes.
const (
	// PIDNamespaceContainer: one of its own, whose PID 1 is the main
	// process.
	PIDNamespaceContainer PIDNamespaceMode = ""
	// PIDNamespacePod: the pod's, shared by its containers
	// (shareProcessNamespace), whose PID 1 is a pause process.
	PIDNamespacePod PIDNamespaceMode = "Pod"
	// PIDNamespaceTarget: Spec.PIDTarget's.
	PIDNamespaceTarget PIDNamespaceMode = "Target"
	// PIDNamespaceHost: the host's (a hostPID pod, or where containers
	// cannot share one: PIDNamespacer.SharedPIDNamespaces).
	PIDNamespaceHost PIDNamespaceMode = "Host"
)

// PIDNamespacer is implemented by runtimes that can give containers PID
// namespaces.
type PIDNamespacer interface {
	// PIDNamespaces reports whether containers get them; when not, reason
	// says why, and containers see the host's processes.
	PIDNamespaces() (ok bool, reason string)
	// SharedPIDNamespaces reports whether containers can share one
	// (PIDNamespacePod, PIDNamespaceTarget); when not, reason says why.
	SharedPIDNamespaces() (ok bool, reason string)
}

// NetworkJoiner is implemented by runtimes that can run containers in a
// pod's network namespace (Spec.NetworkNamespace).
type NetworkJoiner interface {
	// NetworkNamespaces reports whether they can; when not, reason says
	// why.
	NetworkNamespaces() (ok bool, reason string)
}

// Rootfs is the root filesystem of a container run from an image.
type Rootfs struct {
	// Layers are the image's unpacked layer directories on the host,
	// bottom first.
	Layers []string
}

// User is the identity a container's processes take.
type User struct {
	// Image is the image config's User: "", "name", "uid", "name:group",
	// "uid:gid" (names resolved in the image's /etc/passwd and /etc/group
	// inside the view, as runc does).
	Image string
	// RunAsUser and RunAsGroup (securityContext) override what Image says.
	RunAsUser, RunAsGroup *int64
	// SupplementalGroups are added to the groups the user has.
	SupplementalGroups []int64
	// StrictGroups (supplementalGroupsPolicy: Strict) leaves out the
	// groups the image's /etc/group gives the user.
	StrictGroups bool
}

// ContainerUser is who an attempt's main process runs as, in the
// container's ids, for status.containerStatuses[].user.
type ContainerUser struct {
	// UID and GID are the user and primary group.
	UID, GID int64
	// SupplementalGroups are all its groups, the primary group first.
	SupplementalGroups []int64
}

// UserReporter is implemented by Handles that know who their attempt runs
// as (the kubelet reports what the runtime says).
type UserReporter interface {
	// User is nil when the runtime does not know (an adopted attempt).
	User() *ContainerUser
}

// Seccomp is a container's seccomp profile, resolved by the agent.
type Seccomp struct {
	// RuntimeDefault asks for the runtime's default profile.
	RuntimeDefault bool
	// Profile is a Localhost profile's content (the JSON format Docker and
	// containerd read), when not RuntimeDefault.
	Profile []byte
	// Name is the Localhost profile's file, for messages.
	Name string
}

// Mount is one volume mount of a container.
type Mount struct {
	// Source is the host path: the volume's directory or file prepared by
	// the agent, or a hostPath.
	Source string
	// SubPath, when set, is the path below Source that is mounted (a
	// volumeMount's subPath), resolved by the runtime inside Source, by
	// handle, and created there as a directory when missing.
	SubPath string
	// Target is the absolute path inside the container.
	Target string
	// ReadOnly mounts it read-only.
	ReadOnly bool
	// RecursiveReadOnly makes every mount below Source read-only too
	// (recursiveReadOnly Enabled); with ReadOnly alone only the top one
	// is. Only for a RecursiveReadOnlyMounter that supports it.
	RecursiveReadOnly bool
	// ImageVolume names the pod's image volume this mounts (an image
	// volume source): Source is empty, and the volume is a read-only
	// overlay of Layers, its image's unpacked layer directories, bottom
	// first, which the agent fills once the image is pulled.
	ImageVolume string
	Layers      []string
}

// IDRange is a pod's range of host ids for its user namespace: users and
// groups HostID to HostID+Length-1 are the container's 0 to Length-1.
type IDRange struct {
	HostID, Length uint32
}

// UserNamespacer is implemented by runtimes that can give containers user
// namespaces of their own (Spec.UserNamespace).
type UserNamespacer interface {
	// UserNamespaces reports whether they can; when not, reason says what
	// the machine lacks.
	UserNamespaces() (ok bool, reason string)
}

// RecursiveReadOnlyMounter is implemented by runtimes that may support
// recursively read-only mounts (the kubelet asks the runtime handler's
// features).
type RecursiveReadOnlyMounter interface {
	// RecursiveReadOnlyMounts reports whether Mount.RecursiveReadOnly is
	// honoured.
	RecursiveReadOnlyMounts() bool
}

// Isolator is implemented by runtimes that can give each container a
// private filesystem view in which volumes are mounted.
type Isolator interface {
	// Isolation reports whether containers get a private view; when not,
	// reason says what the machine lacks.
	Isolation() (ok bool, reason string)
}

// ExecRequest is a command to run inside a running container.
type ExecRequest struct {
	// Command is the command and its arguments.
	Command []string
	// TTY runs the command on a terminal; Stdin, Stdout and Stderr are
	// then the same terminal file.
	TTY bool
	// Stdin, Stdout and Stderr are the command's streams.
	Stdin, Stdout, Stderr *os.File
}

// Execer is implemented by handles of attempts that commands can be run
// in (kubectl exec).
type Execer interface {
	// Exec runs req in the container's environment, working directory and
	// filesystem view and returns its exit code once it ends. An error
	// means it did not run (a *StartError says why) or ctx ended first.
	Exec(ctx context.Context, req ExecRequest) (int32, error)
}

// TerminalSize is a terminal's size in characters.
type TerminalSize struct {
	// Width and Height are columns and rows.
	Width, Height uint16
}

// AttachRequest connects a client to a running container's main process
// (kubectl attach).
type AttachRequest struct {
	// Stdin, when not nil, is copied to the container's stdin (if it has
	// one) until it ends.
	Stdin io.Reader
	// Stdout and Stderr, when not nil, receive the container's output
	// from now on; with a terminal everything goes to Stdout.
	Stdout, Stderr io.Writer
	// Resize carries the client's terminal size changes (terminal only).
	Resize <-chan TerminalSize
}

// Attacher is implemented by handles of attempts that clients can attach
// to.
type Attacher interface {
	// Attach streams until the container's output ends, a client stream
	// fails, or the client's stdin ends (then the client detaches; with
	// StdinOnce and no terminal the container's stdin is closed instead
	// and the output follows until the container ends), or ctx ends.
	Attach(ctx context.Context, req AttachRequest) error
}

// Result is how a container attempt ended.
type Result struct {
	// ExitCode is the exit code; 128+signal when killed by a signal.
	ExitCode int32
	// Signal is the signal that killed the process, 0 if it exited.
	Signal int32
	// Reason is a kubelet-style reason ("Completed", "Error",
	// "ContainerCannotRun", ...).
	Reason string
	// Message is a human readable explanation, may be empty.
	Message string
	// StartedAt is when the attempt started.
	StartedAt time.Time
	// FinishedAt is when the attempt ended.
	FinishedAt time.Time
}

// Handle is a started container attempt.
type Handle interface {
	// PID is the process id (also the process group id) of the attempt, 0
	// when there is no host process.
	PID() int
	// Done is closed when the attempt has ended.
	Done() <-chan struct{}
	// Result is valid once Done is closed.
	Result() Result
	// Stop asks the attempt to end: a graceful signal first, a forceful one
	// after grace. It returns at once; watch Done.
	Stop(grace time.Duration)
}

// Runtime starts container attempts.
type Runtime interface {
	// Start starts one attempt. An error means the attempt could not be
	// created at all (the worker reports it as a failed start); a Handle
	// whose Result has a non-zero exit code is a container that ran and failed.
	Start(ctx context.Context, spec Spec) (Handle, error)
	// Name is the runtime's name as given to --runtime.
	Name() string
}

// CgroupRuntime is implemented by runtimes that may put containers in
// cgroups and enforce their limits.
type CgroupRuntime interface {
	// Cgroups reports whether they do (Spec.CgroupParent is honoured);
	// when not, reason says why.
	Cgroups() (ok bool, reason string)
}

// Resizer is implemented by handles whose resources can change while
// they run, as CRI's UpdateContainerResources changes a container's (an
// in-place pod resize).
type Resizer interface {
	// Resizable reports whether the attempt has a cgroup to resize; when
	// not, its limits were never enforced and there is nothing to write.
	Resizable() bool
	// UpdateResources writes r into the attempt's cgroup.
	UpdateResources(r *runtimeapi.LinuxContainerResources) error
	// MemoryUsage is the memory the attempt's processes use now.
	MemoryUsage() (int64, error)
}

// StatsReporter is implemented by handles that can tell what their
// attempt uses, from its cgroup, for the kubelet's stats and resource
// metrics endpoints.
type StatsReporter interface {
	// Stats is what the attempt has used so far; an error when it has no
	// cgroup to read.
	Stats() (ContainerStats, error)
}

// ContainerStats is what a container attempt uses.
type ContainerStats struct {
	// CPU is the CPU time its processes used, cumulative.
	CPU time.Duration
	// Memory is the memory they use now, and WorkingSet that memory less
	// the inactive file cache the kernel can take back (the kubelet's
	// working set, what eviction and `kubectl top` look at).
	Memory, WorkingSet uint64
	// StartedAt is when the attempt started.
	StartedAt time.Time
}

// ReasonOOMKilled is the reason of a container one of whose processes the
// kernel's OOM killer killed, as container runtimes report it.
const ReasonOOMKilled = "OOMKilled"

// ReasonFor returns the kubelet's reason for a terminated container.
func ReasonFor(exitCode int32) string {
	if exitCode == 0 {
		return "Completed"
	}
	return "Error"
}

// StartError is returned by Start when the attempt could not be created. The
// pod worker reports it as a container terminated with exit code 128 and
// this reason, as a kubelet does for a container that failed to start.
type StartError struct {
	// Reason is a CamelCase reason for the container status.
	Reason string
	// Message explains what went wrong.
	Message string
}

// Error implements error.
func (e *StartError) Error() string { return e.Reason + ": " + e.Message }
