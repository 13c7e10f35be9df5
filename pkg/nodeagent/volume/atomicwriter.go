package volume

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// The layout of a configMap, secret, downwardAPI or projected volume's
// directory, as the kubelet lays it out so that a running container sees
// each update whole:
//
//	..2026_01_02_15_04_05.123456/   the files of one version
//	..data -> ..2026_01_02_15_04_05.123456
//	key -> ..data/key               one link per top-level name
//
// An update writes a new version directory, points a new link at it and
// renames that link over ..data (one atomic step: a reader sees the old
// files or the new ones, never a mix), then adds and removes top-level
// links, then removes the old version.
const (
	// dataLink is the link to the current version.
	dataLink = "..data"
	// dataLinkTemp is the link renamed over dataLink.
	dataLinkTemp = "..data_tmp"
	// versionPrefix starts a version directory's name (a UTC time then a
	// random suffix).
	versionPrefix = "..2006_01_02_15_04_05."
)

// checkProjectedPath refuses a file path that is absolute, climbs out with
// "..", or starts with "..", the names the layout uses.
func checkProjectedPath(p string) error {
	switch {
	case p == "":
		return errors.New("empty path")
	case filepath.IsAbs(p):
		return fmt.Errorf("%q: absolute path", p)
	case strings.HasPrefix(p, ".."):
		return fmt.Errorf("%q: must not start with '..'", p)
	}
	for _, part := range strings.Split(filepath.ToSlash(p), "/") {
		if part == ".." {
			return fmt.Errorf("%q: must not contain '..'", p)
		}
	}
	return nil
}

// topLevel returns the first element of a relative path.
func topLevel(p string) string {
	first, _, _ := strings.Cut(filepath.ToSlash(filepath.Clean(p)), "/")
	return first
}

// WriteAtomic makes dir hold exactly files, in the layout above, and
// reports whether it changed anything: files equal to the current version
// (same paths, contents and modes) leave dir as it is. A directory written
// before in another layout (plain files) is taken over.
func WriteAtomic(dir string, files []ProjectedFile, now time.Time) (bool, error) {
	return writeAtomicWith(dir, files, now, nil)
}

// writeAtomicWith is writeAtomic with setPerms (nil: none) run once the new
// version is written and before ..data points to it, as the kubelet's
// atomic writer runs its setPerms: a reader never sees files without them
// (the pod's fsGroup). A failing setPerms leaves the current version.
func writeAtomicWith(dir string, files []ProjectedFile, now time.Time, setPerms func() error) (bool, error) {
	for _, f := range files {
		if err := checkProjectedPath(f.Path); err != nil {
			return false, err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	old, err := os.Readlink(filepath.Join(dir, dataLink))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	if old != "" && sameFiles(filepath.Join(dir, old), files) && linksPresent(dir, files) {
		return false, nil
	}

	version, err := os.MkdirTemp(dir, now.UTC().Format(versionPrefix))
	if err != nil {
		return false, err
	}
	// MkdirTemp makes it 0700; containers of any user read it.
	if err := os.Chmod(version, 0o755); err != nil {
		return false, err
	}
	for _, f := range files {
		p := filepath.Join(version, f.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return false, err
		}
		if err := os.WriteFile(p, f.Data, 0o600); err != nil {
			return false, err
		}
		if err := os.Chmod(p, os.FileMode(f.Mode)&os.ModePerm); err != nil {
			return false, err
		}
	}

	if setPerms != nil {
		if err := setPerms(); err != nil {
			_ = os.RemoveAll(version)
			return false, err
		}
	}

	tmp := filepath.Join(dir, dataLinkTemp)
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	if err := os.Symlink(filepath.Base(version), tmp); err != nil {
		return false, err
	}
	if err := os.Rename(tmp, filepath.Join(dir, dataLink)); err != nil {
		return false, err
	}

	want := map[string]bool{}
	for _, f := range files {
		want[topLevel(f.Path)] = true
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return true, err
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, "..") {
			continue
		}
		if want[name] && isLinkTo(filepath.Join(dir, name), filepath.Join(dataLink, name)) {
			delete(want, name)
			continue
		}
		// Gone from the payload, or left by another layout.
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			return true, err
		}
	}
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := os.Symlink(filepath.Join(dataLink, name), filepath.Join(dir, name)); err != nil {
			return true, err
		}
	}

	// Older versions (the one replaced, and any an interrupted write left).
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, "..") && name != dataLink && name != dataLinkTemp && name != filepath.Base(version) {
			if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
				return true, err
			}
		}
	}
	return true, nil
}

// isLinkTo reports whether p is a symbolic link to target.
func isLinkTo(p, target string) bool {
	got, err := os.Readlink(p)
	return err == nil && got == target
}

// linksPresent reports whether every top-level name of files has its link.
func linksPresent(dir string, files []ProjectedFile) bool {
	for _, f := range files {
		name := topLevel(f.Path)
		if !isLinkTo(filepath.Join(dir, name), filepath.Join(dataLink, name)) {
			return false
		}
	}
	return true
}

// sameFiles reports whether the version directory holds exactly files,
// with their contents and modes.
func sameFiles(version string, files []ProjectedFile) bool {
	want := map[string]ProjectedFile{}
	for _, f := range files {
		want[filepath.Clean(f.Path)] = f
	}
	n := 0
	err := filepath.WalkDir(version, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(version, p)
		if err != nil {
			return err
		}
		f, ok := want[rel]
		if !ok || !d.Type().IsRegular() {
			return errDiffers
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode().Perm() != os.FileMode(f.Mode)&os.ModePerm {
			return errDiffers
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if !bytes.Equal(data, f.Data) {
			return errDiffers
		}
		n++
		return nil
	})
	return err == nil && n == len(want)
}

// errDiffers stops sameFiles' walk at the first difference.
var errDiffers = errors.New("differs")
