package testimages

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// WhiteoutPrefix marks, in a layer, a path deleted from the layers below it
// (OCI image spec, "Whiteouts"): ".wh.NAME" deletes NAME.
const WhiteoutPrefix = ".wh."

// OpaqueWhiteout, as a directory's entry, hides everything the layers below
// put in that directory.
const OpaqueWhiteout = ".wh..wh..opq"

// File is one entry of a layer. Its type comes from Mode's type bits:
// fs.ModeDir for a directory, fs.ModeSymlink for a symbolic link to Link,
// none for a regular file holding Data, or a hard link to Link when Link is
// set on a regular file.
type File struct {
	// Path inside the image, absolute or relative to its root ("bin/sh" and
	// "/bin/sh" are the same entry).
	Path string
	// Mode is the permission bits, with fs.ModeDir or fs.ModeSymlink for
	// directories and symbolic links (fs.ModeSetuid and fs.ModeSticky too).
	Mode fs.FileMode
	// Data is a regular file's content.
	Data []byte
	// Link is a symbolic link's target, or the path (inside the image) of the
	// file a hard link shares its content with.
	Link string
	// UID and GID own the entry (0, root, unless set).
	UID, GID int
}

// Dir is a directory entry.
func Dir(p string, perm fs.FileMode) File {
	return File{Path: p, Mode: fs.ModeDir | perm}
}

// Regular is a regular file entry.
func Regular(p string, perm fs.FileMode, data []byte) File {
	return File{Path: p, Mode: perm, Data: data}
}

// Symlink is a symbolic link entry at p pointing to target.
func Symlink(p, target string) File {
	return File{Path: p, Mode: fs.ModeSymlink | 0o777, Link: target}
}

// Hardlink is a hard link entry at p sharing the content of target, a regular
// file of the same layer (hard links are written after every other entry).
func Hardlink(p, target string) File {
	return File{Path: p, Mode: 0o755, Link: target}
}

// Whiteout is the entry that deletes p (a file or a whole directory) of the
// layers below.
func Whiteout(p string) File {
	dir, base := path.Split(clean(p))
	return File{Path: path.Join(dir, WhiteoutPrefix+base), Mode: 0o644}
}

// Opaque is the entry that hides the lower layers' content of directory dir,
// whose entries in this layer stay.
func Opaque(dir string) File {
	return File{Path: path.Join(clean(dir), OpaqueWhiteout), Mode: 0o644}
}

// clean makes p relative to the image root, the way layer tars name entries.
func clean(p string) string {
	return strings.TrimPrefix(path.Clean("/"+p), "/")
}

// Layer builds a gzip-compressed OCI layer holding files, in path order (hard
// links last), each missing parent directory added (0755, root), times at the
// Unix epoch. Two files with one path, a path leaving the root or a hard link
// to anything but a regular file of the layer are refused.
func Layer(files ...File) (v1.Layer, error) {
	data, err := layerTar(files)
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// layerTar writes the uncompressed tar of a layer holding files.
func layerTar(files []File) ([]byte, error) {
	byPath := map[string]File{}
	for _, f := range files {
		if strings.HasPrefix(path.Clean(f.Path), "..") {
			return nil, fmt.Errorf("layer entry %q leaves the image root", f.Path)
		}
		p := clean(f.Path)
		if p == "" {
			return nil, fmt.Errorf("layer entry %q is the image root", f.Path)
		}
		if _, dup := byPath[p]; dup {
			return nil, fmt.Errorf("two layer entries for %q", p)
		}
		f.Path = p
		byPath[p] = f
	}
	for p := range byPath {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if _, ok := byPath[d]; !ok {
				byPath[d] = Dir(d, 0o755)
			}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	// Path order, hard links after everything else: their targets are then
	// in the tar before them, as an unpacker needs.
	isHardlink := func(p string) bool { f := byPath[p]; return f.Mode.IsRegular() && f.Link != "" }
	slices.SortFunc(paths, func(a, b string) int {
		if ha, hb := isHardlink(a), isHardlink(b); ha != hb {
			if ha {
				return 1
			}
			return -1
		}
		return strings.Compare(a, b)
	})

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	written := map[string]bool{}
	for _, p := range paths {
		hdr, body, err := header(byPath[p], written)
		if err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("writing the layer entry %s: %w", p, err)
		}
		if _, err := tw.Write(body); err != nil {
			return nil, fmt.Errorf("writing the layer entry %s: %w", p, err)
		}
		if f := byPath[p]; f.Mode.IsRegular() && f.Link == "" {
			written[p] = true
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("closing the layer tar: %w", err)
	}
	return buf.Bytes(), nil
}

// header is the tar header of f (whose Path is clean) and the body to write
// after it; written holds the regular files already in the tar, the possible
// targets of a hard link.
func header(f File, written map[string]bool) (*tar.Header, []byte, error) {
	hdr := &tar.Header{
		Name:    f.Path,
		Mode:    int64(f.Mode.Perm()),
		Uid:     f.UID,
		Gid:     f.GID,
		ModTime: time.Unix(0, 0),
		Format:  tar.FormatPAX,
	}
	if f.Mode&fs.ModeSetuid != 0 {
		hdr.Mode |= 0o4000
	}
	if f.Mode&fs.ModeSetgid != 0 {
		hdr.Mode |= 0o2000
	}
	if f.Mode&fs.ModeSticky != 0 {
		hdr.Mode |= 0o1000
	}
	switch {
	case f.Mode.IsDir():
		hdr.Typeflag = tar.TypeDir
		hdr.Name += "/"
		return hdr, nil, nil
	case f.Mode&fs.ModeSymlink != 0:
		if f.Link == "" {
			return nil, nil, fmt.Errorf("symbolic link %s has no target", f.Path)
		}
		hdr.Typeflag = tar.TypeSymlink
		hdr.Linkname = f.Link
		return hdr, nil, nil
	case !f.Mode.IsRegular():
		return nil, nil, fmt.Errorf("layer entry %s: unsupported mode %v", f.Path, f.Mode)
	case f.Link != "":
		target := clean(f.Link)
		if !written[target] {
			return nil, nil, fmt.Errorf("hard link %s to %s: no regular file of that path in the layer", f.Path, target)
		}
		hdr.Typeflag = tar.TypeLink
		hdr.Linkname = target
		return hdr, nil, nil
	default:
		hdr.Typeflag = tar.TypeReg
		hdr.Size = int64(len(f.Data))
		return hdr, f.Data, nil
	}
}
