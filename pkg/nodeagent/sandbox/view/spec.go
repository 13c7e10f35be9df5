package view

// Spec is what SetUp builds for one container attempt; the sandbox fills
// it from its Config.
type Spec struct {
	// Scratch is an existing, empty host directory on which the view's
	// tmpfs (upper layers, the new root) is mounted. Required; in image
	// mode it may not hold ',', ':' or a backslash.
	Scratch string
	// Rootfs, when not nil, is the container's image (image mode); nil:
	// a copy-on-write view of the host's filesystems (host mode).
	Rootfs *Rootfs
	// Mounts are the container's volume mounts, in order.
	Mounts []Mount
	// ReadOnlyRoot makes the view's root read-only once built.
	ReadOnlyRoot bool
	// WorkingDir is created (before the root is made read-only) when set.
	WorkingDir string
	// Privileged gives the host's devices, a writable /sys, nothing
	// masked and no nodev.
	Privileged bool
	// UnmaskedProc leaves /proc without masked and read-only paths.
	UnmaskedProc bool
	// Hide are host directories a host-mode view shows empty.
	Hide []string
	// Cgroups are the container's own cgroup directories, each bound
	// over its hierarchy's mount point in the view's /sys (read-only but
	// for a privileged container), as runc binds them on cgroup v1: the
	// container reads its own limits at /sys/fs/cgroup.
	Cgroups []CgroupBind
	// IDMap, when not nil, is the user namespace the container's
	// processes run in (hostUsers: false): what the view shows of the
	// host's files (the image's layers, host mode's directories, the
	// volumes) is mounted idmapped through it, so that a file the host
	// stores as owned by id N shows as N inside, and what the container
	// writes as N is stored as N; and what the view makes for the
	// container (the root's upper layer, /dev, /dev/shm) belongs to the
	// namespace's root. See idmap_linux.go.
	IDMap *IDMap
}

// IDMap names a user namespace for idmapped mounts.
type IDMap struct {
	// UserNS is an open descriptor of the namespace (/proc/PID/ns/user).
	UserNS int
	// UID and GID are the host's ids of the namespace's root.
	UID, GID uint32
}

// CgroupBind is one cgroup directory shown at a hierarchy's mount point.
type CgroupBind struct {
	// Source is the host's directory of the container's cgroup.
	Source string
	// Target is the hierarchy's mount point (a path below /sys).
	Target string
}

// Rootfs is an image's unpacked layer directories, bottom first.
type Rootfs struct {
	// Layers are absolute paths without ',', ':' or a backslash.
	Layers []string
}

// Mount is one volume mount.
type Mount struct {
	// Source is the host path of the volume (or its file).
	Source string
	// SubPath is the path below Source that is mounted, resolved inside
	// it by handle; empty: Source itself.
	SubPath string
	// Target is the absolute path inside the container.
	Target string
	// ReadOnly mounts it read-only.
	ReadOnly bool
	// RecursiveReadOnly makes every mount below Source read-only too.
	RecursiveReadOnly bool
	// Image makes this an image volume: Source is ignored, and the volume
	// is a read-only overlay of Layers, the image's unpacked layer
	// directories (bottom first; absolute paths without ',', ':' or a
	// backslash; none: an empty directory), assembled on the scratch
	// tmpfs.
	Image  bool
	Layers []string
}
