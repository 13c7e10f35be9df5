package images

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Annotations that name an image in an OCI image layout's index.
const (
	// annotationContainerdName holds a full name ("docker.io/library/x:1"),
	// written by containerd, nerdctl and Docker 25 and later.
	annotationContainerdName = "io.containerd.image.name"
	// annotationRefName holds a name or, often, only a tag.
	annotationRefName = "org.opencontainers.image.ref.name"
)

// Load reads an image archive from r and stores its images: a `docker
// save` tarball (named by its manifest.json's RepoTags) or an OCI image
// layout in a tar (an OCI archive, e.g. from `skopeo copy ...
// oci-archive:`; named by the io.containerd.image.name annotation, else by
// org.opencontainers.image.ref.name when that is a full name rather than
// a bare tag). A tarball holding both (Docker 25 and later) is read as
// the OCI layout, which keeps the images' manifest digests. The archive
// is copied to the store's work directory first (the docker format needs
// random access). Names taken by the loaded images are removed from
// other images.
func (s *Store) Load(ctx context.Context, r io.Reader) ([]*Image, error) {
	tmp, err := os.MkdirTemp(s.work, "load-")
	if err != nil {
		return nil, fmt.Errorf("loading images: %w", err)
	}
	defer removeAll(tmp)
	archive := filepath.Join(tmp, "archive.tar")
	if err := spool(ctx, archive, r); err != nil {
		return nil, fmt.Errorf("loading images: reading the archive: %w", err)
	}
	kind, sizes, err := archiveKind(archive)
	if err != nil {
		return nil, err
	}
	switch kind {
	case "oci":
		dir := filepath.Join(tmp, "layout")
		if err := extractLayout(archive, dir); err != nil {
			return nil, err
		}
		return s.LoadDir(ctx, dir)
	default:
		return s.loadDocker(ctx, archive, sizes)
	}
}

// spool copies r into a new file at dst, stopping when ctx ends.
func spool(ctx context.Context, dst string, r io.Reader) error {
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, ctxReader{ctx, r})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// ctxReader is a reader that fails once its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// archiveKind says whether the tar at p is an OCI layout ("oci") or a
// docker-save tarball ("docker"), and returns the size of each entry.
func archiveKind(p string) (string, map[string]int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	sizes := map[string]int64{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", nil, fmt.Errorf("loading images: the archive is not a tar file: %w", err)
		}
		sizes[path.Clean(hdr.Name)] = hdr.Size
	}
	_, hasLayout := sizes["oci-layout"]
	_, hasIndex := sizes["index.json"]
	_, hasManifest := sizes["manifest.json"]
	switch {
	case hasLayout && hasIndex:
		return "oci", sizes, nil
	case hasManifest:
		return "docker", sizes, nil
	}
	return "", nil, errors.New("loading images: the archive is neither a docker save tarball (no manifest.json) nor an OCI archive (no oci-layout and index.json)")
}

// extractLayout extracts the OCI layout in the tar at p into dir: only
// directories and regular files, inside dir.
func extractLayout(p, dir string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("loading images: reading the OCI archive: %w", err)
		}
		rel, err := entryPath(hdr.Name)
		if err != nil {
			return fmt.Errorf("loading images: %w", err)
		}
		target := filepath.Join(dir, filepath.FromSlash(rel))
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o700); err != nil {
				return fmt.Errorf("loading images: %w", err)
			}
		case tar.TypeReg, tar.TypeRegA:
			if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
				return fmt.Errorf("loading images: %w", err)
			}
			out, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
			if err != nil {
				return fmt.Errorf("loading images: %w", err)
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("loading images: extracting the OCI archive: %w", err)
			}
		}
	}
}

// loadDocker stores the images of the docker-save tarball at archive.
func (s *Store) loadDocker(ctx context.Context, archive string, sizes map[string]int64) ([]*Image, error) {
	opener := func() (io.ReadCloser, error) { return os.Open(archive) }
	m, err := tarball.LoadManifest(opener)
	if err != nil {
		return nil, fmt.Errorf("loading images: reading manifest.json: %w", err)
	}
	var ids []string
	for i, d := range m {
		var names []string
		for _, t := range d.RepoTags {
			n, err := Normalize(t)
			if err != nil {
				return nil, fmt.Errorf("loading images: image %d of the archive: %w", i+1, err)
			}
			names = append(names, n)
		}
		var tag *name.Tag
		if len(m) > 1 {
			if len(d.RepoTags) == 0 {
				return nil, fmt.Errorf("loading images: image %d of the archive (config %s) has no tag, and the archive holds several images; save it alone or with a tag", i+1, d.Config)
			}
			t, err := name.NewTag(d.RepoTags[0])
			if err != nil {
				return nil, fmt.Errorf("loading images: image %d of the archive: %w", i+1, err)
			}
			tag = &t
		}
		img, err := tarball.Image(opener, tag)
		if err != nil {
			return nil, fmt.Errorf("loading images: image %d of the archive: %w", i+1, err)
		}
		digest, err := dockerManifestDigest(img, d, sizes)
		if err != nil {
			return nil, fmt.Errorf("loading images: image %d of the archive: %w", i+1, err)
		}
		what := d.Config
		if len(names) > 0 {
			what = names[0]
		}
		out, err := s.add(ctx, img, addition{
			what: what, digest: digest, digests: []string{digest},
			names: names, repos: reposOf(names), want: nodePlatform(),
		})
		if err != nil {
			return nil, err
		}
		ids = append(ids, out.ID)
	}
	return s.lookupIDs(ids)
}

// dockerManifestDigest is the digest of the OCI manifest the store
// records for an image from a docker-save tarball, which has none: its
// config, and its layers as uncompressed tars (digest the diffID, size
// that of the layer's file in the archive).
func dockerManifestDigest(img v1.Image, d tarball.Descriptor, sizes map[string]int64) (string, error) {
	raw, err := img.RawConfigFile()
	if err != nil {
		return "", err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return "", err
	}
	if len(cf.RootFS.DiffIDs) != len(d.Layers) {
		return "", newError(ErrCorrupt, fmt.Sprintf("manifest.json lists %d layers, the config %d", len(d.Layers), len(cf.RootFS.DiffIDs)))
	}
	cfgDigest := sha256.Sum256(raw)
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		Config: v1.Descriptor{
			MediaType: types.OCIConfigJSON,
			Size:      int64(len(raw)),
			Digest:    v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", cfgDigest)},
		},
	}
	for i, diffID := range cf.RootFS.DiffIDs {
		m.Layers = append(m.Layers, v1.Descriptor{
			MediaType: types.OCIUncompressedLayer,
			Size:      sizes[path.Clean(d.Layers[i])],
			Digest:    diffID,
		})
	}
	data, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("sha256:%x", sha256.Sum256(data)), nil
}

// LoadDir stores the images of the OCI image layout in dir, named as Load
// names them. An index inside the layout's index is resolved to this
// node's platform.
func (s *Store) LoadDir(ctx context.Context, dir string) ([]*Image, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("loading images: %s is not an OCI image layout: %w", dir, err)
	}
	ii, err := p.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("loading images: reading the OCI layout's index: %w", err)
	}
	im, err := ii.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("loading images: reading the OCI layout's index: %w", err)
	}
	want := nodePlatform()
	var ids []string
	for _, desc := range im.Manifests {
		names, err := layoutNames(desc.Annotations)
		if err != nil {
			return nil, fmt.Errorf("loading images: manifest %s of the OCI layout: %w", desc.Digest, err)
		}
		what := desc.Digest.String()
		if len(names) > 0 {
			what = names[0]
		}
		a := addition{
			what: what, digest: desc.Digest.String(), digests: []string{desc.Digest.String()},
			names: names, repos: reposOf(names), want: want,
		}
		var img v1.Image
		switch {
		case desc.MediaType.IsIndex():
			child, err := ii.ImageIndex(desc.Digest)
			if err != nil {
				return nil, fmt.Errorf("loading images: %s: %w", what, err)
			}
			cm, err := child.IndexManifest()
			if err != nil {
				return nil, fmt.Errorf("loading images: %s: %w", what, err)
			}
			m, has := choosePlatform(want, cm.Manifests)
			if m == nil {
				return nil, newError(ErrPlatform, fmt.Sprintf("no %s image in the index of %s (has %s)", platformString(want), what, listOrNone(has)))
			}
			a.digests = append(a.digests, m.Digest.String())
			if img, err = child.Image(m.Digest); err != nil {
				return nil, fmt.Errorf("loading images: %s: %w", what, err)
			}
		case desc.MediaType.IsImage():
			if img, err = ii.Image(desc.Digest); err != nil {
				return nil, fmt.Errorf("loading images: %s: %w", what, err)
			}
		default:
			continue
		}
		out, err := s.add(ctx, img, a)
		if err != nil {
			return nil, err
		}
		ids = append(ids, out.ID)
	}
	return s.lookupIDs(ids)
}

// layoutNames returns the normalized names an OCI layout's annotations
// give a manifest: io.containerd.image.name, else
// org.opencontainers.image.ref.name unless it is a bare tag.
func layoutNames(ann map[string]string) ([]string, error) {
	n := ann[annotationContainerdName]
	if n == "" {
		n = ann[annotationRefName]
		if !strings.ContainsAny(n, "/:@") {
			return nil, nil
		}
	}
	nn, err := Normalize(n)
	if err != nil {
		return nil, err
	}
	if strings.Contains(nn, "@") {
		return nil, nil
	}
	return []string{nn}, nil
}

// reposOf returns the repositories of normalized tags.
func reposOf(names []string) []string {
	var repos []string
	for _, n := range names {
		r, _ := splitName(n)
		repos = union(repos, []string{r})
	}
	return repos
}

// lookupIDs returns the stored images with these IDs, once each, in order.
func (s *Store) lookupIDs(ids []string) ([]*Image, error) {
	var out []*Image
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		img, err := s.Lookup(id)
		if err != nil {
			return nil, err
		}
		out = append(out, img)
	}
	return out, nil
}
