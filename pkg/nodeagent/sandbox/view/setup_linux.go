package view

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// setUp builds the view of cfg in the current mount namespace and makes it
// the process's root. It must run in a mount namespace of its own: the
// first step makes every mount private so that nothing propagates back to
// the host.
//
// In either mode the process then pivots into the view's root and
// detaches the host's, so that nothing of the host but what the plan
// binds or overlays is reachable: there is no chroot to climb out of.
func SetUp(cfg Spec, mountProc func(target string) error) error {
	if cfg.Scratch == "" {
		return errors.New("no scratch directory")
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private (is this a new mount namespace?): %w", err)
	}
	var ops []op
	masked := maskedPaths()
	if cfg.Rootfs != nil {
		var err error
		if ops, err = planImage(cfg, masked); err != nil {
			return err
		}
	} else {
		host, err := mountinfo.GetMounts(nil)
		if err != nil {
			return fmt.Errorf("reading the host's mounts: %w", err)
		}
		entries, err := readRoot()
		if err != nil {
			return err
		}
		if ops, err = plan(host, entries, cfg, masked); err != nil {
			return err
		}
	}
	layer := 0
	for _, o := range ops {
		if err := apply(o, cfg.Scratch, &layer, mountProc, cfg.IDMap); err != nil {
			return err
		}
	}
	root := rootDir(cfg.Scratch)
	if cfg.Rootfs == nil && cfg.IDMap != nil {
		// The root directory of host mode's view is the sandbox's; the
		// container's root owns it as it owns the host's.
		if err := os.Lchown(root, int(cfg.IDMap.UID), int(cfg.IDMap.GID)); err != nil {
			return fmt.Errorf("giving the root to the container's root: %w", err)
		}
	}
	if cfg.Rootfs == nil {
		// In host mode the root is a directory: pivot_root needs a mount.
		// (A chroot would let a container with CAP_SYS_CHROOT climb out
		// of it to the host's root.)
		if err := unix.Mount(root, root, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("binding the new root on itself: %w", err)
		}
	}
	if err := unix.Chdir(root); err != nil {
		return fmt.Errorf("entering the new root: %w", err)
	}
	// pivot_root(".", ".") stacks the old root on the new one; the detach
	// then takes it, and every host mount below it, away. Processes whose
	// root was the old one (the init stage) move along.
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivoting into the container's root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching the host's root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("entering the new root: %w", err)
	}
	return nil
}

// readRoot lists the host's root directory.
func readRoot() ([]rootEntry, error) {
	des, err := os.ReadDir("/")
	if err != nil {
		return nil, fmt.Errorf("reading the host's root directory: %w", err)
	}
	out := make([]rootEntry, 0, len(des))
	for _, d := range des {
		e := rootEntry{name: d.Name(), dir: d.IsDir(), symlink: d.Type()&os.ModeSymlink != 0}
		if e.symlink {
			if e.link, err = os.Readlink("/" + d.Name()); err != nil {
				continue
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// apply carries out one step. layer numbers the overlays' upper layers;
// mountProc mounts the container's procfs (opProc); idm, when set, is the
// user namespace the host's files are shown through (Spec.IDMap).
func apply(o op, scratch string, layer *int, mountProc func(target string) error, idm *IDMap) error {
	switch o.kind {
	case opTmpfs:
		if err := os.MkdirAll(o.target, 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", o.target, err)
		}
		if err := unix.Mount("tmpfs", o.target, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode="+o.mode); err != nil {
			return fmt.Errorf("mounting a tmpfs on %s: %w", o.target, err)
		}
	case opMkdir:
		if err := os.MkdirAll(o.target, 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", o.target, err)
		}
	case opSymlink:
		target := o.target
		if o.view {
			// Below a directory of the view (the image has not run yet).
			dir, err := viewTarget(op{target: filepath.Dir(o.target), view: true}, scratch, true)
			if err != nil {
				return err
			}
			target = filepath.Join(dir, filepath.Base(o.target))
		}
		if err := os.Symlink(o.source, target); err != nil {
			return fmt.Errorf("creating link %s: %w", o.target, err)
		}
	case opOverlay:
		*layer++
		return overlay(o.source, o.target, filepath.Join(scratch, "layers", strconv.Itoa(*layer)), mountFlags(o), idm)
	case opRbind:
		target := o.target
		if o.view {
			var err error
			if target, err = viewTarget(o, scratch, true); err != nil {
				return err
			}
		} else if _, err := os.Lstat(target); errors.Is(err, os.ErrNotExist) {
			// A mount point the steps before made room for (a
			// container's cgroup in the tmpfs of /sys/fs/cgroup).
			if err := ensure(target, true); err != nil {
				return fmt.Errorf("creating %s: %w", o.target, err)
			}
		}
		if o.readOnly {
			return bindTreeReadOnly(o.source, target)
		}
		if err := unix.Mount(o.source, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("binding %s: %w", o.source, err)
		}
	case opVolume:
		return mountVolume(rootDir(scratch), o.source, o.subPath, o.target, o.readOnly, o.recursiveRO, o.nodev, idm)
	case opDev:
		target := o.target
		if o.view {
			var err error
			if target, err = viewTarget(o, scratch, true); err != nil {
				return err
			}
		}
		if devOverlay(o.source, target, filepath.Join(scratch, "dev")) {
			return nil
		}
		return privateDev(o.source, target)
	case opMountPoint:
		return createMountPoint(rootDir(scratch), o.source, o.subPath, o.target, idm)
	case opReadOnly:
		target := o.target
		if o.view {
			var err error
			if target, err = existingTarget(o, scratch); err != nil || target == "" {
				return err
			}
		}
		if err := remountReadOnly(target); err != nil {
			return fmt.Errorf("making %s read-only: %w", o.target, err)
		}
	case opImage:
		flags := mountFlags(o)
		if o.readOnly {
			flags |= unix.MS_RDONLY
		}
		return imageOverlay(o.lowers, o.target, o.source, flags, idm)
	case opShm:
		return shm(rootDir(scratch), o.target, idm)
	case opMinimalDev:
		target, err := viewTarget(o, scratch, true)
		if err != nil {
			return err
		}
		return minimalDev(target, idm)
	case opProc:
		target, err := viewTarget(o, scratch, true)
		if err != nil {
			return err
		}
		if err := mountProc(target); err != nil {
			return fmt.Errorf("mounting the container's /proc: %w", err)
		}
		// The masks below are looked up under it: it must be a procfs.
		var fs unix.Statfs_t
		if err := unix.Statfs(target, &fs); err != nil || fs.Type != unix.PROC_SUPER_MAGIC {
			return fmt.Errorf("the container's /proc (%s) is not the procfs just mounted (%v)", target, err)
		}
	case opMask:
		p, err := existingTarget(o, scratch)
		if err != nil || p == "" {
			return err
		}
		return mask(p)
	case opHide:
		p, err := existingTarget(o, scratch)
		if err != nil || p == "" {
			return err
		}
		if st, err := os.Lstat(p); err == nil && st.IsDir() {
			if err := unix.Mount("tmpfs", p, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m"); err != nil {
				return fmt.Errorf("hiding %s: %w", o.target, err)
			}
			return nil
		}
		return mask(p)
	case opDetach:
		p, err := existingTarget(o, scratch)
		if err != nil || p == "" {
			return err
		}
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("removing the mounts on %s: %w", o.target, err)
		}
	case opReadOnlyPath:
		p, err := existingTarget(o, scratch)
		if err != nil || p == "" {
			return err
		}
		if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("binding %s to make it read-only: %w", o.target, err)
		}
		if err := remountReadOnly(p); err != nil {
			return fmt.Errorf("making %s read-only: %w", o.target, err)
		}
	}
	return nil
}

// mountFlags are the flags of a step's mount: MS_NODEV with o.nodev.
func mountFlags(o op) uintptr {
	if o.nodev {
		return unix.MS_NODEV
	}
	return 0
}

// viewTarget is where step o mounts: its target inside the view, created
// (a directory when dir) when o.view, else o.target created. Inside the
// view (an image's /dev, /proc, /sys) no component may be a symbolic
// link: a link would move the mount where the steps after it (masks, read-
// only paths) do not look, as runc refuses them.
func viewTarget(o op, scratch string, dir bool) (string, error) {
	if o.view {
		if err := noLinks(rootDir(scratch), o.target); err != nil {
			return "", err
		}
		target, err := mountPoint(rootDir(scratch), o.target, dir)
		if err != nil {
			return "", fmt.Errorf("creating mount point %s: %w", o.target, err)
		}
		return target, nil
	}
	if err := ensure(o.target, dir); err != nil {
		return "", fmt.Errorf("creating %s: %w", o.target, err)
	}
	return o.target, nil
}

// noLinks checks that no component of the container path p inside root
// is a symbolic link (the image is not running yet: nothing changes it
// meanwhile).
func noLinks(root, p string) error {
	cur := root
	for _, c := range strings.Split(strings.Trim(filepath.Clean(p), "/"), "/") {
		if c == "" {
			continue
		}
		cur = filepath.Join(cur, c)
		st, err := os.Lstat(cur)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the image's %s: %w", p, err)
		}
		if st.Mode()&os.ModeSymlink != 0 {
			return fmt.Errorf("the image's %s is, or is under, a symbolic link (%s): a container runtime refuses it", p, strings.TrimPrefix(cur, root))
		}
	}
	return nil
}

// bindTreeReadOnly binds source with everything mounted below it on
// target, every mount of the copy read-only, nosuid, nodev and noexec (the
// host's /sys, whose cgroup, tracing and debug filesystems would stay
// writable if only the top were remounted). It fails rather than bind
// them writable.
func bindTreeReadOnly(source, target string) error {
	src, err := os.OpenFile(source, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer func() { _ = src.Close() }()
	dst, err := os.OpenFile(target, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer func() { _ = dst.Close() }()
	tree, err := unix.OpenTree(int(src.Fd()), "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("binding %s read-only (open_tree, Linux 5.2): %w", source, err)
	}
	defer func() { _ = unix.Close(tree) }()
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
		return fmt.Errorf("making %s read-only with what is mounted below it (mount_setattr, Linux 5.12): %w", source, err)
	}
	if err := unix.MoveMount(tree, "", int(dst.Fd()), "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("binding %s read-only (move_mount): %w", source, err)
	}
	return nil
}

// existingTarget is step o's target resolved inside the view (when
// o.view), or "" when nothing is there: a masked or read-only path the
// kernel does not have is left alone.
func existingTarget(o op, scratch string) (string, error) {
	p := o.target
	if o.view {
		var err error
		if p, err = securejoin.SecureJoin(rootDir(scratch), o.target); err != nil {
			return "", fmt.Errorf("resolving %s: %w", o.target, err)
		}
	}
	if _, err := os.Lstat(p); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", nil
		}
		return "", fmt.Errorf("reading %s: %w", o.target, err)
	}
	return p, nil
}

// maskedPaths are the paths hidden from a container that is not
// privileged: defaultMaskedPaths and, as the kubelet adds them, the
// thermal_throttle directory of every CPU that has one.
func maskedPaths() []string {
	out := slices.Clone(defaultMaskedPaths)
	cpus, _ := filepath.Glob("/sys/devices/system/cpu/cpu[0-9]*/thermal_throttle")
	return append(out, cpus...)
}

// mask hides p: a directory under an empty read-only tmpfs, anything else
// under the host's /dev/null, as runc masks paths.
func mask(p string) error {
	st, err := os.Lstat(p)
	if err != nil {
		return fmt.Errorf("masking %s: %w", p, err)
	}
	if st.IsDir() {
		err = unix.Mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0,mode=0555")
	} else {
		err = unix.Mount("/dev/null", p, "", unix.MS_BIND, "")
	}
	if err != nil {
		return fmt.Errorf("masking %s: %w", p, err)
	}
	return nil
}

// defaultDevices are the device nodes of a container's /dev, as the OCI
// runtime specification lists them; bound from the host's.
var defaultDevices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// minimalDev mounts on target the /dev of a container that is not
// privileged, as runc makes it: a tmpfs with defaultDevices (each bound
// from the host's /dev, which works in a user namespace too), a devpts
// instance of its own with ptmx linked to its multiplexer, a private
// /dev/shm, and the links to the process's descriptors. Nothing else of
// the host's devices is there: no disk, no /dev/mem, no host terminal.
func minimalDev(target string, idm *IDMap) error {
	// nodev: a node the container makes there (CAP_MKNOD) cannot be
	// opened; the default devices are mounts of their own.
	if err := unix.Mount("tmpfs", target, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_STRICTATIME, "mode=755,size=65536k"+ownerOptions(idm)); err != nil {
		return fmt.Errorf("mounting a tmpfs on %s: %w", target, err)
	}
	for _, d := range defaultDevices {
		to := filepath.Join(target, d)
		if err := ensure(to, false); err != nil {
			return fmt.Errorf("creating %s: %w", to, err)
		}
		if err := unix.Mount(filepath.Join("/dev", d), to, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("binding the device /dev/%s: %w", d, err)
		}
	}
	pts := filepath.Join(target, "pts")
	if err := os.Mkdir(pts, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", pts, err)
	}
	flags := uintptr(unix.MS_NOSUID | unix.MS_NOEXEC)
	ttyGroup := uint32(5)
	if idm != nil {
		// The container's tty group, as the host stores it.
		ttyGroup += idm.GID
	}
	if err := unix.Mount("devpts", pts, "devpts", flags, "newinstance,ptmxmode=0666,mode=0620,gid="+strconv.FormatUint(uint64(ttyGroup), 10)); err != nil {
		// In a user namespace that does not map the tty group.
		if err2 := unix.Mount("devpts", pts, "devpts", flags, "newinstance,ptmxmode=0666,mode=0620"); err2 != nil {
			return fmt.Errorf("mounting a devpts on %s: %w", pts, err)
		}
	}
	shm := filepath.Join(target, "shm")
	if err := os.Mkdir(shm, 0o1777); err != nil {
		return fmt.Errorf("creating %s: %w", shm, err)
	}
	if err := unix.Mount("shm", shm, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=1777,size=65536k"+ownerOptions(idm)); err != nil {
		return fmt.Errorf("mounting a tmpfs on %s: %w", shm, err)
	}
	for name, to := range map[string]string{
		"ptmx": "pts/ptmx", "fd": "/proc/self/fd",
		"stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2",
	} {
		if err := os.Symlink(to, filepath.Join(target, name)); err != nil {
			return fmt.Errorf("creating link /dev/%s: %w", name, err)
		}
	}
	return nil
}

// imageOverlay mounts the overlay of an image's layers (lowers, top first)
// on target, with its upper and work directories under dir. There is no
// fallback: a container whose image cannot be mounted does not start.
func imageOverlay(lowers []string, target, dir string, flags uintptr, idm *IDMap) error {
	upper, work := filepath.Join(dir, "upper"), filepath.Join(dir, "work")
	for _, d := range []string{upper, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("creating the image's upper layer: %w", err)
		}
	}
	lowers, err := stageLowers(lowers, dir, idm)
	if err != nil {
		return fmt.Errorf("the image's layers: %w", err)
	}
	if len(lowers) > 0 {
		if err := ownUpper(upper, lowers[0], idm); err != nil {
			return err
		}
	}
	data, cwd, err := imageOptions(lowers, upper, work, unix.Getpagesize())
	if err != nil {
		return err
	}
	if cwd != "" {
		// The lower directories are named relative to their common parent.
		if err := unix.Chdir(cwd); err != nil {
			return fmt.Errorf("entering the image's layer directory: %w", err)
		}
		defer func() { _ = unix.Chdir("/") }()
	}
	err = unix.Mount("overlay", target, "overlay", flags, data)
	if err != nil {
		// In a user namespace overlayfs keeps its metadata in user.*
		// extended attributes, which must be asked for.
		if err2 := unix.Mount("overlay", target, "overlay", flags, data+",userxattr"); err2 == nil {
			return nil
		}
		return fmt.Errorf("mounting the image's %d layers as an overlay (the kernel refused: %w; image mode needs overlayfs, in a user namespace Linux 5.11 or later)", len(lowers), err)
	}
	return nil
}

// imageOptions returns the overlay mount options of an image and, when the
// absolute layer paths do not fit in a page (the kernel's limit on mount
// data), the directory they are named relative to instead (the caller's
// working directory during the mount). It fails when even that does not
// fit.
func imageOptions(lowers []string, upper, work string, page int) (string, string, error) {
	// Room for ",userxattr" and the terminating NUL.
	limit := page - len(",userxattr") - 1
	tail := ",upperdir=" + upper + ",workdir=" + work
	data := "lowerdir=" + strings.Join(lowers, ":") + tail
	if len(data) <= limit {
		return data, "", nil
	}
	common := filepath.Dir(lowers[0])
	for _, l := range lowers[1:] {
		for !Within(l, common) {
			common = filepath.Dir(common)
		}
	}
	rel := make([]string, len(lowers))
	for i, l := range lowers {
		r, err := filepath.Rel(common, l)
		if err != nil {
			return "", "", err
		}
		rel[i] = r
	}
	data = "lowerdir=" + strings.Join(rel, ":") + tail
	if len(data) > limit {
		return "", "", fmt.Errorf("the image's %d layers make overlay mount options of %d bytes, more than the kernel takes (%d)", len(lowers), len(data), limit)
	}
	return data, common, nil
}

// devOverlay gives the container a private /dev the cheap way, where the
// kernel allows it: one copy-on-write overlay of the host's /dev (source)
// on target, its upper layer under dir, then what is mounted below the
// host's /dev (/dev/pts, /dev/shm, /dev/mqueue...) bound at the same
// places. Files the container adds (a termination message file's mount
// point) stay in the upper layer. It reports false, leaving nothing
// mounted, when the overlay is refused or its device nodes cannot be
// opened: in a user namespace a mount holds no usable device node, and
// privateDev binds each entry instead.
func devOverlay(source, target, dir string) bool {
	if !InitialUserNamespace() {
		return false
	}
	upper, work := filepath.Join(dir, "upper"), filepath.Join(dir, "work")
	for _, d := range []string{upper, work} {
		if os.MkdirAll(d, 0o755) != nil {
			return false
		}
	}
	if strings.ContainsAny(source+dir, ",:\\") {
		return false
	}
	if err := os.MkdirAll(target, 0o755); err != nil {
		return false
	}
	if unix.Mount("overlay", target, "overlay", unix.MS_NOSUID, "lowerdir="+source+",upperdir="+upper+",workdir="+work) != nil {
		return false
	}
	undo := func() bool {
		_ = unix.Unmount(target, unix.MNT_DETACH)
		return false
	}
	f, err := os.OpenFile(filepath.Join(target, "null"), os.O_WRONLY, 0)
	if err != nil {
		return undo()
	}
	_ = f.Close()
	below, err := mountinfo.GetMounts(func(m *mountinfo.Info) (bool, bool) {
		p := filepath.Clean(m.Mountpoint)
		return p == source || !Within(p, source), false
	})
	if err != nil {
		return undo()
	}
	// The topmost mounts below /dev, each bound with what is below it.
	var tops []string
	for _, m := range below {
		tops = append(tops, filepath.Clean(m.Mountpoint))
	}
	sort.Slice(tops, func(i, j int) bool { return depth(tops[i]) < depth(tops[j]) })
	var bound []string
	for _, p := range tops {
		if slices.ContainsFunc(bound, func(b string) bool { return Within(p, b) }) {
			continue
		}
		rel, err := filepath.Rel(source, p)
		if err != nil {
			return undo()
		}
		to := filepath.Join(target, rel)
		if st, err := os.Stat(p); err != nil || !st.IsDir() {
			// A file mounted on (rare): bound like privateDev's entries.
			if ensure(to, false) != nil || unix.Mount(p, to, "", unix.MS_BIND|unix.MS_REC, "") != nil {
				return undo()
			}
		} else if os.MkdirAll(to, 0o755) != nil || unix.Mount(p, to, "", unix.MS_BIND|unix.MS_REC, "") != nil {
			return undo()
		}
		bound = append(bound, p)
	}
	return true
}

// InitialUserNamespace reports whether the process is in the host's user
// namespace (its uid_map maps every ID to itself), where an overlay's
// device nodes can be opened.
func InitialUserNamespace() bool {
	b, err := os.ReadFile("/proc/self/uid_map")
	return err == nil && strings.Join(strings.Fields(string(b)), " ") == "0 0 4294967295"
}

// privateDev mounts a tmpfs on target, the container's /dev, with the
// entries of the host's (source) in it: directories bound with what is
// mounted below them (/dev/pts, /dev/shm, /dev/mqueue), device nodes and
// other files bound one by one onto empty files, symbolic links copied.
// The bound nodes keep the host's mount, so devices open as on the host
// (in a user namespace too, where a tmpfs of the namespace's own could
// hold no usable device node). An entry that cannot be bound (gone since
// the listing) is left out. Like a container runtime's /dev, the tmpfs
// takes files the container's own mounts need there, such as the
// termination message file.
func privateDev(source, target string) error {
	des, err := os.ReadDir(source)
	if err != nil {
		return fmt.Errorf("reading the host's %s: %w", source, err)
	}
	if err := os.MkdirAll(target, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", target, err)
	}
	if err := unix.Mount("tmpfs", target, "tmpfs", unix.MS_NOSUID, "mode=755,size=65536k"); err != nil {
		return fmt.Errorf("mounting a tmpfs on %s: %w", target, err)
	}
	for _, d := range des {
		from, to := filepath.Join(source, d.Name()), filepath.Join(target, d.Name())
		switch {
		case d.Type()&os.ModeSymlink != 0:
			link, err := os.Readlink(from)
			if err == nil {
				_ = os.Symlink(link, to)
			}
		case d.IsDir():
			if os.Mkdir(to, 0o755) == nil && unix.Mount(from, to, "", unix.MS_BIND|unix.MS_REC, "") != nil {
				_ = os.Remove(to)
			}
		default:
			if ensure(to, false) == nil && unix.Mount(from, to, "", unix.MS_BIND, "") != nil {
				_ = os.Remove(to)
			}
		}
	}
	return nil
}

// shm mounts a private tmpfs on the container's /dev/shm (target, inside
// root) with Docker's default size, when the bound /dev provides the
// directory: creating it would create it in the host's /dev.
func shm(root, target string, idm *IDMap) error {
	p, err := securejoin.SecureJoin(root, target)
	if err != nil {
		return fmt.Errorf("resolving %s: %w", target, err)
	}
	if st, err := os.Stat(p); err != nil || !st.IsDir() {
		return nil
	}
	if err := unix.Mount("shm", p, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=1777,size=65536k"+ownerOptions(idm)); err != nil {
		return fmt.Errorf("mounting a tmpfs on %s: %w", target, err)
	}
	return nil
}

// overlay mounts a copy-on-write view of lower on target, its upper layer
// under dir. When the kernel refuses (a file, a filesystem that cannot be a
// lower layer, a path overlayfs cannot name, filesystems mounted below it
// in a user namespace, one that cannot be idmapped through idm), lower
// and what is mounted below it are bound read-only instead (not idmapped:
// its files show as the overflow id, 65534, in the container's user
// namespace).
func overlay(lower, target, dir string, flags uintptr, idm *IDMap) error {
	upper, work := filepath.Join(dir, "upper"), filepath.Join(dir, "work")
	for _, d := range []string{upper, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("creating overlay layer: %w", err)
		}
	}
	st, err := os.Stat(lower)
	if err != nil {
		return fmt.Errorf("reading %s: %w", lower, err)
	}
	if err := ensure(target, st.IsDir()); err != nil {
		return err
	}
	var overlayErr error
	if !st.IsDir() {
		overlayErr = errors.New("not a directory")
	} else if strings.ContainsAny(lower, ",:\\") {
		overlayErr = errors.New("path cannot be named in overlay options")
	} else if staged, err := stageLowers([]string{lower}, dir, idm); err != nil {
		overlayErr = err
	} else if err := ownUpper(upper, staged[0], idm); err != nil {
		overlayErr = err
	} else {
		data := "lowerdir=" + staged[0] + ",upperdir=" + upper + ",workdir=" + work
		overlayErr = unix.Mount("overlay", target, "overlay", flags, data)
		if overlayErr != nil {
			// In a user namespace overlayfs keeps its metadata in user.*
			// extended attributes, which must be asked for.
			if err := unix.Mount("overlay", target, "overlay", flags, data+",userxattr"); err == nil {
				overlayErr = nil
			}
		}
	}
	if overlayErr == nil {
		return nil
	}
	if err := unix.Mount(lower, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("binding %s (no overlay: %v): %w", lower, overlayErr, err)
	}
	if err := remountAdding(target, unix.MS_RDONLY|flags); err != nil {
		return fmt.Errorf("making %s read-only (no overlay: %v): %w", lower, overlayErr, err)
	}
	return nil
}

// mountPoint resolves the container path p inside root, symbolic links
// included (a link of the image's, such as /etc/hosts pointing to /run,
// stays inside the view), and creates it, a directory or an empty file,
// with any missing parent when missing (in the view's upper layer).
func mountPoint(root, p string, dir bool) (string, error) {
	target, err := securejoin.SecureJoin(root, p)
	if err != nil {
		return "", err
	}
	return target, ensure(target, dir)
}

// ensure creates a mount point: a directory, or an empty file, when missing.
// An existing file is never opened (O_EXCL): it may be a FIFO of the image,
// whose open would wait for a writer for ever, or a device.
func ensure(p string, dir bool) error {
	if dir {
		return os.MkdirAll(p, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o644)
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return f.Close()
}

// remountReadOnly makes a bind mount read-only, keeping the flags of the
// filesystem it shows (a user namespace may not drop them).
func remountReadOnly(target string) error {
	return remountAdding(target, unix.MS_RDONLY)
}

// remountAdding remounts the bind mount on target with the flags add
// (MS_RDONLY, MS_NODEV) beside those it has.
func remountAdding(target string, add uintptr) error {
	var fs unix.Statfs_t
	if err := unix.Statfs(target, &fs); err != nil {
		return err
	}
	flags := unix.MS_BIND | unix.MS_REMOUNT | add
	if fs.Flags&unix.ST_RDONLY != 0 {
		flags |= unix.MS_RDONLY
	}
	for st, ms := range map[int64]uintptr{
		unix.ST_NOSUID: unix.MS_NOSUID, unix.ST_NODEV: unix.MS_NODEV, unix.ST_NOEXEC: unix.MS_NOEXEC,
		unix.ST_NOATIME: unix.MS_NOATIME, unix.ST_NODIRATIME: unix.MS_NODIRATIME, unix.ST_RELATIME: unix.MS_RELATIME,
	} {
		if fs.Flags&st != 0 {
			flags |= ms
		}
	}
	return unix.Mount("", target, "", flags, "")
}
