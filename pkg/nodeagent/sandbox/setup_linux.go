package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
func setUp(cfg Config) error {
	if cfg.Scratch == "" {
		return errors.New("no scratch directory")
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private (is this a new mount namespace?): %w", err)
	}
	host, err := mountinfo.GetMounts(nil)
	if err != nil {
		return fmt.Errorf("reading the host's mounts: %w", err)
	}
	layer := 0
	for _, o := range plan(host, cfg) {
		if err := apply(o, cfg.Scratch, &layer); err != nil {
			return err
		}
	}
	root := rootDir(cfg.Scratch)
	if err := unix.Chdir(root); err != nil {
		return fmt.Errorf("entering the new root: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("changing root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("entering the new root: %w", err)
	}
	return nil
}

// apply carries out one step. layer numbers the overlays' upper layers.
func apply(o op, scratch string, layer *int) error {
	switch o.kind {
	case opTmpfs:
		if err := os.MkdirAll(o.target, 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", o.target, err)
		}
		if err := unix.Mount("tmpfs", o.target, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode="+o.mode); err != nil {
			return fmt.Errorf("mounting a tmpfs on %s: %w", o.target, err)
		}
	case opOverlay:
		*layer++
		return overlay(o.source, o.target, filepath.Join(scratch, "layers", strconv.Itoa(*layer)), o.source == "/")
	case opRbind:
		if err := unix.Mount(o.source, o.target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("binding %s: %w", o.source, err)
		}
		if o.readOnly {
			// Best effort: a remount that would unlock flags inherited
			// from the host is refused in a user namespace.
			_ = remountReadOnly(o.target)
		}
	case opVolume:
		return volume(o, rootDir(scratch))
	}
	return nil
}

// overlay mounts a copy-on-write view of lower on target, its upper layer
// under dir. When the kernel refuses (a file mount point, a filesystem that
// cannot be a lower layer, a path overlayfs cannot name), lower is bound
// read-only instead, unless it is the root, which must be an overlay.
func overlay(lower, target, dir string, required bool) error {
	upper, work := filepath.Join(dir, "upper"), filepath.Join(dir, "work")
	dirs := []string{upper, work}
	if required {
		dirs = append(dirs, target)
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("creating overlay layer: %w", err)
		}
	}
	st, err := os.Stat(lower)
	if err != nil {
		return fmt.Errorf("reading mount point %s: %w", lower, err)
	}
	var overlayErr error
	if !st.IsDir() {
		overlayErr = errors.New("not a directory")
	} else if strings.ContainsAny(lower, ",:\\") {
		overlayErr = errors.New("path cannot be named in overlay options")
	} else {
		data := "lowerdir=" + lower + ",upperdir=" + upper + ",workdir=" + work
		overlayErr = unix.Mount("overlay", target, "overlay", 0, data)
		if overlayErr != nil {
			// In a user namespace overlayfs keeps its metadata in user.*
			// extended attributes, which must be asked for.
			if err := unix.Mount("overlay", target, "overlay", 0, data+",userxattr"); err == nil {
				overlayErr = nil
			}
		}
	}
	if overlayErr == nil {
		return nil
	}
	if required {
		return fmt.Errorf("mounting a copy-on-write overlay of %s: %w", lower, overlayErr)
	}
	if err := unix.Mount(lower, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("binding %s (no overlay: %v): %w", lower, overlayErr, err)
	}
	if err := remountReadOnly(target); err != nil {
		return fmt.Errorf("making %s read-only (no overlay: %v): %w", lower, overlayErr, err)
	}
	return nil
}

// volume binds a volume's source at its target inside root. The target is
// resolved inside the view, so a symbolic link in the container's tree
// cannot lead the mount out of it; it is created (in the overlay) when
// missing.
func volume(o op, root string) error {
	target, err := securejoin.SecureJoin(root, o.target)
	if err != nil {
		return fmt.Errorf("resolving mount path %s: %w", o.target, err)
	}
	st, err := os.Stat(o.source)
	if err != nil {
		return fmt.Errorf("volume source for %s: %w", o.target, err)
	}
	if st.IsDir() {
		err = os.MkdirAll(target, 0o755)
	} else if err = os.MkdirAll(filepath.Dir(target), 0o755); err == nil {
		var f *os.File
		if f, err = os.OpenFile(target, os.O_CREATE|os.O_RDONLY, 0o644); err == nil {
			_ = f.Close()
		}
	}
	if err != nil {
		return fmt.Errorf("creating mount path %s: %w", o.target, err)
	}
	if err := unix.Mount(o.source, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("mounting %s at %s: %w", o.source, o.target, err)
	}
	if o.readOnly {
		if err := remountReadOnly(target); err != nil {
			return fmt.Errorf("making %s read-only: %w", o.target, err)
		}
	}
	return nil
}

// remountReadOnly makes a bind mount read-only, keeping the flags of the
// filesystem it shows (a user namespace may not drop them).
func remountReadOnly(target string) error {
	var fs unix.Statfs_t
	if err := unix.Statfs(target, &fs); err != nil {
		return err
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY)
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
