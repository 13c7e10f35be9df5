package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// pendingFile is an output being written: a temporary file beside its
// final path, renamed there by commit, removed by abandon otherwise, so
// that a failed build leaves no partial file.
type pendingFile struct {
	// f is the temporary file.
	f *os.File
	// path is the final path.
	path string
	// done is set once renamed.
	done bool
}

// createPending opens a temporary file beside path, failing at once when
// path's directory is not writable or path is a directory.
func createPending(path string) (*pendingFile, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return nil, fmt.Errorf("-o %s is a directory", path)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("-o %s cannot be written: %w", path, err)
	}
	return &pendingFile{f: f, path: path}, nil
}

// commit closes the file and renames it into place.
func (p *pendingFile) commit() error {
	if err := p.f.Sync(); err != nil {
		return fmt.Errorf("writing %s: %w", p.path, err)
	}
	if err := p.f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", p.path, err)
	}
	if err := os.Chmod(p.f.Name(), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", p.path, err)
	}
	if err := os.Rename(p.f.Name(), p.path); err != nil {
		return fmt.Errorf("writing %s: %w", p.path, err)
	}
	p.done = true
	return nil
}

// abandon removes the temporary file unless it was committed.
func (p *pendingFile) abandon() {
	if !p.done {
		p.f.Close()
		os.Remove(p.f.Name())
	}
}

// writeTarball writes img under tag as a docker save tarball into out and
// commits it.
func writeTarball(out *pendingFile, tag name.Tag, img v1.Image) error {
	if err := tarball.Write(tag, img, out.f); err != nil {
		return fmt.Errorf("writing %s: %w", out.path, err)
	}
	return out.commit()
}

// push pushes one image, or an index of several (one per platform), to
// ref, and returns the digest pushed.
func push(ctx context.Context, ref name.Reference, platforms []v1.Platform, images []v1.Image, keychain authn.Keychain) (v1.Hash, error) {
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(keychain)}
	if len(images) == 1 {
		if err := remote.Write(ref, images[0], opts...); err != nil {
			return v1.Hash{}, fmt.Errorf("pushing %s: %w", ref, err)
		}
		return images[0].Digest()
	}
	var adds []mutate.IndexAddendum
	for i, img := range images {
		p := platforms[i]
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	// Docker's media type, as the images' manifests are Docker's.
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.DockerManifestList), adds...)
	if err := remote.WriteIndex(ref, idx, opts...); err != nil {
		return v1.Hash{}, fmt.Errorf("pushing %s: %w", ref, err)
	}
	return idx.Digest()
}
