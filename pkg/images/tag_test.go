package images

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestTag checks `docker tag`'s rules: the source by name or ID, a new name
// added, a name of another image moved, a missing source or a digest target
// refused, naming what is wrong.
func TestTag(t *testing.T) {
	reg := newRegistry(t)
	reg.push(t, "test/one:1", image(t, "", layer(t, file("one", "1"))))
	reg.push(t, "test/two:1", image(t, "", layer(t, file("two", "2"))))
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

	names := func(ref string) []string {
		t.Helper()
		img, err := s.Lookup(ref)
		if err != nil {
			t.Fatalf("Lookup(%s): %v", ref, err)
		}
		return img.Names
	}

	// By name, with the tag defaulted.
	got, err := s.Tag(reg.host+"/test/one:1", "busybox")
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != one.ID {
		t.Errorf("tagged %s, want %s", got.ID, one.ID)
	}
	if diff := cmp.Diff([]string{reg.host + "/test/one:1", "docker.io/library/busybox:latest"}, names(one.ID)); diff != "" {
		t.Errorf("names after tag (-want +got):\n%s", diff)
	}
	// Twice is the same.
	if _, err := s.Tag(reg.host+"/test/one:1", "docker.io/library/busybox:latest"); err != nil {
		t.Fatal(err)
	}
	if n := len(names(one.ID)); n != 2 {
		t.Errorf("tagging twice: %d names, want 2", n)
	}

	// By ID prefix, onto a name another image has: the name moves.
	if _, err := s.Tag(strings.TrimPrefix(two.ID, "sha256:")[:12], "busybox:latest"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Lookup("busybox"); err != nil || got.ID != two.ID {
		t.Errorf("busybox is %v (%v), want %s", got, err, two.ID)
	}
	if diff := cmp.Diff([]string{reg.host + "/test/one:1"}, names(one.ID)); diff != "" {
		t.Errorf("the former image's names (-want +got):\n%s", diff)
	}

	// Onto the last name of another image: that image stays, unnamed.
	if _, err := s.Tag(two.ID, reg.host+"/test/one:1"); err != nil {
		t.Fatal(err)
	}
	if got := names(one.ID); len(got) != 0 {
		t.Errorf("the former image still has names %v", got)
	}

	for name, tc := range map[string]struct {
		src, dst string
		want     error
		wantMsg  string
	}{
		"missing source": {src: "nothere:1", dst: "x:1", want: ErrNotFound, wantMsg: "docker.io/library/nothere:1"},
		"digest target":  {src: two.ID, dst: "x@sha256:" + strings.Repeat("a", 64), want: ErrInvalidName, wantMsg: "give a tag"},
		"invalid target": {src: two.ID, dst: "X Y", want: ErrInvalidName, wantMsg: `"X Y"`},
		"invalid source": {src: "", dst: "x:1", want: ErrInvalidName, wantMsg: `""`},
	} {
		t.Run(name, func(t *testing.T) {
			before, _ := s.List()
			_, err := s.Tag(tc.src, tc.dst)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("Tag(%q, %q) = %v, want %v naming %s", tc.src, tc.dst, err, tc.want, tc.wantMsg)
			}
			after, _ := s.List()
			if diff := cmp.Diff(before, after); diff != "" {
				t.Errorf("a refused tag changed the store (-before +after):\n%s", diff)
			}
		})
	}
}
