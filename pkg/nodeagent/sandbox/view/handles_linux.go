package view

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	securejoin "github.com/cyphar/filepath-securejoin"
	pathrs "github.com/cyphar/filepath-securejoin/pathrs-lite"
	"golang.org/x/sys/unix"
)

// Volumes are mounted by handle, never by a path string: a container that
// shares a volume with this one (or the image) may swap a directory on the
// way for a symbolic link at any moment, and a path looked up twice may
// lead somewhere else the second time (the kubelet's CVE-2017-1002101 and
// CVE-2021-25741). So every path a container could influence is resolved
// once, inside its root (openat2 RESOLVE_IN_ROOT, through
// filepath-securejoin's pathrs-lite), into an O_PATH descriptor; the
// mount is made from and onto those descriptors (open_tree and
// move_mount; /proc/self/fd/N on kernels without them), and checked
// afterwards by resolving the mount point again.

// openat2Probe remembers whether the kernel has openat2 (Linux 5.6).
var openat2Probe = sync.OnceValue(func() error {
	fd, err := unix.Openat2(unix.AT_FDCWD, "/", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC | unix.O_DIRECTORY})
	if err != nil {
		return err
	}
	_ = unix.Close(fd)
	return nil
})

// openSource opens what a volume mount shows: the volume's directory or
// file (source, a path the agent chose: the pod's volume, a claim's
// directory, a hostPath) or, with subPath, the path below it, resolved by
// handle inside source and created there as a directory when missing (as
// the kubelet creates it). The result is an O_PATH descriptor.
func openSource(source, subPath string) (*os.File, error) {
	root, err := os.OpenFile(source, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if subPath == "" {
		return root, nil
	}
	defer func() { _ = root.Close() }()
	if err := openat2Probe(); err != nil {
		return nil, fmt.Errorf("subPath %q: this kernel has no openat2 (Linux 5.6 or later), without which a subPath cannot be resolved safely; it is refused rather than mounted by path: %w", subPath, err)
	}
	if filepath.IsAbs(subPath) || hasDotDot(subPath) {
		return nil, fmt.Errorf("subPath %q must be a relative path without '..'", subPath)
	}
	h, err := pathrs.OpenatInRoot(root, subPath)
	if errors.Is(err, os.ErrNotExist) {
		h, err = makeSubPath(root, subPath)
	}
	if err != nil {
		return nil, fmt.Errorf("subPath %q: %w", subPath, err)
	}
	return h, nil
}

// makeSubPath creates a missing subPath inside the volume root, as the
// kubelet does, with the root's mode (so an emptyDir's subPath is
// world-writable, and with an fsGroup group-owned and setgid like the
// root), whatever the umask.
func makeSubPath(root *os.File, subPath string) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(root.Fd()), &st); err != nil {
		return nil, err
	}
	perm := st.Mode & 0o7777
	h, err := pathrs.MkdirAllHandle(root, subPath, os.FileMode(perm&0o777))
	if err != nil {
		return nil, err
	}
	dir, err := pathrs.Reopen(h, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		_ = h.Close()
		return nil, err
	}
	defer func() { _ = dir.Close() }()
	if err := unix.Fchmod(int(dir.Fd()), perm); err != nil {
		_ = h.Close()
		return nil, err
	}
	return h, nil
}

// hasDotDot reports a path with a ".." component.
func hasDotDot(p string) bool {
	for _, c := range strings.Split(filepath.ToSlash(p), "/") {
		if c == ".." {
			return true
		}
	}
	return false
}

// openRoot opens the view's root directory as a handle.
func openRoot(root string) (*os.File, error) {
	return os.OpenFile(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
}

// openMountPoint opens the mount point p, a path inside the view whose
// root is root, creating it when missing: a directory when dir, else an
// empty file (never opening an existing one: it may be a FIFO of the
// image). Symbolic links on the way are followed inside the view (an
// image's /etc/hosts -> /run/hosts leads to /run/hosts there, created when
// missing), and every step is taken by handle, so a link swapped in
// meanwhile cannot lead outside it. What it creates belongs to the
// container's root with idm (Spec.IDMap). The result is an O_PATH
// descriptor.
func openMountPoint(root *os.File, p string, dir bool, idm *IDMap) (*os.File, error) {
	var f *os.File
	err := asContainerRoot(idm, func() error {
		var err error
		f, err = openMountPointHere(root, p, dir)
		return err
	})
	return f, err
}

// openMountPointHere is openMountPoint with the caller's ids.
func openMountPointHere(root *os.File, p string, dir bool) (*os.File, error) {
	// Where p leads inside the view, dangling links followed: only a
	// name, which the handles below reach again safely.
	full, err := securejoin.SecureJoin(root.Name(), p)
	if err != nil {
		return nil, err
	}
	rel, err := filepath.Rel(root.Name(), full)
	if err != nil || hasDotDot(rel) {
		return nil, fmt.Errorf("%s resolves outside the container's root", p)
	}
	if dir {
		return pathrs.MkdirAllHandle(root, rel, 0o755)
	}
	parent, err := pathrs.MkdirAllHandle(root, filepath.Dir(rel), 0o755)
	if err != nil {
		return nil, err
	}
	defer func() { _ = parent.Close() }()
	base := filepath.Base(rel)
	fd, err := unix.Openat(int(parent.Fd()), base, unix.O_CREAT|unix.O_EXCL|unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err == nil {
		_ = unix.Close(fd)
	} else if !errors.Is(err, unix.EEXIST) {
		return nil, err
	}
	fd, err = unix.Openat(int(parent.Fd()), base, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), filepath.Join(root.Name(), rel))
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = f.Close()
		return nil, err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		// Resolved above, so swapped in since: refused, not followed.
		_ = f.Close()
		return nil, fmt.Errorf("%s became a symbolic link while it was being mounted on", p)
	}
	return f, nil
}

// errRecursiveReadOnly is the failure of a recursively read-only mount on
// a kernel without mount_setattr.
var errRecursiveReadOnly = errors.New("a recursively read-only mount needs mount_setattr (Linux 5.12)")

// bindHandles binds what src names on the mount point dst (both O_PATH
// descriptors), with what is mounted below src, read-only when readOnly
// (the top mount only, as the kubelet's readOnly is not recursive; every
// mount of the copy with recursiveRO, recursiveReadOnly Enabled) and,
// with nodev, every mount of the copy nodev (a device node a container
// makes in a volume cannot be opened).
//
// With idm (Spec.IDMap) the copy is idmapped through its user namespace,
// every mount of it: a volume that cannot be (a filesystem without
// idmapped mounts) fails, as the kubelet's runtimes fail it.
func bindHandles(src, dst *os.File, readOnly, recursiveRO, nodev bool, idm *IDMap) error {
	var late uintptr
	if nodev {
		late |= unix.MS_NODEV
	}
	if readOnly {
		late |= unix.MS_RDONLY
	}
	tree, err := unix.OpenTree(int(src.Fd()), "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
	if errors.Is(err, unix.ENOSYS) && idm != nil {
		return errors.New("this kernel has no open_tree (Linux 5.2 or later), without which a volume cannot be mounted idmapped for a pod with hostUsers: false")
	}
	if errors.Is(err, unix.ENOSYS) {
		if readOnly && recursiveRO {
			return errRecursiveReadOnly
		}
		// Linux before 5.2: the descriptors' magic links name the same
		// places; the flags are added once the mount is made.
		if err := unix.Mount(fdPath(src), fdPath(dst), "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return err
		}
		return remountHandle(dst, late)
	}
	if err != nil {
		return fmt.Errorf("open_tree: %w", err)
	}
	defer func() { _ = unix.Close(tree) }()
	if idm != nil {
		if err := idmapTree(tree, idm, true); err != nil {
			return err
		}
	}
	setattr := func(flags uint64, at uint) error {
		if flags == 0 {
			return nil
		}
		return unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|at, &unix.MountAttr{Attr_set: flags})
	}
	var nodevAttr, roAttr uint64
	if nodev {
		nodevAttr = unix.MOUNT_ATTR_NODEV
	}
	if readOnly {
		roAttr = unix.MOUNT_ATTR_RDONLY
	}
	var roAt uint
	if recursiveRO {
		roAt = unix.AT_RECURSIVE
	}
	err = setattr(nodevAttr, unix.AT_RECURSIVE)
	if err == nil {
		err = setattr(roAttr, roAt)
	}
	switch {
	case errors.Is(err, unix.ENOSYS) && readOnly && recursiveRO:
		return errRecursiveReadOnly
	case errors.Is(err, unix.ENOSYS):
		// Linux before 5.12: remounted once in place (the top mount).
	case err != nil:
		return fmt.Errorf("mount_setattr: %w", err)
	default:
		late = 0
	}
	if err := unix.MoveMount(tree, "", int(dst.Fd()), "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount: %w", err)
	}
	return remountHandle(dst, late)
}

// remountHandle adds the flags add (none: nothing to do) to the mount just
// made on dst, reaching it through a handle of its root, which must still
// show what was mounted.
func remountHandle(dst *os.File, add uintptr) error {
	if add == 0 {
		return nil
	}
	// dst names the mount point beneath; the new mount's root is what a
	// fresh lookup of that place gives.
	top, err := os.OpenFile(fdPath(dst), unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer func() { _ = top.Close() }()
	return remountAdding(fdPath(top), add)
}

// fdPath names an open file through this process's descriptor table.
func fdPath(f *os.File) string { return "/proc/self/fd/" + strconv.Itoa(int(f.Fd())) }

// sameFile reports whether a and b are the same file (device and inode).
func sameFile(a, b *os.File) (bool, error) {
	var sa, sb unix.Stat_t
	if err := unix.Fstat(int(a.Fd()), &sa); err != nil {
		return false, err
	}
	if err := unix.Fstat(int(b.Fd()), &sb); err != nil {
		return false, err
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino, nil
}

// VolumeError is a volume mount that cannot be resolved inside its volume
// or its container's root: the container's configuration is at fault, not
// the node, and the sandbox reports it as CreateContainerConfigError.
type VolumeError struct {
	// err says which volume and path, and why.
	err error
}

func (e *VolumeError) Error() string { return e.err.Error() }
func (e *VolumeError) Unwrap() error { return e.err }

// mountVolume mounts one volume (source, subPath, readOnly, recursiveRO,
// nodev) at target, a path inside the view whose root is root, by handle: the source and the
// mount point are each resolved once, the mount goes from one descriptor
// to the other, and the mount point, resolved again, must then show the
// source. The error names the volume's source and target.
func mountVolume(root, source, subPath, target string, readOnly, recursiveRO, nodev bool, idm *IDMap) error {
	if err := checkVolumeTarget(target, nodev); err != nil {
		return err
	}
	src, dir, err := openVolumeSource(source, subPath, target)
	if err != nil {
		return err
	}
	defer func() { _ = src.Close() }()
	rootH, dst, err := openVolumeTarget(root, target, dir, idm)
	if err != nil {
		return err
	}
	defer func() { _ = rootH.Close() }()
	defer func() { _ = dst.Close() }()
	if err := bindHandles(src, dst, readOnly, recursiveRO, nodev, idm); err != nil {
		return fmt.Errorf("mounting %s at %s: %w", source, target, err)
	}
	// A path on the way that changed meanwhile (a link swapped in by a
	// container sharing a volume) leads elsewhere now: refused.
	again, err := openMountPoint(rootH, target, dir, nil)
	if err != nil {
		return &VolumeError{fmt.Errorf("checking the mount at %s: %w", target, err)}
	}
	defer func() { _ = again.Close() }()
	if same, err := sameFile(src, again); err != nil {
		return fmt.Errorf("checking the mount at %s: %w", target, err)
	} else if !same {
		return &VolumeError{fmt.Errorf("the mount of %s at %s is not where the path leads now: a directory on the way changed while it was mounted", source, target)}
	}
	return nil
}

// createMountPoint creates the mount point of a volume (source, subPath)
// at target inside the view whose root is root, by handle, before the
// root is made read-only; without a source, target is the working
// directory. What it creates belongs to the container's root with idm.
func createMountPoint(root, source, subPath, target string, idm *IDMap) error {
	dir := true
	if source != "" {
		src, isDir, err := openVolumeSource(source, subPath, target)
		if err != nil {
			return err
		}
		_ = src.Close()
		dir = isDir
	}
	rootH, dst, err := openVolumeTarget(root, target, dir, idm)
	if err != nil {
		return err
	}
	_ = dst.Close()
	return rootH.Close()
}

// checkVolumeTarget refuses a volume mounted at or under /proc in a
// container that is not privileged (confined, as nodev says), as runc
// refuses it: it would cover the container's procfs or its masked paths.
func checkVolumeTarget(target string, confined bool) error {
	if confined && Within(filepath.Clean("/"+target), "/proc") {
		return &VolumeError{fmt.Errorf("mount path %s is /proc or under it, which a container runtime refuses", target)}
	}
	return nil
}

// openVolumeSource opens a volume mount's source (openSource) and says
// whether it is a directory; target names the mount in errors.
func openVolumeSource(source, subPath, target string) (*os.File, bool, error) {
	src, err := openSource(source, subPath)
	if err != nil {
		return nil, false, &VolumeError{fmt.Errorf("volume source %s for %s: %w", source, target, err)}
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(src.Fd()), &st); err != nil {
		_ = src.Close()
		return nil, false, fmt.Errorf("volume source %s for %s: %w", source, target, err)
	}
	return src, st.Mode&unix.S_IFMT == unix.S_IFDIR, nil
}

// openVolumeTarget opens the view's root and, inside it, the mount point
// target (openMountPoint), created when missing.
func openVolumeTarget(root, target string, dir bool, idm *IDMap) (*os.File, *os.File, error) {
	rootH, err := openRoot(root)
	if err != nil {
		return nil, nil, fmt.Errorf("opening the container's root: %w", err)
	}
	dst, err := openMountPoint(rootH, target, dir, idm)
	if err != nil {
		_ = rootH.Close()
		return nil, nil, &VolumeError{fmt.Errorf("creating mount path %s: %w", target, err)}
	}
	return rootH, dst, nil
}
