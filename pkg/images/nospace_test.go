package images

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"jobkeeper.dev/jobkeeper/internal/testimages"
)

// TestPullFillsTheDisk pulls an image bigger than the store's file system
// (a 4 MiB tmpfs): the pull fails saying so and naming the image and the
// layer, leaves nothing behind, and a small image pulls afterwards.
func TestPullFillsTheDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs as the store's file system")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=4m"); err != nil {
		t.Skipf("mounting a 4 MiB tmpfs on %s was refused: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmounting the tmpfs: %v", err)
		}
	})
	// The two small layers are stored before the big one fills the disk:
	// the failed pull must remove them too.
	big, err := testimages.Build(testimages.Config{}, randomLayer(t, 1, 256<<10), randomLayer(t, 2, 512<<10), randomLayer(t, 3, 4<<20))
	if err != nil {
		t.Fatal(err)
	}
	small1, err := testimages.Build(testimages.Config{}, randomLayer(t, 4, 64<<10))
	if err != nil {
		t.Fatal(err)
	}
	small2, err := testimages.Build(testimages.Config{}, randomLayer(t, 5, 64<<10))
	if err != nil {
		t.Fatal(err)
	}
	host := testimages.Serve(t, map[string]v1.Image{"test/big:1": big, "test/small:1": small1, "test/small:2": small2})
	s, err := Open(filepath.Join(dir, "images"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	first, err := s.Pull(ctx, host+"/test/small:1", PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	indexBefore, err := os.ReadFile(filepath.Join(s.dir, indexFile))
	if err != nil {
		t.Fatal(err)
	}

	ref := host + "/test/big:1"
	_, err = s.Pull(ctx, ref, PullOptions{})
	if err == nil {
		t.Fatal("pulling over 4 MiB into a 4 MiB file system succeeded")
	}
	msg := err.Error()
	if !errors.Is(err, unix.ENOSPC) || !strings.Contains(msg, "no space left on device") || !strings.Contains(msg, ref) ||
		!strings.Contains(msg, "storing layer sha256:") || !strings.Contains(msg, s.dir) {
		t.Errorf("Pull = %q, want ENOSPC saying \"no space left on device\" and naming the layer, %s and the store", msg, ref)
	}
	t.Logf("the error: %s", msg)
	if entries, _ := os.ReadDir(s.work); len(entries) != 0 {
		t.Errorf("the work directory holds %v after the failed pull", entries)
	}
	tmp, _ := os.ReadDir(filepath.Join(s.dir, tmpDir))
	if len(tmp) != 2 {
		t.Errorf("tmp/ holds %v, want only the store's work directory and its lock", tmp)
	}
	if diff := cmp.Diff(layerDirsOf(first), layerDirs(t, s)); diff != "" {
		t.Errorf("l/ after the failed pull (-want +got):\n%s", diff)
	}
	indexAfter, _ := os.ReadFile(filepath.Join(s.dir, indexFile))
	if string(indexAfter) != string(indexBefore) {
		t.Errorf("the index changed:\n%s\nwas:\n%s", indexAfter, indexBefore)
	}
	if _, err := s.Lookup(ref); !errors.Is(err, ErrNotFound) {
		t.Errorf("Lookup(%s) = %v, want ErrNotFound", ref, err)
	}

	if _, err := s.Pull(ctx, host+"/test/small:2", PullOptions{}); err != nil {
		t.Fatalf("pulling a small image after the failed pull: %v", err)
	}
	if imgs, _ := s.List(); len(imgs) != 2 {
		t.Errorf("List = %d images, want the two small ones", len(imgs))
	}
}
