package volume

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// readVolume reads path of a volume directory, through its links.
func readVolume(t *testing.T, dir, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, path))
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	return string(b)
}

// versions lists the version directories of dir.
func versions(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), "..") {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestWriteAtomic checks the kubelet's layout: files reached through
// top-level links into ..data, an update swapping ..data whole (a name
// resolved before the update, as a subPath mount resolves it, keeps the old
// content), names gone from the payload removed, the old version removed,
// no write at all when nothing changed, and plain files of another layout
// taken over.
func TestWriteAtomic(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	v1 := []ProjectedFile{
		{Path: "app.conf", Data: []byte("one"), Mode: 0o644},
		{Path: "nested/key", Data: []byte("n1"), Mode: 0o400},
		{Path: "old", Data: []byte("bye"), Mode: 0o644},
	}
	changed, err := WriteAtomic(dir, v1, now)
	if err != nil || !changed {
		t.Fatalf("first write: %v, changed %v", err, changed)
	}
	if got := readVolume(t, dir, "app.conf"); got != "one" {
		t.Errorf("app.conf = %q", got)
	}
	if got := readVolume(t, dir, "nested/key"); got != "n1" {
		t.Errorf("nested/key = %q", got)
	}
	if target, err := os.Readlink(filepath.Join(dir, "app.conf")); err != nil || target != "..data/app.conf" {
		t.Errorf("app.conf links to %q (%v), want ..data/app.conf", target, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "nested/key")); err != nil || fi.Mode().Perm() != 0o400 {
		t.Errorf("nested/key mode %v (%v), want 0400", fi, err)
	}
	first := versions(t, dir)
	if len(first) != 1 || !strings.HasPrefix(first[0], "..2026_01_02_03_04_05.") {
		t.Fatalf("versions %v, want one named after the time", first)
	}

	// What a subPath mount holds: the file resolved at mount time.
	resolved, err := filepath.EvalSymlinks(filepath.Join(dir, "app.conf"))
	if err != nil {
		t.Fatal(err)
	}
	held, err := os.Open(resolved)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()

	changed, err = WriteAtomic(dir, v1, now.Add(time.Minute))
	if err != nil || changed {
		t.Fatalf("same files again: %v, changed %v; want no change", err, changed)
	}
	if got := versions(t, dir); len(got) != 1 || got[0] != first[0] {
		t.Errorf("versions after an unchanged write %v, want %v", got, first)
	}

	v2 := []ProjectedFile{
		{Path: "app.conf", Data: []byte("two"), Mode: 0o644},
		{Path: "nested/key", Data: []byte("n1"), Mode: 0o400},
		{Path: "new", Data: []byte("hi"), Mode: 0o600},
	}
	changed, err = WriteAtomic(dir, v2, now.Add(2*time.Minute))
	if err != nil || !changed {
		t.Fatalf("update: %v, changed %v", err, changed)
	}
	if got := readVolume(t, dir, "app.conf"); got != "two" {
		t.Errorf("app.conf after the update = %q, want two", got)
	}
	if got := readVolume(t, dir, "new"); got != "hi" {
		t.Errorf("new = %q", got)
	}
	if _, err := os.Lstat(filepath.Join(dir, "old")); !os.IsNotExist(err) {
		t.Errorf("old is still there: %v", err)
	}
	if got := versions(t, dir); len(got) != 1 || got[0] == first[0] {
		t.Errorf("versions after the update %v, want one new one", got)
	}
	b := make([]byte, 8)
	n, _ := held.Read(b)
	if string(b[:n]) != "one" {
		t.Errorf("the file resolved before the update reads %q, want the old one", b[:n])
	}

	// Plain files of another layout are replaced by links.
	plain := filepath.Join(t.TempDir(), "vol")
	if err := os.MkdirAll(plain, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(plain, "app.conf"), []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteAtomic(plain, v2, now); err != nil {
		t.Fatal(err)
	}
	if got := readVolume(t, plain, "app.conf"); got != "two" {
		t.Errorf("taken over app.conf = %q, want two", got)
	}

	for _, bad := range []string{"/abs", "../up", "a/../../up", "..data", ""} {
		if _, err := WriteAtomic(dir, []ProjectedFile{{Path: bad, Data: nil, Mode: 0o644}}, now); err == nil {
			t.Errorf("path %q was written", bad)
		}
	}
	if got := readVolume(t, dir, "app.conf"); got != "two" {
		t.Errorf("a refused write changed the volume: app.conf = %q", got)
	}
}

// TestWriteAtomicSetsPermsBeforeTheSwap: the permissions hook (the pod's
// fsGroup) runs once the new version is written and before ..data points
// to it, as the kubelet's atomic writer calls setPerms, so a reader never
// sees a version without them; it does not run when nothing changed.
func TestWriteAtomicSetsPermsBeforeTheSwap(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if _, err := WriteAtomic(dir, []ProjectedFile{{Path: "k", Data: []byte("1"), Mode: 0o400}}, now); err != nil {
		t.Fatal(err)
	}
	old, err := os.Readlink(filepath.Join(dir, dataLink))
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	setPerms := func() error {
		calls++
		if got, _ := os.Readlink(filepath.Join(dir, dataLink)); got != old {
			t.Errorf("the hook ran after ..data moved to %s", got)
		}
		if vs := versions(t, dir); len(vs) != 2 {
			t.Errorf("the hook ran with versions %v, want the old and the new", vs)
		}
		return nil
	}
	v2 := []ProjectedFile{{Path: "k", Data: []byte("2"), Mode: 0o400}}
	if changed, err := writeAtomicWith(dir, v2, now.Add(time.Minute), setPerms); err != nil || !changed {
		t.Fatalf("update: %v, changed %v", err, changed)
	}
	if calls != 1 {
		t.Errorf("hook called %d times on an update, want 1", calls)
	}
	if got := readVolume(t, dir, "k"); got != "2" {
		t.Errorf("k = %q after the update", got)
	}
	if _, err := writeAtomicWith(dir, v2, now.Add(2*time.Minute), setPerms); err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Errorf("hook called again when nothing changed")
	}
	// A failing hook leaves the current version in place.
	failing := func() error { return os.ErrPermission }
	if _, err := writeAtomicWith(dir, []ProjectedFile{{Path: "k", Data: []byte("3"), Mode: 0o400}}, now.Add(3*time.Minute), failing); err == nil {
		t.Errorf("a failing hook: no error")
	}
	if got := readVolume(t, dir, "k"); got != "2" {
		t.Errorf("k = %q after a failed update, want 2", got)
	}
}
