package view

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	pathrs "github.com/cyphar/filepath-securejoin/pathrs-lite"
	"golang.org/x/sys/unix"
)

// A container with a user namespace of its own (Spec.IDMap) sees the
// host's files through idmapped mounts (Linux 5.12; tmpfs from 6.3), as
// the kubelet's runtimes mount them for a pod with hostUsers: false: the
// mount translates the file's stored owner N into the namespace's N, so
// the image's root-owned files are the container's root's, and a file the
// container creates as its user 1000 is stored as 1000, whatever host ids
// the pod's range maps to. The sandbox, root of the host's namespace,
// makes them; mount_setattr needs that privilege over the filesystem.

// idmapAttr asks mount_setattr to idmap a detached tree through m.
func idmapAttr(m *IDMap) *unix.MountAttr {
	return &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(m.UserNS)}
}

// idmapTree idmaps the detached mount tree (an open_tree clone) through
// m: every mount of it with recursive, else its top one.
func idmapTree(tree int, m *IDMap, recursive bool) error {
	at := uint(unix.AT_EMPTY_PATH)
	if recursive {
		at |= unix.AT_RECURSIVE
	}
	err := unix.MountSetattr(tree, "", at, idmapAttr(m))
	switch {
	case errors.Is(err, unix.ENOSYS):
		return errors.New("this kernel has no idmapped mounts (mount_setattr, Linux 5.12 or later), which a pod with hostUsers: false needs")
	case errors.Is(err, unix.EINVAL):
		return fmt.Errorf("its filesystem cannot be mounted idmapped, which a pod with hostUsers: false needs: %w", err)
	case err != nil:
		return fmt.Errorf("idmapping the mount: %w", err)
	}
	return nil
}

// stageIDMapped mounts an idmapped copy of the directory src (its own
// filesystem, not what is mounted below it, as an overlay's lower layer
// shows) on staged, a new directory of the scratch tmpfs: an overlay
// layer must be named by a path.
func stageIDMapped(src, staged string, m *IDMap) error {
	tree, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("cloning %s: %w", src, err)
	}
	defer func() { _ = unix.Close(tree) }()
	if err := idmapTree(tree, m, false); err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	if err := os.MkdirAll(staged, 0o700); err != nil {
		return err
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, staged, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mounting the idmapped %s: %w", src, err)
	}
	return nil
}

// stageLowers replaces an overlay's lower directories (lowers) by
// idmapped copies staged under dir/lower, when m is set.
func stageLowers(lowers []string, dir string, m *IDMap) ([]string, error) {
	if m == nil {
		return lowers, nil
	}
	out := make([]string, len(lowers))
	for i, l := range lowers {
		out[i] = dir + "/lower/" + strconv.Itoa(i)
		if err := stageIDMapped(l, out[i], m); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ownUpper gives an overlay's upper directory the owner and mode of its
// top lower one as the container sees it (through the idmapped mount),
// when m is set: the overlay's root shows the upper directory's, and the
// container's root must own the root it owns in the image.
func ownUpper(upper, top string, m *IDMap) error {
	if m == nil {
		return nil
	}
	uid, gid, mode := m.UID, m.GID, os.FileMode(0o755)
	if top != "" {
		st, err := os.Stat(top)
		if err != nil {
			return err
		}
		if sys, ok := st.Sys().(*unix.Stat_t); ok {
			uid, gid = sys.Uid, sys.Gid
		}
		mode = st.Mode().Perm() | st.Mode()&(os.ModeSticky|os.ModeSetgid)
	}
	if err := os.Lchown(upper, int(uid), int(gid)); err != nil {
		return fmt.Errorf("giving the upper layer to the container's root: %w", err)
	}
	return os.Chmod(upper, mode)
}

// ownerOptions are the tmpfs options that give its root to the
// namespace's root (none without m).
func ownerOptions(m *IDMap) string {
	if m == nil {
		return ""
	}
	return ",uid=" + strconv.FormatUint(uint64(m.UID), 10) + ",gid=" + strconv.FormatUint(uint64(m.GID), 10)
}

// asContainerRoot runs f, on a thread of its own, with the filesystem ids
// of the container's root (idm; f runs as it is without): what f creates
// belongs to it, as what a runtime inside the container's namespace
// creates, and a directory of an idmapped volume takes it (the host's root
// is no id there: EOVERFLOW). The thread keeps its capabilities, which the
// change of ids takes out of its effective set, so that f still passes
// every directory as the container's root, with its capabilities, would.
// f must not start goroutines that touch files.
func asContainerRoot(idm *IDMap, f func() error) error {
	if idm == nil {
		return f()
	}
	runtime.LockOSThread()
	_ = unix.Setfsgid(int(idm.GID))
	_ = unix.Setfsuid(int(idm.UID))
	restored := false
	defer func() {
		_ = unix.Setfsuid(0)
		_ = unix.Setfsgid(0)
		// setfsuid(-1) changes nothing and says the current one.
		uid, _ := unix.SetfsuidRetUid(-1)
		gid, _ := unix.SetfsgidRetGid(-1)
		restored = uid == 0 && gid == 0
		if restored {
			runtime.UnlockOSThread()
		}
		// Otherwise the thread ends with the goroutine: Go does not
		// reuse a thread a goroutine left locked.
	}()
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("reading the sandbox's capabilities: %w", err)
	}
	data[0].Effective, data[1].Effective = data[0].Permitted, data[1].Permitted
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("keeping the sandbox's capabilities as the container's root: %w", err)
	}
	return f()
}

// MkdirOwned creates the directory p (absolute, inside the current root:
// the view, once the sandbox is in it) with its missing parents, by
// handle; what it creates belongs to the container's root with idm.
func MkdirOwned(p string, idm *IDMap) error {
	root, err := openRoot("/")
	if err != nil {
		return err
	}
	defer func() { _ = root.Close() }()
	return asContainerRoot(idm, func() error {
		h, err := pathrs.MkdirAllHandle(root, strings.TrimPrefix(filepath.Clean("/"+p), "/"), 0o755)
		if err != nil {
			return err
		}
		return h.Close()
	})
}
