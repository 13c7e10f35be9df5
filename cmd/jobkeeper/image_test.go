package main

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// runImage runs `jobkeeper image args...` and returns its output.
func runImage(t *testing.T, stdin io.Reader, args ...string) (string, error) {
	t.Helper()
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	if stdin != nil {
		root.SetIn(stdin)
	}
	root.SetArgs(append([]string{"image"}, args...))
	err := root.Execute()
	return out.String(), err
}

func TestImageLoadListRemove(t *testing.T) {
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	tw.WriteHeader(&tar.Header{Name: "hello", Typeflag: tar.TypeReg, Mode: 0o644, Size: 5})
	tw.Write([]byte("hello"))
	tw.Close()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layer.Bytes())), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), "busybox.tar")
	refs := map[name.Reference]v1.Image{name.MustParseReference("busybox:1.36"): img}
	if err := tarball.MultiRefWriteToFile(archive, refs); err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()

	out, err := runImage(t, nil, "load", "--data-dir", dataDir, archive)
	if err != nil || out != "Loaded image: docker.io/library/busybox:1.36\n" {
		t.Fatalf("image load = %q, %v", out, err)
	}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if out, err := runImage(t, f, "load", "--data-dir", dataDir, "-i", "-"); err != nil || !strings.Contains(out, "busybox:1.36") {
		t.Fatalf("image load from stdin = %q, %v", out, err)
	}

	id, _ := img.ConfigName()
	out, err = runImage(t, nil, "ls", "--data-dir", dataDir)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "IMAGE TAG IMAGE ID SIZE" ||
		strings.Join(strings.Fields(lines[1]), " ") != "docker.io/library/busybox 1.36 "+id.Hex[:12]+" 5B" {
		t.Errorf("image ls =\n%s", out)
	}
	if out, err := runImage(t, nil, "ls", "-q", "--data-dir", dataDir); err != nil || out != id.String()+"\n" {
		t.Errorf("image ls -q = %q, %v", out, err)
	}

	// image tag: a missing source is named; the new name lists beside the old.
	if _, err := runImage(t, nil, "tag", "--data-dir", dataDir, "nothere:1", "x:1"); err == nil || !strings.Contains(err.Error(), "image docker.io/library/nothere:1 not found") {
		t.Errorf("image tag of a missing image: %v, want an error naming it", err)
	}
	if out, err := runImage(t, nil, "tag", "--data-dir", dataDir, "busybox:1.36", "registry.example/tools/busybox:stable"); err != nil || out != "" {
		t.Fatalf("image tag = %q, %v", out, err)
	}
	if out, err := runImage(t, nil, "ls", "--data-dir", dataDir); err != nil || !strings.Contains(out, "registry.example/tools/busybox") || !strings.Contains(out, "docker.io/library/busybox") {
		t.Errorf("image ls after tag =\n%s", out)
	}
	if _, err := runImage(t, nil, "rm", "--data-dir", dataDir, "registry.example/tools/busybox:stable"); err != nil {
		t.Fatal(err)
	}

	if out, err := runImage(t, nil, "rm", "--data-dir", dataDir, "busybox:1.36"); err != nil || out != "Deleted: busybox:1.36\n" {
		t.Errorf("image rm = %q, %v", out, err)
	}
	if out, err := runImage(t, nil, "ls", "-q", "--data-dir", dataDir); err != nil || out != "" {
		t.Errorf("image ls -q after rm = %q, %v", out, err)
	}
	if _, err := runImage(t, nil, "rm", "--data-dir", dataDir, "busybox:1.36"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("second image rm: %v, want not found", err)
	}
}

func TestHumanSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0B", 999: "999B", 1500: "1.5kB", 2_220_000: "2.22MB", 1_234_567_890: "1.235GB"} {
		if got := humanSize(n); got != want {
			t.Errorf("humanSize(%d) = %q, want %q", n, got, want)
		}
	}
}
