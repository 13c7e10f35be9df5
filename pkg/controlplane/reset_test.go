package controlplane

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// makeDataDir creates dir with the given top-level entries (directories when
// the name has no dot, files otherwise, "lock" a file).
func makeDataDir(t *testing.T, dir string, entries ...string) {
	t.Helper()
	for _, e := range entries {
		path := filepath.Join(dir, e)
		if e == "lock" || e == "kubeconfig" || strings.Contains(e, ".") {
			if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Join(path, "sub"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
}

func TestReset(t *testing.T) {
	cases := map[string]struct {
		entries []string
		// wantErr is a substring of the error; empty means the reset succeeds.
		wantErr string
	}{
		"data directory":                {entries: []string{"lock", "pki", "etcd", "logs", "kubeconfig", "node", "images", "volumes", ".write-test-123"}},
		"data directory of a failed up": {entries: []string{"pki", "logs"}},
		"another directory":             {entries: []string{"pki", "etcd", "Documents"}, wantErr: "Documents, which jobkeeper does not create"},
		"only logs":                     {entries: []string{"logs", "lock"}, wantErr: "no etcd or pki"},
		"empty":                         {wantErr: "no etcd or pki"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			makeDataDir(t, dir, tc.entries...)
			removed, err := Reset(dir)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Reset: %v, want an error containing %q", err, tc.wantErr)
				}
				if len(removed) != 0 {
					t.Errorf("removed %v despite refusing", removed)
				}
				for _, e := range tc.entries {
					if _, err := os.Lstat(filepath.Join(dir, e)); err != nil {
						t.Errorf("%s is gone after a refused reset: %v", e, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(dir); !os.IsNotExist(err) {
				t.Errorf("%s still exists: %v", dir, err)
			}
			// Every entry, the lock (created by Reset when missing), then the directory.
			if len(removed) == 0 || removed[len(removed)-1] != dir || !contains(removed, filepath.Join(dir, "lock")) {
				t.Errorf("removed %v, want every entry, the lock and the directory", removed)
			}
			for _, e := range tc.entries {
				if !contains(removed, filepath.Join(dir, e)) {
					t.Errorf("removed %v does not name %s", removed, e)
				}
			}
		})
	}
}

// TestResetInUse checks that a data directory whose lock is held is kept.
func TestResetInUse(t *testing.T) {
	dir := t.TempDir()
	makeDataDir(t, dir, "pki", "etcd")
	lock, err := lockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.release()
	if _, err := Reset(dir); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("Reset of a locked directory: %v, want an in-use error", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "etcd")); err != nil {
		t.Errorf("etcd removed from a locked directory: %v", err)
	}
}

// TestResetKeepsLinkTargets checks that a symbolic link inside the data
// directory is removed, not what it points to.
func TestResetKeepsLinkTargets(t *testing.T) {
	base := t.TempDir()
	outside := filepath.Join(base, "precious")
	makeDataDir(t, base, "precious")
	dir := filepath.Join(base, "data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	makeDataDir(t, dir, "pki", "etcd")
	if err := os.Symlink(outside, filepath.Join(dir, "node")); err != nil {
		t.Fatal(err)
	}
	if _, err := Reset(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(outside, "sub")); err != nil {
		t.Errorf("the link's target lost its contents: %v", err)
	}
}

// contains reports whether list holds s.
func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
