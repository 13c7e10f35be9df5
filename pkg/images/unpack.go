package images

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	securejoin "github.com/cyphar/filepath-securejoin"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"
)

// unpacker extracts one layer tarball into a directory that overlayfs can
// use as a lower layer.
type unpacker struct {
	// root is the directory to create and fill.
	root string
	// keepOwner applies the entries' uid and gid (needs root); without it
	// every file belongs to the process's user (flattened ownership).
	keepOwner bool
	// dirs are the directories whose mode, xattrs and times are set once
	// every entry is in (later entries would change their times, and a
	// read-only mode would stop a non-root user filling them), in tar
	// order; an entry a later one replaced has a nil hdr.
	dirs []pendingDir
	// pending maps the host path of each directory in dirs whose hdr is
	// set to its index.
	pending map[string]int
}

// pendingDir is a directory unpacked whose metadata waits for the end of
// the layer.
type pendingDir struct {
	// path is its host path when it was made, free of symbolic links.
	path string
	// hdr is its tar entry; nil once a later entry replaced it.
	hdr *tar.Header
	// dev and ino identify the directory made: its metadata is applied
	// only to that directory, whatever is at path by then.
	dev, ino uint64
}

// errUnsafeEntry is a tar entry that would write outside the layer.
var errUnsafeEntry = errors.New("unsafe layer entry")

// unpack reads the uncompressed layer r to its end, extracting it, and
// returns the digest of what it read (the diffID) and the bytes of the
// regular files written.
func (u *unpacker) unpack(ctx context.Context, r io.Reader) (v1.Hash, int64, error) {
	h := sha256.New()
	tee := io.TeeReader(r, h)
	tr := tar.NewReader(tee)
	if err := os.Mkdir(u.root, 0o755); err != nil {
		return v1.Hash{}, 0, err
	}
	var size int64
	for {
		if err := ctx.Err(); err != nil {
			return v1.Hash{}, 0, err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return v1.Hash{}, 0, err
		}
		n, err := u.entry(tr, hdr)
		if err != nil {
			return v1.Hash{}, 0, err
		}
		size += n
	}
	// The end-of-archive blocks and whatever padding follows are part of
	// the diffID; reading to the end also makes the source verify the
	// compressed digest.
	if _, err := io.Copy(io.Discard, tee); err != nil {
		return v1.Hash{}, 0, err
	}
	// Children first: a parent's read-only mode must not stop the
	// opening of the directories under it.
	for i := len(u.dirs) - 1; i >= 0; i-- {
		if u.dirs[i].hdr == nil {
			continue
		}
		if err := u.finishDir(u.dirs[i]); err != nil {
			return v1.Hash{}, 0, err
		}
	}
	return v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", h.Sum(nil))}, size, nil
}

// entryPath cleans a tar entry's name to a relative slash path, refusing
// absolute paths and paths that climb out of the layer.
func entryPath(name string) (string, error) {
	if strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("%w %q: absolute path", errUnsafeEntry, name)
	}
	p := path.Clean(name)
	if p == ".." || strings.HasPrefix(p, "../") {
		return "", fmt.Errorf("%w %q: path leaves the layer", errUnsafeEntry, name)
	}
	return p, nil
}

// entry extracts one tar entry and returns the bytes it wrote.
func (u *unpacker) entry(tr *tar.Reader, hdr *tar.Header) (int64, error) {
	p, err := entryPath(hdr.Name)
	if err != nil {
		return 0, err
	}
	if p == "." {
		if hdr.Typeflag == tar.TypeDir {
			return 0, u.deferDir(u.root, hdr)
		}
		return 0, nil
	}
	dir, base := path.Split(p)
	parent, err := u.mkdirAll(dir)
	if err != nil {
		return 0, err
	}
	switch {
	case base == whiteoutOpaque:
		return 0, setOpaque(parent)
	case strings.HasPrefix(base, whiteoutMetaPrefix):
		return 0, nil
	case strings.HasPrefix(base, whiteoutPrefix):
		gone := filepath.Join(parent, strings.TrimPrefix(base, whiteoutPrefix))
		u.forget(gone)
		return 0, makeWhiteout(gone)
	}
	target := filepath.Join(parent, base)
	if hdr.Typeflag != tar.TypeDir || !isDir(target) {
		u.forget(target)
		if err := removeAll(target); err != nil {
			return 0, err
		}
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := os.Mkdir(target, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return 0, err
		}
		if err := u.own(target, hdr); err != nil {
			return 0, err
		}
		return 0, u.deferDir(target, hdr)
	case tar.TypeReg, tar.TypeRegA:
		f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return 0, err
		}
		n, err := io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return 0, err
		}
		return n, u.attrs(target, hdr)
	case tar.TypeSymlink:
		if err := os.Symlink(hdr.Linkname, target); err != nil {
			return 0, err
		}
		return 0, u.attrs(target, hdr)
	case tar.TypeLink:
		src, err := u.linkTarget(hdr)
		if err != nil {
			return 0, err
		}
		return 0, os.Link(src, target)
	case tar.TypeFifo:
		if err := unix.Mkfifo(target, 0o600); err != nil {
			return 0, err
		}
		return 0, u.attrs(target, hdr)
	default:
		// Character and block devices (the sandbox provides /dev), and
		// entry types that carry no file.
		return 0, nil
	}
}

// mkdirAll resolves dir (a slash path relative to the layer) inside the
// layer, following symbolic links the layer already holds without leaving
// it, and creates what is missing.
func (u *unpacker) mkdirAll(dir string) (string, error) {
	if dir == "" {
		return u.root, nil
	}
	p, err := securejoin.SecureJoin(u.root, dir)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(p, 0o755); err != nil {
		return "", err
	}
	return p, nil
}

// linkTarget returns the host path of a hard link's target, which must be
// an earlier non-directory entry of the same layer.
func (u *unpacker) linkTarget(hdr *tar.Header) (string, error) {
	p, err := entryPath(hdr.Linkname)
	if err != nil || p == "." {
		return "", fmt.Errorf("%w %q: hard link to %q leaves the layer", errUnsafeEntry, hdr.Name, hdr.Linkname)
	}
	dir, base := path.Split(p)
	parent, err := securejoin.SecureJoin(u.root, dir)
	if err != nil {
		return "", err
	}
	src := filepath.Join(parent, base)
	fi, err := os.Lstat(src)
	if err != nil {
		return "", fmt.Errorf("hard link %q to %q: the target is not in the layer", hdr.Name, hdr.Linkname)
	}
	if fi.IsDir() {
		return "", fmt.Errorf("%w %q: hard link to directory %q", errUnsafeEntry, hdr.Name, hdr.Linkname)
	}
	return src, nil
}

// own applies the entry's owner when ownership is kept.
func (u *unpacker) own(target string, hdr *tar.Header) error {
	if !u.keepOwner {
		return nil
	}
	return os.Lchown(target, hdr.Uid, hdr.Gid)
}

// attrs applies a non-directory entry's owner, mode, xattrs and mtime.
func (u *unpacker) attrs(target string, hdr *tar.Header) error {
	if err := u.own(target, hdr); err != nil {
		return err
	}
	symlink := hdr.Typeflag == tar.TypeSymlink
	if !symlink {
		// After chown, which clears set-user-ID and set-group-ID.
		if err := unix.Chmod(target, uint32(hdr.Mode)&0o7777); err != nil {
			return err
		}
	}
	if err := setXattrs(target, hdr, unix.Lsetxattr); err != nil {
		return err
	}
	return setTimes(target, hdr)
}

// deferDir records the directory just made at target (a host path free of
// symbolic links) for finishDir, replacing an earlier entry for the same
// directory: the last entry wins.
func (u *unpacker) deferDir(target string, hdr *tar.Header) error {
	var st unix.Stat_t
	if err := unix.Lstat(target, &st); err != nil {
		return err
	}
	if i, ok := u.pending[target]; ok {
		u.dirs[i].hdr = nil
	}
	if u.pending == nil {
		u.pending = map[string]int{}
	}
	u.pending[target] = len(u.dirs)
	u.dirs = append(u.dirs, pendingDir{path: target, hdr: hdr, dev: st.Dev, ino: st.Ino})
	return nil
}

// forget drops the pending metadata of target and, when target is a
// directory, of everything under it: a later entry is replacing them.
func (u *unpacker) forget(target string) {
	if len(u.pending) == 0 {
		return
	}
	if i, ok := u.pending[target]; ok {
		u.dirs[i].hdr = nil
		delete(u.pending, target)
	}
	if !isDir(target) {
		return
	}
	prefix := target + string(filepath.Separator)
	for p, i := range u.pending {
		if strings.HasPrefix(p, prefix) {
			u.dirs[i].hdr = nil
			delete(u.pending, p)
		}
	}
}

// finishDir applies a directory's mode, xattrs and mtime (and, for the
// layer's root, its owner). Without kept ownership, its owner keeps write
// and search access.
//
// It acts through a file descriptor of the directory opened without
// following any symbolic link, and only if that is still the directory
// made for the entry: a later entry may have replaced it, or a parent,
// with a symbolic link out of the layer, and path-based calls would then
// change a host file.
func (u *unpacker) finishDir(d pendingDir) error {
	fd, err := u.openDir(d.path)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("opening directory %s: %w", d.path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat of directory %s: %w", d.path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Dev != d.dev || st.Ino != d.ino {
		// Not the directory made for this entry any more.
		return nil
	}
	hdr := d.hdr
	if d.path == u.root && u.keepOwner {
		if err := unix.Fchownat(fd, "", hdr.Uid, hdr.Gid, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("chown of directory %s: %w", d.path, err)
		}
	}
	mode := uint32(hdr.Mode) & 0o7777
	if !u.keepOwner {
		mode |= 0o700
	}
	// An O_PATH descriptor takes no fchmod, fsetxattr or futimens; its
	// /proc/self/fd link reaches the directory it holds and nothing else.
	self := fmt.Sprintf("/proc/self/fd/%d", fd)
	if err := unix.Chmod(self, mode); err != nil {
		return fmt.Errorf("chmod of directory %s (through %s): %w", d.path, self, err)
	}
	if err := setXattrs(self, hdr, unix.Setxattr); err != nil {
		return err
	}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, self, entryTimes(hdr), 0); err != nil {
		return fmt.Errorf("setting the times of directory %s: %w", d.path, err)
	}
	return nil
}

// openDir opens the directory at target, under the layer's root, as an
// O_PATH descriptor, one component at a time, failing (ENOTDIR or ELOOP)
// where a component is not a directory or is a symbolic link.
func (u *unpacker) openDir(target string) (int, error) {
	const flags = unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Open(u.root, flags, 0)
	if err != nil {
		return -1, err
	}
	rel, err := filepath.Rel(u.root, target)
	if err != nil || rel == "." {
		return fd, err
	}
	for _, name := range strings.Split(rel, string(filepath.Separator)) {
		next, err := unix.Openat(fd, name, flags, 0)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

// setXattrs sets the entry's extended attributes (PAX SCHILY.xattr.*),
// except overlayfs's own; those the process may not set, or the file
// system does not take, are dropped.
//
// set is unix.Lsetxattr for a file just made, unix.Setxattr for a
// /proc/self/fd link.
func setXattrs(target string, hdr *tar.Header, set func(path, attr string, data []byte, flags int) error) error {
	for k, v := range hdr.PAXRecords {
		name, ok := strings.CutPrefix(k, "SCHILY.xattr.")
		if !ok || isOverlayXattr(name) {
			continue
		}
		err := set(target, name, []byte(v), 0)
		if err != nil && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.ENOTSUP) && !errors.Is(err, unix.EOPNOTSUPP) {
			return fmt.Errorf("setting xattr %s on %s: %w", name, target, err)
		}
	}
	return nil
}

// setTimes sets a file's access and modification times from its entry,
// without following a symbolic link.
func setTimes(target string, hdr *tar.Header) error {
	return unix.UtimesNanoAt(unix.AT_FDCWD, target, entryTimes(hdr), unix.AT_SYMLINK_NOFOLLOW)
}

// entryTimes are the access and modification times of an entry, its
// modification time standing for a missing access time.
func entryTimes(hdr *tar.Header) []unix.Timespec {
	atime := hdr.AccessTime
	if atime.IsZero() {
		atime = hdr.ModTime
	}
	return []unix.Timespec{timespec(atime), timespec(hdr.ModTime)}
}

// timespec converts t, the zero time being the epoch.
func timespec(t time.Time) unix.Timespec {
	if t.IsZero() {
		return unix.Timespec{}
	}
	return unix.NsecToTimespec(t.UnixNano())
}

// isDir says whether path is a directory (not following a symlink).
func isDir(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.IsDir()
}
