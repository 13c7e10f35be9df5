package testimages

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// sameImage fails t unless got has want's config and layers (a docker-save
// round trip rewrites the manifest, so the image digests may differ).
func sameImage(t *testing.T, want, got v1.Image) {
	t.Helper()
	wantConfig, err := want.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	gotConfig, err := got.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	if wantConfig != gotConfig {
		t.Errorf("config %s, want %s", gotConfig, wantConfig)
	}
	digests := func(img v1.Image) []v1.Hash {
		layers, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		var ds []v1.Hash
		for _, l := range layers {
			d, err := l.Digest()
			if err != nil {
				t.Fatal(err)
			}
			ds = append(ds, d)
		}
		return ds
	}
	if diff := cmp.Diff(digests(want), digests(got)); diff != "" {
		t.Errorf("layer digests (-want +got):\n%s", diff)
	}
}

func TestWriteDockerArchive(t *testing.T) {
	app, err := Static(map[string][]byte{"app": []byte("app")}, "/app")
	if err != nil {
		t.Fatal(err)
	}
	deleted, err := WithWhiteout(app, "app")
	if err != nil {
		t.Fatal(err)
	}
	images := map[string]v1.Image{
		"example.test/app:1":      app,
		"example.test/app:latest": app, // one image, two tags
		"example.test/gone:1":     deleted,
	}
	file := filepath.Join(t.TempDir(), "images.tar")
	if err := WriteDockerArchive(file, images); err != nil {
		t.Fatal(err)
	}

	manifest, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(file) })
	if err != nil {
		t.Fatal(err)
	}
	var tags [][]string
	for _, d := range manifest {
		tags = append(tags, slices.Sorted(slices.Values(d.RepoTags)))
	}
	slices.SortFunc(tags, func(a, b []string) int { return slices.Compare(a, b) })
	wantTags := [][]string{{"example.test/app:1", "example.test/app:latest"}, {"example.test/gone:1"}}
	if diff := cmp.Diff(wantTags, tags); diff != "" {
		t.Errorf("RepoTags (-want +got):\n%s", diff)
	}
	for ref, want := range images {
		tag, err := name.NewTag(ref)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tarball.ImageFromPath(file, &tag)
		if err != nil {
			t.Fatalf("reading %s back: %v", ref, err)
		}
		sameImage(t, want, got)
	}

	if err := WriteDockerArchive(file, map[string]v1.Image{"Not A Name": app}); err == nil {
		t.Error("an invalid image name was written")
	}
}
