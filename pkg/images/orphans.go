package images

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// orphanMinAge is how old an unpacked layer that no image names must be
// before CollectGarbage or Remove deletes it. Such a layer is what a pull
// killed between storing its layers and writing the index leaves (the
// next pull of the layer reuses it), or a layer a pull in another process
// has stored and not yet recorded, which the age protects. Tests set it.
var orphanMinAge = time.Hour

// holdLayers marks the layers with these diffIDs as needed by an add in
// progress, so that sweepLayers leaves them alone, until release is
// called.
func (s *Store) holdLayers(diffIDs []string) (release func()) {
	s.mu.Lock()
	for _, d := range diffIDs {
		s.adding[d]++
	}
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		for _, d := range diffIDs {
			if s.adding[d]--; s.adding[d] <= 0 {
				delete(s.adding, d)
			}
		}
		s.mu.Unlock()
	}
}

// sweepLayers deletes the unpacked layers that no image in the index
// names, that no add of this Store holds, and that were stored at least
// minAge ago. With only set, it looks at the layers with those diffIDs
// alone. It returns how many it deleted. A pull in another process that
// finds one of its layers gone when it records its image unpacks the
// layer again (see add).
func (s *Store) sweepLayers(only []string, minAge time.Duration) (int, error) {
	unlock, err := s.lockStore()
	if err != nil {
		return 0, err
	}
	idx, err := s.readIndex()
	if err != nil {
		unlock()
		return 0, err
	}
	keep := map[string]bool{}
	for _, rec := range idx.Images {
		for _, d := range rec.Layers {
			keep[filepath.Base(s.layerDir(d))] = true
		}
	}
	s.mu.Lock()
	for d := range s.adding {
		keep[filepath.Base(s.layerDir(d))] = true
	}
	s.mu.Unlock()
	var want map[string]bool
	if only != nil {
		want = map[string]bool{}
		for _, d := range only {
			want[filepath.Base(s.layerDir(d))] = true
		}
	}
	dir := filepath.Join(s.dir, layersDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		unlock()
		return 0, fmt.Errorf("listing the image store's layers: %w", err)
	}
	cutoff := s.now().Add(-minAge)
	var doomed []string
	for _, e := range entries {
		n := e.Name()
		if keep[n] || (want != nil && !want[n]) {
			continue
		}
		if minAge > 0 && !storedBefore(filepath.Join(dir, n), cutoff) {
			continue
		}
		doomed = append(doomed, filepath.Join(dir, n))
	}
	moved := s.detachDirs(doomed)
	unlock()
	s.deleteDetached(moved)
	return len(moved), nil
}

// storedBefore says whether the layer directory was stored before t: its
// meta file (written just before the directory was renamed into place),
// else the directory itself, is older.
func storedBefore(layerDir string, t time.Time) bool {
	fi, err := os.Stat(filepath.Join(layerDir, "meta.json"))
	if err != nil {
		if fi, err = os.Stat(layerDir); err != nil {
			return false
		}
	}
	return fi.ModTime().Before(t)
}
