package images

import (
	"context"
	"errors"
	"fmt"
	"sync"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sys/unix"
)

// layerJobs is how many layers of one image are fetched and unpacked at
// once.
const layerJobs = 3

// addition says what to record for an image being pulled or loaded.
type addition struct {
	// what names the image in errors: the reference or the archive entry.
	what string
	// digest is what the image was pulled or loaded as (an index's or a
	// manifest's digest).
	digest string
	// digests are every digest that resolves to the image.
	digests []string
	// names are the normalized tags to point at it.
	names []string
	// repos are the normalized repositories it came from (for RepoDigests).
	repos []string
	// want is the node's platform; an image config for another is refused.
	want *v1.Platform
}

// errLayerGone: a layer an image needs was removed between unpacking and
// recording the image (a concurrent Remove); the add is retried.
var errLayerGone = errors.New("layer removed concurrently")

// add unpacks the layers img lacks in the store and records it.
func (s *Store) add(ctx context.Context, img v1.Image, a addition) (*Image, error) {
	idName, err := img.ConfigName()
	if err != nil {
		return nil, fmt.Errorf("reading the config of %s: %w", a.what, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("reading the config of %s: %w", a.what, err)
	}
	got := cf.Platform()
	if a.want != nil && got != nil && got.OS != "" && !platformMatches(a.want, got) {
		// containerd stores such an image (it checks the platform of an
		// index's entries only), and its containers then fail with "exec
		// format error"; the store refuses it at once.
		return nil, newError(ErrPlatform, fmt.Sprintf("%s is a %s image; this node is %s and cannot run it", a.what, platformString(got), platformString(a.want)))
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, fmt.Errorf("reading the layers of %s: %w", a.what, err)
	}
	diffIDs := cf.RootFS.DiffIDs
	if len(layers) != len(diffIDs) {
		return nil, newError(ErrCorrupt, fmt.Sprintf("%s is corrupt: its manifest has %d layers, its config %d", a.what, len(layers), len(diffIDs)))
	}
	var srcs []layerSource
	for i, l := range layers {
		mt, err := l.MediaType()
		if err == nil && !isLayerType(mt) {
			return nil, fmt.Errorf("%s has a layer of media type %s, which cannot be unpacked", a.what, mt)
		}
		d, err := l.Digest()
		if err != nil {
			return nil, fmt.Errorf("reading the layers of %s: %w", a.what, err)
		}
		srcs = append(srcs, layerSource{diffID: diffIDs[i], name: d.String(), open: l.Uncompressed})
	}
	rec := &record{
		ID:       idName.String(),
		Digest:   a.digest,
		Digests:  a.digests,
		Names:    a.names,
		Config:   configOf(cf),
		Platform: platformString(got),
	}
	if rec.Platform == "/" || got == nil || got.OS == "" {
		rec.Platform = platformString(a.want)
	}
	for _, r := range a.repos {
		rec.RepoDigests = append(rec.RepoDigests, r+"@"+a.digest)
	}
	for _, d := range diffIDs {
		rec.Layers = append(rec.Layers, d.String())
	}
	out, err := s.store(ctx, rec, srcs)
	if errors.Is(err, unix.ENOSPC) {
		// Keep nothing this pull stored: the disk is full.
		s.sweepLayers(rec.Layers, 0)
		what := a.what
		var ns *noSpaceError
		if errors.As(err, &ns) {
			what = "layer " + ns.layer + " of " + a.what
		}
		return nil, wrapError(unix.ENOSPC, err, fmt.Sprintf("storing %s: no space left on device in the image store %s (free space on its file system, or remove images no pod uses)", what, s.dir))
	}
	return out, err
}

// testHookBeforeRecord, when set, runs after an add has stored its layers
// and before it writes the index (tests kill the process there).
var testHookBeforeRecord func()

// store unpacks the layers of rec the store lacks and records rec. While
// it runs, its layers are held against sweepLayers; a layer removed by
// another process before the record is written is unpacked again, once.
func (s *Store) store(ctx context.Context, rec *record, srcs []layerSource) (*Image, error) {
	release := s.holdLayers(rec.Layers)
	defer release()
	for attempt := 0; ; attempt++ {
		sizes, err := s.unpackAll(ctx, srcs)
		if err != nil {
			return nil, err
		}
		if testHookBeforeRecord != nil {
			testHookBeforeRecord()
		}
		img, err := s.record(rec, sizes, false)
		if errors.Is(err, errLayerGone) && attempt == 0 {
			continue
		}
		return img, err
	}
}

// unpackAll ensures every layer is unpacked, layerJobs at a time, and
// returns their sizes by diffID.
func (s *Store) unpackAll(ctx context.Context, srcs []layerSource) (map[string]int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sizes := make(map[string]int64, len(srcs))
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	sem := make(chan struct{}, layerJobs)
	for _, src := range srcs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			size, err := s.ensureLayer(ctx, src)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
					cancel()
				}
				return
			}
			sizes[src.diffID.String()] = size
		}()
	}
	wg.Wait()
	return sizes, firstErr
}

// record writes the image into the index: a new record, or names and
// digests merged into the record of the same ID. Tags it takes are taken
// off other images. Every layer must still be in place. With onlyMerge
// (rec holds only names and digests) an image of that ID must exist, else
// the error is errLayerGone.
func (s *Store) record(rec *record, sizes map[string]int64, onlyMerge bool) (*Image, error) {
	var out *Image
	err := s.update(func(idx *index) error {
		for _, d := range rec.Layers {
			if _, ok, err := s.unpackedLayer(d); err != nil || !ok {
				if err != nil {
					return err
				}
				return errLayerGone
			}
			if idx.Layers[d] == nil {
				idx.Layers[d] = &layerRecord{Size: sizes[d]}
			}
		}
		for _, other := range idx.Images {
			if other.ID != rec.ID {
				for _, n := range rec.Names {
					other.Names = without(other.Names, n)
				}
			}
		}
		cur := rec
		for _, other := range idx.Images {
			if other.ID == rec.ID {
				cur = other
			}
		}
		if cur == rec && onlyMerge {
			return errLayerGone
		}
		if cur == rec {
			idx.Images = append(idx.Images, rec)
		} else {
			cur.Digest = rec.Digest
			cur.Names = union(cur.Names, rec.Names)
			cur.Digests = union(cur.Digests, rec.Digests)
			cur.RepoDigests = union(cur.RepoDigests, rec.RepoDigests)
		}
		cur.LastUsed = s.now()
		out = s.image(idx, cur)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// configOf takes what the runtime needs from an image config.
func configOf(cf *v1.ConfigFile) Config {
	c := cf.Config
	return Config{Entrypoint: c.Entrypoint, Cmd: c.Cmd, Env: c.Env, WorkingDir: c.WorkingDir, User: c.User}
}

// isLayerType says whether a layer media type is a tar (plain, gzip or
// zstd), not e.g. a foreign or encrypted layer.
func isLayerType(mt types.MediaType) bool {
	switch mt {
	case types.DockerLayer, types.DockerUncompressedLayer, types.OCILayer, types.OCIUncompressedLayer, types.OCILayerZStd,
		types.DockerForeignLayer, types.OCIRestrictedLayer, types.OCIUncompressedRestrictedLayer:
		return true
	}
	return false
}

// union returns a with the elements of b it lacks appended.
func union(a, b []string) []string {
	for _, x := range b {
		if !contains(a, x) {
			a = append(a, x)
		}
	}
	return a
}
