package images

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"
)

// shortID is how many hex digits of a diffID name a layer's directory:
// overlayfs takes all lower directories in one page of mount options, so
// the paths are kept short. The full diffID is in the directory's meta
// file and checked on every reuse.
const shortID = 16

// layerMeta is l/<id>/meta.json.
type layerMeta struct {
	// DiffID is the digest of the uncompressed layer.
	DiffID string `json:"diffID"`
	// Size is the bytes of its files.
	Size int64 `json:"size"`
}

// layerDir is the directory of the layer with this diffID.
func (s *Store) layerDir(diffID string) string {
	hex := strings.TrimPrefix(diffID, "sha256:")
	if len(hex) > shortID {
		hex = hex[:shortID]
	}
	return filepath.Join(s.dir, layersDir, hex)
}

// layerFS is the unpacked file tree of the layer with this diffID.
func (s *Store) layerFS(diffID string) string {
	return filepath.Join(s.layerDir(diffID), "fs")
}

// errLayerCollision: two diffIDs share a directory name (never seen; the
// store refuses rather than mixing their files up).
var errLayerCollision = errors.New("layer directory collision")

// unpackedLayer returns the meta of the layer if it is unpacked.
func (s *Store) unpackedLayer(diffID string) (*layerMeta, bool, error) {
	data, err := os.ReadFile(filepath.Join(s.layerDir(diffID), "meta.json"))
	if err != nil {
		return nil, false, nil
	}
	var m layerMeta
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, false, nil
	}
	if m.DiffID != diffID {
		return nil, false, fmt.Errorf("%w: %s holds layer %s, not %s", errLayerCollision, s.layerDir(diffID), m.DiffID, diffID)
	}
	return &m, true, nil
}

// layerSource is one layer of an image being stored.
type layerSource struct {
	// diffID is the digest of the uncompressed layer, from the config.
	diffID v1.Hash
	// name is how errors name the layer: its (compressed) digest as the
	// manifest gives it.
	name string
	// open returns the uncompressed layer; reading it to the end verifies
	// the compressed digest where the source has one.
	open func() (io.ReadCloser, error)
}

// ensureLayer unpacks the layer unless it already is, and returns its
// size. Concurrent calls for one layer in this process unpack it once;
// across processes, the first rename into place wins and the others drop
// their copy. A call that joined an unpack whose own pull was cancelled
// (its context error is not this call's) starts another.
func (s *Store) ensureLayer(ctx context.Context, src layerSource) (int64, error) {
	diffID := src.diffID.String()
	for {
		if m, ok, err := s.unpackedLayer(diffID); err != nil || ok {
			if err != nil {
				return 0, err
			}
			return m.Size, nil
		}
		v, err, _ := s.layers.Do(diffID, func() (any, error) {
			if m, ok, err := s.unpackedLayer(diffID); err != nil || ok {
				if err != nil {
					return int64(0), err
				}
				return m.Size, nil
			}
			return s.unpackLayer(ctx, src)
		})
		if err != nil && ctx.Err() == nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
			continue
		}
		if err != nil {
			return 0, err
		}
		return v.(int64), nil
	}
}

// unpackLayer unpacks src into a temp directory and renames it into place.
// On any error the temp directory is removed.
func (s *Store) unpackLayer(ctx context.Context, src layerSource) (size int64, err error) {
	diffID := src.diffID.String()
	tmp, err := os.MkdirTemp(s.work, "layer-")
	if err != nil {
		return 0, layerError(src.name, err)
	}
	defer func() {
		if err != nil {
			removeAll(tmp)
		}
	}()
	rc, err := src.open()
	if err != nil {
		return 0, fmt.Errorf("fetching layer %s: %w", src.name, err)
	}
	defer rc.Close()
	u := &unpacker{root: filepath.Join(tmp, "fs"), keepOwner: s.root}
	got, size, err := u.unpack(ctx, rc)
	if err != nil {
		return 0, layerError(src.name, err)
	}
	if got != src.diffID {
		return 0, newError(ErrCorrupt, fmt.Sprintf("layer %s is corrupt: its content has digest %s, the image config says %s", src.name, got, diffID))
	}
	meta, _ := json.Marshal(layerMeta{DiffID: diffID, Size: size})
	if err := writeFileSync(filepath.Join(tmp, "meta.json"), meta); err != nil {
		return 0, layerError(src.name, err)
	}
	dst := s.layerDir(diffID)
	if err := os.Rename(tmp, dst); err != nil {
		if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY) {
			// Another process unpacked it first: use theirs.
			removeAll(tmp)
			if m, ok, cerr := s.unpackedLayer(diffID); cerr != nil || ok {
				if cerr != nil {
					return 0, cerr
				}
				return m.Size, nil
			}
		}
		return 0, fmt.Errorf("storing layer %s: %w", src.name, err)
	}
	return size, syncDir(filepath.Dir(dst))
}

// layerError says which layer failed and how; a verification failure of
// the compressed stream is ErrCorrupt, a full disk a *noSpaceError.
func layerError(name string, err error) error {
	if errors.Is(err, unix.ENOSPC) {
		return &noSpaceError{layer: name, cause: err}
	}
	msg := err.Error()
	if strings.Contains(msg, "error verifying") || strings.Contains(msg, "gzip: invalid") || strings.Contains(msg, "flate: corrupt") ||
		strings.Contains(msg, "unexpected EOF") || strings.Contains(msg, "archive/tar: invalid") {
		return wrapError(ErrCorrupt, err, fmt.Sprintf("layer %s is corrupt or truncated: %v", name, err))
	}
	return fmt.Errorf("unpacking layer %s: %w", name, err)
}

// noSpaceError: storing a layer filled the store's file system.
type noSpaceError struct {
	// layer names the layer (its compressed digest).
	layer string
	// cause is the failed write, ENOSPC.
	cause error
}

func (e *noSpaceError) Error() string {
	return fmt.Sprintf("unpacking layer %s: %v", e.layer, e.cause)
}

func (e *noSpaceError) Unwrap() error { return e.cause }

// writeFileSync writes a small file and fsyncs it.
func writeFileSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
