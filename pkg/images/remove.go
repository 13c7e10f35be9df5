package images

import (
	"fmt"
	"os"
	"path/filepath"
)

// Remove removes ref from the store. A tag that is one of several names of
// its image only untags it (as `docker rmi` does); an image ID, a name with
// a digest, or an image's last tag removes the image, and then deletes the
// layers no other image uses, and the layers no image names that were
// stored over orphanMinAge ago (what a pull killed before it recorded its
// image leaves). An image a container runs from (Use) is ErrInUse.
func (s *Store) Remove(ref string) error {
	var doomed []string
	err := s.updateThen(func(idx *index) error {
		rec, byTag, err := idx.find(ref)
		if err != nil {
			return err
		}
		if byTag && len(rec.Names) > 1 {
			n, _ := Normalize(ref)
			rec.Names = without(rec.Names, n)
			return nil
		}
		return s.removeRecord(idx, rec, &doomed)
	}, func() { doomed = s.detachLayers(doomed) })
	s.deleteDetached(doomed)
	if err != nil {
		return err
	}
	_, err = s.sweepLayers(nil, orphanMinAge)
	return err
}

// removeRecord drops rec from the index, unless a container uses it, and
// appends to doomed the layers no remaining image uses.
func (s *Store) removeRecord(idx *index, rec *record, doomed *[]string) error {
	unlock, ok := s.lockUnused(rec.ID)
	if !ok {
		return newError(ErrInUse, fmt.Sprintf("image %s is in use by a running container", displayName(rec)))
	}
	defer unlock()
	kept := idx.Images[:0]
	for _, r := range idx.Images {
		if r != rec {
			kept = append(kept, r)
		}
	}
	idx.Images = kept
	used := map[string]bool{}
	for _, r := range idx.Images {
		for _, l := range r.Layers {
			used[l] = true
		}
	}
	for _, l := range rec.Layers {
		if !used[l] && idx.Layers[l] != nil {
			delete(idx.Layers, l)
			*doomed = append(*doomed, l)
		}
	}
	os.Remove(s.usePath(rec.ID))
	return nil
}

// detachLayers moves the directories of the layers with these diffIDs out
// of l/ into the work directory, under the store's lock, so that a pull
// never finds half of one. It returns the paths moved.
func (s *Store) detachLayers(diffIDs []string) []string {
	dirs := make([]string, 0, len(diffIDs))
	for _, d := range diffIDs {
		dirs = append(dirs, s.layerDir(d))
	}
	return s.detachDirs(dirs)
}

// detachDirs moves layer directories into the work directory, as
// detachLayers, and returns the paths moved.
func (s *Store) detachDirs(dirs []string) []string {
	var moved []string
	for _, src := range dirs {
		dst := filepath.Join(s.work, "rm-"+filepath.Base(src))
		if os.Rename(src, dst) == nil {
			moved = append(moved, dst)
		}
	}
	return moved
}

// deleteDetached deletes what detachLayers moved.
func (s *Store) deleteDetached(paths []string) {
	for _, p := range paths {
		removeAll(p)
	}
}

// displayName is how messages name an image: its first name, else its ID.
func displayName(rec *record) string {
	if len(rec.Names) > 0 {
		return rec.Names[0]
	}
	if len(rec.RepoDigests) > 0 {
		return rec.RepoDigests[0]
	}
	return rec.ID
}

// without returns list without s.
func without(list []string, s string) []string {
	var out []string
	for _, x := range list {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}
