package images

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// Store is an image store in one directory. Its methods are safe for
// concurrent use, and several processes may open the same directory.
type Store struct {
	// dir is the store's absolute directory.
	dir string
	// work is this Store's work directory under tmp/, removed by Close
	// (or, after a crash, by the next Open).
	work string
	// workLock holds the flock that marks work as in use.
	workLock *os.File
	// root says whether the process may keep tar ownership (euid 0).
	root bool
	// now is the clock (tests set it).
	now func() time.Time
	// diskUsage reports the bytes used and the capacity of the file
	// system holding dir (tests set it).
	diskUsage func(dir string) (used, capacity int64, err error)
	// pulls shares concurrent pulls of one reference with the same
	// credentials.
	pulls pullGroup
	// layers deduplicates concurrent unpacks of one layer (by diffID).
	layers singleflight.Group

	// mu guards lastUsed, adding and closed.
	mu sync.Mutex
	// lastUsed holds times set by Use not yet written to the index.
	lastUsed map[string]time.Time
	// adding counts, by diffID, the adds in progress that need the
	// layer: sweepLayers leaves those layers alone.
	adding map[string]int
	// closed is set by Close.
	closed bool
}

// Config is what the runtime needs from an image's config: the command,
// environment, working directory and user a container starts with unless
// its spec says otherwise.
type Config struct {
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"workingDir,omitempty"`
	User       string   `json:"user,omitempty"`
}

// Image is an image in the store.
type Image struct {
	// ID is "sha256:<config digest>": what `image ls` shows and the
	// kubelet's imageRef of a local image.
	ID string
	// Digest is the digest of what the image was last pulled or loaded as:
	// an index's digest when the reference named an index (as containerd
	// records an image's target), else the manifest's. For an image
	// loaded from a docker-save tarball it is the digest of the OCI
	// manifest the store wrote for it.
	Digest string
	// Names are the normalized tags that point at the image.
	Names []string
	// RepoDigests are "registry/repo@sha256:<digest>", one for each
	// repository the image came from (containerStatuses[].imageID).
	RepoDigests []string
	// Layers are the absolute directories of the unpacked layers, bottom
	// first, ready to be overlayfs lower directories.
	Layers []string
	// Config is the image's run configuration.
	Config Config
	// Size is the bytes its layers take on disk (layers shared with other
	// images are counted in each).
	Size int64
	// Platform is "os/arch" or "os/arch/variant", e.g. "linux/amd64".
	Platform string
	// LastUsed is when a container last ran from it (by Use), or when it
	// was pulled or loaded.
	LastUsed time.Time
}

// index is the content of index.json.
type index struct {
	// Images are the stored images.
	Images []*record `json:"images"`
	// Layers are the unpacked layers, by diffID.
	Layers map[string]*layerRecord `json:"layers"`
}

// record is one image in index.json.
type record struct {
	ID     string `json:"id"`
	Digest string `json:"digest"`
	// Digests are every digest that resolves to this image (the index's
	// and the platform manifest's, when pulled through an index).
	Digests     []string  `json:"digests"`
	Names       []string  `json:"names,omitempty"`
	RepoDigests []string  `json:"repoDigests,omitempty"`
	Layers      []string  `json:"layers"`
	Config      Config    `json:"config"`
	Platform    string    `json:"platform"`
	LastUsed    time.Time `json:"lastUsed"`
}

// layerRecord is one unpacked layer in index.json.
type layerRecord struct {
	// Size is the bytes of its files.
	Size int64 `json:"size"`
}

// Open opens (creating it, mode 0700) the store in dir, and removes what
// processes killed during a pull or load left there. The directory's path
// must not contain ',', ':' or '\', which overlayfs mount options cannot
// carry.
func Open(dir string) (*Store, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("image store %s: %w", dir, err)
	}
	if strings.ContainsAny(abs, `,:\`) {
		return nil, fmt.Errorf("image store %s: the path contains ',', ':' or '\\', which overlayfs cannot take in a lower directory; choose another data directory", abs)
	}
	for _, d := range []string{abs, filepath.Join(abs, layersDir), filepath.Join(abs, useDir), filepath.Join(abs, tmpDir)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("creating the image store: %w", err)
		}
	}
	s := &Store{
		dir:       abs,
		root:      os.Geteuid() == 0,
		now:       time.Now,
		diskUsage: statfsUsage,
		lastUsed:  map[string]time.Time{},
		adding:    map[string]int{},
	}
	unlock, err := s.lockStore()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := s.cleanTemp(); err != nil {
		return nil, err
	}
	if err := s.makeWorkDir(); err != nil {
		return nil, err
	}
	if _, err := s.readIndex(); err != nil {
		s.closeWork()
		return nil, err
	}
	return s, nil
}

// Close writes pending last-used times and removes the work directory. A
// Close while pulls or loads run makes them fail.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	pending := len(s.lastUsed) > 0
	s.mu.Unlock()
	var err error
	if pending {
		err = s.update(func(*index) error { return nil })
	}
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.closeWork()
	return err
}

// closeWork removes the work directory and drops its lock.
func (s *Store) closeWork() {
	removeAll(s.work)
	os.Remove(s.work + lockSuffix)
	s.workLock.Close()
}

// Lookup returns the stored image ref names: a name (normalized as by
// Normalize), a name with a digest, or an image ID ("sha256:<hex>", or a
// prefix of at least 12 hex digits). It does not contact any registry; an
// image not in the store is ErrNotFound.
func (s *Store) Lookup(ref string) (*Image, error) {
	idx, err := s.readIndex()
	if err != nil {
		return nil, err
	}
	rec, _, err := idx.find(ref)
	if err != nil {
		return nil, err
	}
	return s.image(idx, rec), nil
}

// List returns every stored image, ordered by first name (unnamed images
// last, by ID).
func (s *Store) List() ([]*Image, error) {
	idx, err := s.readIndex()
	if err != nil {
		return nil, err
	}
	out := make([]*Image, 0, len(idx.Images))
	for _, rec := range idx.Images {
		out = append(out, s.image(idx, rec))
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if (len(a.Names) == 0) != (len(b.Names) == 0) {
			return len(a.Names) > 0
		}
		if len(a.Names) > 0 && a.Names[0] != b.Names[0] {
			return a.Names[0] < b.Names[0]
		}
		return a.ID < b.ID
	})
	return out, nil
}

// find returns the record ref names and whether ref named it by a tag.
func (idx *index) find(ref string) (rec *record, byTag bool, err error) {
	if id, ok := idPrefix(ref); ok {
		var found *record
		for _, r := range idx.Images {
			if strings.HasPrefix(r.ID, id) {
				if found != nil && found != r {
					return nil, false, newError(ErrNotFound, fmt.Sprintf("image ID %s is ambiguous: give more digits", ref))
				}
				found = r
			}
		}
		if found != nil {
			return found, false, nil
		}
	}
	r, err := parseReference(ref)
	if err != nil {
		return nil, false, err
	}
	n := normalized(r)
	repo, digest, isDigest := splitDigestName(n)
	for _, rec := range idx.Images {
		if !isDigest {
			if contains(rec.Names, n) {
				return rec, true, nil
			}
			continue
		}
		if contains(rec.Digests, digest) && rec.hasRepository(repo) {
			return rec, false, nil
		}
	}
	return nil, false, newError(ErrNotFound, fmt.Sprintf("image %s not found in the local store", n))
}

// hasRepository says whether the image has a name or repo digest in repo.
func (r *record) hasRepository(repo string) bool {
	for _, n := range r.Names {
		if rp, _ := splitName(n); rp == repo {
			return true
		}
	}
	for _, n := range r.RepoDigests {
		if rp, _, _ := splitDigestName(n); rp == repo {
			return true
		}
	}
	return false
}

// idPrefix returns the "sha256:<hex>" prefix ref gives if ref is an image
// ID or a prefix of one (at least 12 hex digits).
func idPrefix(ref string) (string, bool) {
	hex := strings.TrimPrefix(ref, "sha256:")
	if len(hex) < 12 || len(hex) > 64 || strings.Trim(hex, "0123456789abcdef") != "" {
		return "", false
	}
	if hex != ref && len(hex) != 64 {
		return "", false
	}
	return "sha256:" + hex, true
}

// image converts a record to the Image callers see.
func (s *Store) image(idx *index, rec *record) *Image {
	img := &Image{
		ID:          rec.ID,
		Digest:      rec.Digest,
		Names:       append([]string(nil), rec.Names...),
		RepoDigests: append([]string(nil), rec.RepoDigests...),
		Config:      rec.Config,
		Platform:    rec.Platform,
		LastUsed:    rec.LastUsed,
	}
	for _, diffID := range rec.Layers {
		img.Layers = append(img.Layers, s.layerFS(diffID))
		if l := idx.Layers[diffID]; l != nil {
			img.Size += l.Size
		}
	}
	s.mu.Lock()
	if t, ok := s.lastUsed[rec.ID]; ok && t.After(img.LastUsed) {
		img.LastUsed = t
	}
	s.mu.Unlock()
	return img
}

// readIndex reads index.json; a store without one is empty. Written by
// rename, the file is always whole, so reading needs no lock.
func (s *Store) readIndex() (*index, error) {
	idx := &index{Layers: map[string]*layerRecord{}}
	data, err := os.ReadFile(filepath.Join(s.dir, indexFile))
	if errors.Is(err, fs.ErrNotExist) {
		return idx, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the image store's index: %w", err)
	}
	if err := json.Unmarshal(data, idx); err != nil {
		return nil, fmt.Errorf("reading the image store's index %s: %w", filepath.Join(s.dir, indexFile), err)
	}
	if idx.Layers == nil {
		idx.Layers = map[string]*layerRecord{}
	}
	return idx, nil
}

// update applies change to the index under the store's lock and writes the
// result atomically (temp file, fsync, rename). Last-used times recorded
// by Use are written along.
func (s *Store) update(change func(*index) error) error {
	return s.updateThen(change, nil)
}

// updateThen is update followed, still under the lock, by after (if not
// nil) once the index is written.
func (s *Store) updateThen(change func(*index) error, after func()) error {
	unlock, err := s.lockStore()
	if err != nil {
		return err
	}
	defer unlock()
	idx, err := s.readIndex()
	if err != nil {
		return err
	}
	if err := change(idx); err != nil {
		return err
	}
	s.mu.Lock()
	for _, rec := range idx.Images {
		if t, ok := s.lastUsed[rec.ID]; ok && t.After(rec.LastUsed) {
			rec.LastUsed = t
		}
	}
	clear(s.lastUsed)
	s.mu.Unlock()
	if err := s.writeIndex(idx); err != nil {
		return err
	}
	if after != nil {
		after()
	}
	return nil
}

// writeIndex replaces index.json with idx. Called under the store's lock.
func (s *Store) writeIndex(idx *index) error {
	data, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return fmt.Errorf("writing the image store's index: %w", err)
	}
	f, err := os.CreateTemp(s.work, "index-")
	if err != nil {
		return fmt.Errorf("writing the image store's index: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(s.dir, indexFile))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing the image store's index: %w", err)
	}
	return syncDir(s.dir)
}

// syncDir fsyncs a directory, making a rename in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// contains says whether list holds s.
func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
