package images

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestWhiteoutsAndOpaqueDirs(t *testing.T) {
	s := openStore(t)
	lower := layerTar(t, dir("a/"), file("a/x", "x"), file("a/y", "y"), file("gone", "g"), file("kept", "k"))
	upper := layerTar(t, dir("a/"), file("a/.wh..wh..opq", ""), file("a/z", "z"), file(".wh.gone", ""), symlink("link", "/kept"))
	var dirs []string
	for _, data := range [][]byte{lower, upper} {
		u := &unpacker{root: filepath.Join(t.TempDir(), "fs"), keepOwner: s.root}
		if _, _, err := u.unpack(context.Background(), bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, u.root)
	}
	top := dirs[1]
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(top, "gone"), &st); err != nil {
		t.Fatalf("whiteout of gone: %v", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Errorf("gone in the upper layer: mode %o rdev %d, want a 0/0 character device", st.Mode, st.Rdev)
	}
	if _, err := os.Lstat(filepath.Join(top, ".wh.gone")); !os.IsNotExist(err) {
		t.Errorf(".wh.gone was written as a file: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(top, "a", ".wh..wh..opq")); !os.IsNotExist(err) {
		t.Errorf(".wh..wh..opq was written as a file: %v", err)
	}
	attr := opaqueUser
	if s.root {
		attr = opaqueTrusted
	}
	buf := make([]byte, 8)
	n, err := unix.Lgetxattr(filepath.Join(top, "a"), attr, buf)
	if err != nil || string(buf[:n]) != "y" {
		t.Errorf("%s on a = %q, %v; want y", attr, buf[:n], err)
	}
	if l, _ := os.Readlink(filepath.Join(top, "link")); l != "/kept" {
		t.Errorf("link -> %q, want /kept", l)
	}
	if _, err := os.Lstat(filepath.Join(dirs[0], "a", "x")); err != nil {
		t.Errorf("the lower layer lost a/x: %v", err)
	}
}

func TestUnsafeEntriesRefused(t *testing.T) {
	cases := map[string][]entry{
		"parent path":         {file("../escape", "x")},
		"parent after clean":  {dir("a/"), file("a/../../escape", "x")},
		"absolute path":       {file("/etc/passwd", "x")},
		"hard link outside":   {hardlink("h", "../../etc/passwd")},
		"hard link absolute":  {hardlink("h", "/etc/passwd")},
		"hard link directory": {dir("d/"), hardlink("h", "d")},
	}
	for name, entries := range cases {
		t.Run(name, func(t *testing.T) {
			parent := t.TempDir()
			u := &unpacker{root: filepath.Join(parent, "fs")}
			_, _, err := u.unpack(context.Background(), bytes.NewReader(layerTar(t, entries...)))
			if !errors.Is(err, errUnsafeEntry) {
				t.Errorf("unpack = %v, want an unsafe-entry error", err)
			}
			if _, err := os.Lstat(filepath.Join(parent, "escape")); err == nil {
				t.Error("a file was written outside the layer")
			}
		})
	}
	// A symbolic link out of the layer is kept as a link (it is resolved
	// in the container's root), but is never followed while unpacking.
	parent := t.TempDir()
	u := &unpacker{root: filepath.Join(parent, "fs")}
	entries := []entry{symlink("up", "../.."), file("up/escape", "x")}
	if _, _, err := u.unpack(context.Background(), bytes.NewReader(layerTar(t, entries...))); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(parent, "escape")); err == nil {
		t.Error("a file was written through a symlink outside the layer")
	}
	if _, err := os.Lstat(filepath.Join(u.root, "escape")); err != nil {
		t.Errorf("up/escape was not written inside the layer: %v", err)
	}
}

// TestDeferredDirMetadataStaysInLayer checks that a directory's mode,
// owner, xattrs and times, applied once every entry is in, never reach a
// host file when a later entry replaced the directory, or one of its
// parents, with a symbolic link out of the layer.
func TestDeferredDirMetadataStaysInLayer(t *testing.T) {
	evil := map[string]string{"user.evil": "y"}
	cases := map[string]struct {
		// entries builds the layer; host is the directory outside it.
		entries func(host string) []entry
		// victim is the host path that must keep its metadata.
		victim string
	}{
		"directory replaced by a symlink": {
			entries: func(host string) []entry {
				return []entry{
					{name: "x/", typ: tar.TypeDir, mode: 0o6777, uid: 4242, gid: 4242, xattrs: evil},
					symlink("x", filepath.Join(host, "victim")),
				}
			},
			victim: "victim",
		},
		"parent replaced by a symlink": {
			entries: func(host string) []entry {
				return []entry{
					dir("a/"),
					{name: "a/victim/", typ: tar.TypeDir, mode: 0o6777, uid: 4242, gid: 4242, xattrs: evil},
					symlink("a", host),
				}
			},
			victim: "victim",
		},
	}
	owners := []bool{false}
	if os.Geteuid() == 0 {
		owners = append(owners, true)
	}
	for name, tc := range cases {
		for _, keepOwner := range owners {
			t.Run(fmt.Sprintf("%s/keepOwner=%v", name, keepOwner), func(t *testing.T) {
				parent := t.TempDir()
				host := filepath.Join(parent, "host")
				victim := filepath.Join(host, tc.victim)
				if err := os.Mkdir(host, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(victim, []byte("host"), 0o600); err != nil {
					t.Fatal(err)
				}
				old := time.Unix(1000, 0)
				if err := os.Chtimes(victim, old, old); err != nil {
					t.Fatal(err)
				}
				var before unix.Stat_t
				if err := unix.Stat(victim, &before); err != nil {
					t.Fatal(err)
				}
				u := &unpacker{root: filepath.Join(parent, "fs"), keepOwner: keepOwner}
				if _, _, err := u.unpack(context.Background(), bytes.NewReader(layerTar(t, tc.entries(host)...))); err != nil {
					t.Fatal(err)
				}
				var after unix.Stat_t
				if err := unix.Stat(victim, &after); err != nil {
					t.Fatal(err)
				}
				if after.Mode != before.Mode {
					t.Errorf("host file mode %o, was %o", after.Mode, before.Mode)
				}
				if after.Uid != before.Uid || after.Gid != before.Gid {
					t.Errorf("host file owner %d:%d, was %d:%d", after.Uid, after.Gid, before.Uid, before.Gid)
				}
				if after.Mtim != before.Mtim {
					t.Errorf("host file mtime %v, was %v", after.Mtim, before.Mtim)
				}
				if _, err := unix.Getxattr(victim, "user.evil", make([]byte, 8)); err == nil {
					t.Error("host file got the layer's xattr user.evil")
				}
			})
		}
	}
}

// TestRepeatedDirEntryLastWins checks that a directory listed twice gets
// the metadata of its last entry, as tar extraction does.
func TestRepeatedDirEntryLastWins(t *testing.T) {
	u := &unpacker{root: filepath.Join(t.TempDir(), "fs")}
	entries := []entry{
		{name: "d/", typ: tar.TypeDir, mode: 0o750},
		{name: "d/", typ: tar.TypeDir, mode: 0o705},
	}
	if _, _, err := u.unpack(context.Background(), bytes.NewReader(layerTar(t, entries...))); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(filepath.Join(u.root, "d"))
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o705 {
		t.Errorf("d has mode %o, want the last entry's 0705", got)
	}
}

func TestPullRefusesTraversal(t *testing.T) {
	reg := newRegistry(t)
	reg.push(t, "test/evil:1", image(t, "", layer(t, file("../../evil", "x"))))
	s := openStore(t)
	_, err := s.Pull(context.Background(), reg.host+"/test/evil:1", PullOptions{})
	if err == nil || !strings.Contains(err.Error(), `unsafe layer entry "../../evil": path leaves the layer`) {
		t.Errorf("Pull = %v", err)
	}
	assertNoPartialLayers(t, s)
}
