package images

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func TestLoadDockerSaveTarball(t *testing.T) {
	img := image(t, "", layer(t, file("bin/sh", "shell")))
	other := image(t, "", layer(t, file("other", "o")))
	var buf bytes.Buffer
	refs := map[name.Reference]v1.Image{
		name.MustParseReference("busybox:1.36"):              img,
		name.MustParseReference("registry.k8s.io/pause:3.9"): other,
	}
	if err := tarball.MultiRefWrite(refs, &buf); err != nil {
		t.Fatal(err)
	}
	s := openStore(t)
	got, err := s.Load(context.Background(), &buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("Load returned %d images, want 2", len(got))
	}
	bb, err := s.Lookup("busybox:1.36")
	if err != nil {
		t.Fatal(err)
	}
	id, _ := img.ConfigName()
	if bb.ID != id.String() || bb.Digest == "" || len(bb.RepoDigests) != 1 || bb.RepoDigests[0] != "docker.io/library/busybox@"+bb.Digest {
		t.Errorf("loaded busybox: %+v", bb)
	}
	if b, err := os.ReadFile(filepath.Join(bb.Layers[0], "bin/sh")); err != nil || string(b) != "shell" {
		t.Errorf("bin/sh = %q, %v", b, err)
	}
	if _, err := s.Lookup("registry.k8s.io/pause:3.9"); err != nil {
		t.Error(err)
	}
	// Loading again is idempotent.
	buf.Reset()
	if err := tarball.MultiRefWrite(refs, &buf); err != nil {
		t.Fatal(err)
	}
	again, err := s.Load(context.Background(), &buf)
	if err != nil || len(again) != 2 || again[0].Digest != got[0].Digest {
		t.Errorf("second Load = %v, %v", again, err)
	}
}

func TestLoadOCIArchiveAndDir(t *testing.T) {
	img := image(t, "", layer(t, file("app", "a")))
	plain := image(t, "", layer(t, file("plain", "p")))
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{annotationRefName: "example.com/team/app:2"})); err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(plain, layout.WithAnnotations(map[string]string{annotationRefName: "latest"})); err != nil {
		t.Fatal(err)
	}
	archive := tarDir(t, dir)

	s := openStore(t)
	got, err := s.Load(context.Background(), bytes.NewReader(archive))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("Load returned %d images, want 2", len(got))
	}
	app, err := s.Lookup("example.com/team/app:2")
	if err != nil {
		t.Fatal(err)
	}
	if app.Digest != digestOf(t, img) || app.RepoDigests[0] != "example.com/team/app@"+digestOf(t, img) {
		t.Errorf("loaded app: digest %s repo digests %v, want the manifest's digest %s", app.Digest, app.RepoDigests, digestOf(t, img))
	}
	id, _ := plain.ConfigName()
	unnamed, err := s.Lookup(id.String())
	if err != nil || len(unnamed.Names) != 0 {
		t.Errorf("an image with a bare-tag ref.name: %+v, %v; want it stored without a name", unnamed, err)
	}

	s2 := openStore(t)
	fromDir, err := s2.LoadDir(context.Background(), dir)
	if err != nil || len(fromDir) != 2 {
		t.Fatalf("LoadDir = %v, %v", fromDir, err)
	}
}

// tarDir writes the tree at dir as a tar.
func tarDir(t *testing.T, dir string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		hdr, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if d.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if d.Type().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.Copy(tw, f)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
