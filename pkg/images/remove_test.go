package images

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

func TestRemoveKeepsSharedLayers(t *testing.T) {
	reg := newRegistry(t)
	base := layer(t, file("base", "b"))
	reg.push(t, "test/one:1", image(t, "", base, layer(t, file("one", "1"))))
	reg.push(t, "test/two:1", image(t, "", base, layer(t, file("two", "2"))))
	s := openStore(t)
	ctx := context.Background()
	one, err := s.Pull(ctx, reg.host+"/test/one:1", PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	two, err := s.Pull(ctx, reg.host+"/test/two:1", PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if one.Layers[0] != two.Layers[0] {
		t.Fatalf("the shared base layer is unpacked twice: %s and %s", one.Layers[0], two.Layers[0])
	}

	release := s.Use(one.ID)
	if err := s.Remove(one.ID); !errors.Is(err, ErrInUse) {
		t.Errorf("Remove of an image in use = %v, want ErrInUse", err)
	}
	release()

	if err := s.Remove(reg.host + "/test/one:1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(one.Layers[1]); !os.IsNotExist(err) {
		t.Errorf("the removed image's own layer is still there: %v", err)
	}
	if _, err := os.Stat(two.Layers[0]); err != nil {
		t.Errorf("the shared layer was removed: %v", err)
	}
	if _, err := s.Lookup(one.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Lookup after Remove = %v", err)
	}
	if err := s.Remove(reg.host + "/test/one:1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Remove = %v, want ErrNotFound", err)
	}
}

func TestRemoveUntagsFirst(t *testing.T) {
	reg := newRegistry(t)
	img := image(t, "", layer(t, file("a", "a")))
	reg.push(t, "test/app:1", img)
	reg.push(t, "test/app:latest", img)
	s := openStore(t)
	for _, tag := range []string{"1", "latest"} {
		if _, err := s.Pull(context.Background(), reg.host+"/test/app:"+tag, PullOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Remove(reg.host + "/test/app:1"); err != nil {
		t.Fatal(err)
	}
	got, err := s.Lookup(reg.host + "/test/app")
	if err != nil || len(got.Names) != 1 {
		t.Fatalf("after untagging: %+v, %v", got, err)
	}
	if _, err := os.Stat(got.Layers[0]); err != nil {
		t.Errorf("untagging removed a layer: %v", err)
	}
}

func TestCollectGarbage(t *testing.T) {
	reg := newRegistry(t)
	s := openStore(t)
	now := time.Unix(1_800_000_000, 0)
	s.now = func() time.Time { return now }
	ctx := context.Background()
	pull := func(repo, content string, at time.Time) *Image {
		now = at
		reg.push(t, repo, image(t, "", layer(t, file("f", content))))
		img, err := s.Pull(ctx, reg.host+"/"+repo, PullOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	start := now
	oldest := pull("test/oldest:1", "1", start)
	inUse := pull("test/inuse:1", "2", start.Add(time.Minute))
	older := pull("test/older:1", "3", start.Add(2*time.Minute))
	recent := pull("test/recent:1", "4", start.Add(10*time.Minute))
	now = start.Add(11 * time.Minute)
	release := s.Use(inUse.ID)
	defer release()
	// Use set the in-use image's LastUsed to now; make it the oldest again
	// so that only the flock keeps it.
	s.mu.Lock()
	s.lastUsed[inUse.ID] = start
	s.mu.Unlock()

	// The disk is 100 bytes; each image is 10 and the rest is 50.
	usage := func(string) (int64, int64, error) {
		imgs, err := s.List()
		return 50 + 10*int64(len(imgs)), 100, err
	}
	s.diskUsage = usage

	if removed, err := s.CollectGarbage(ctx, GCPolicy{HighPercent: 95, LowPercent: 80, MinAge: 2 * time.Minute}); err != nil || len(removed) != 0 {
		t.Fatalf("at 90%% used with the high threshold at 95%%, GC removed %v, %v", removed, err)
	}
	// 90% used, high 85: remove LRU unused images older than MinAge until
	// below 75%: oldest (90 -> 80), then older (-> 70). inUse is held,
	// recent is younger than MinAge.
	removed, err := s.CollectGarbage(ctx, GCPolicy{HighPercent: 85, LowPercent: 75, MinAge: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{oldest.ID, older.ID}
	if len(removed) != 2 || removed[0] != want[0] || removed[1] != want[1] {
		t.Errorf("removed %v, want %v (oldest then older)", removed, want)
	}
	for _, keep := range []*Image{inUse, recent} {
		if _, err := s.Lookup(keep.ID); err != nil {
			t.Errorf("GC removed %v: %v", keep.Names, err)
		}
	}
}
