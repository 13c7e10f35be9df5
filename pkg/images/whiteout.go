package images

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// OCI whiteout names in layer tarballs.
const (
	// whiteoutPrefix marks ".wh.name": name is deleted from lower layers.
	whiteoutPrefix = ".wh."
	// whiteoutMetaPrefix starts aufs bookkeeping entries (".wh..wh.plnk"),
	// which are dropped.
	whiteoutMetaPrefix = ".wh..wh."
	// whiteoutOpaque marks its directory opaque: lower layers' entries in
	// it are hidden.
	whiteoutOpaque = ".wh..wh..opq"
)

// Overlayfs's opaque-directory xattrs: trusted.* is read by mounts made by
// the initial user namespace's root, user.* by mounts with the userxattr
// option (rootless).
const (
	opaqueTrusted = "trusted.overlay.opaque"
	opaqueUser    = "user.overlay.opaque"
)

// makeWhiteout creates overlayfs's whiteout at path: a character device
// with device number 0/0, replacing whatever path held.
func makeWhiteout(path string) error {
	if err := removeAll(path); err != nil {
		return err
	}
	if err := unix.Mknod(path, unix.S_IFCHR, 0); err != nil {
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("creating overlayfs whiteout %s: %w (kernels before 5.8 let only root create one)", path, err)
		}
		return fmt.Errorf("creating overlayfs whiteout %s: %w", path, err)
	}
	return nil
}

// setOpaque marks dir opaque for both kinds of overlayfs mount. Failing to
// set the xattr this process may not set (trusted.* as a non-root user) is
// expected; failing to set both is an error.
func setOpaque(dir string) error {
	errT := unix.Lsetxattr(dir, opaqueTrusted, []byte("y"), 0)
	errU := unix.Lsetxattr(dir, opaqueUser, []byte("y"), 0)
	if errT == nil || errU == nil {
		return nil
	}
	return fmt.Errorf("marking %s opaque (%s: %v; %s: %v)", dir, opaqueTrusted, errT, opaqueUser, errU)
}

// isOverlayXattr says whether an xattr is overlayfs's own (trusted.overlay.*
// or user.overlay.*). Those in a layer's tar entries are dropped: only the
// store decides what overlayfs sees as opaque, redirected or metacopy.
func isOverlayXattr(name string) bool {
	for _, p := range []string{"trusted.overlay.", "user.overlay."} {
		if len(name) >= len(p) && name[:len(p)] == p {
			return true
		}
	}
	return false
}
