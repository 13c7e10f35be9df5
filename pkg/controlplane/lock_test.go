package controlplane

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckDirLock checks that CheckDirLock says a held data directory is in
// use, with Start's message, and creates nothing where there is no lock.
func TestCheckDirLock(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	if err := CheckDirLock(missing); err != nil {
		t.Errorf("missing directory: %v", err)
	}
	if _, err := os.Stat(missing); err == nil {
		t.Errorf("CheckDirLock created %s", missing)
	}

	dir := t.TempDir()
	if err := CheckDirLock(dir); err != nil {
		t.Errorf("directory without a lock file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "lock")); err == nil {
		t.Errorf("CheckDirLock created the lock file")
	}
	l, err := lockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckDirLock(dir); err == nil || !strings.Contains(err.Error(), "data directory "+dir+" is in use by another jobkeeper") {
		t.Errorf("held lock: err = %v, want the data directory in use", err)
	}
	l.release()
	if err := CheckDirLock(dir); err != nil {
		t.Errorf("released lock: %v", err)
	}
	// The check dropped its own lock: Start can take it.
	l2, err := lockDir(dir)
	if err != nil {
		t.Errorf("lock after the check: %v", err)
	}
	l2.release()
}

func TestTightenDir(t *testing.T) {
	cases := map[string]struct {
		mode          os.FileMode
		wantMode      os.FileMode
		wantTightened os.FileMode
	}{
		"private":         {mode: 0o700, wantMode: 0o700},
		"open to others":  {mode: 0o755, wantMode: 0o700, wantTightened: 0o755},
		"group writable":  {mode: 0o770, wantMode: 0o700, wantTightened: 0o770},
		"owner read-only": {mode: 0o500, wantMode: 0o500},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, tc.mode); err != nil {
				t.Fatal(err)
			}
			defer os.Chmod(dir, 0o700)
			tightened, err := tightenDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			if tightened != tc.wantTightened {
				t.Errorf("tightened from %#o, want %#o", tightened, tc.wantTightened)
			}
			st, err := os.Stat(dir)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != tc.wantMode {
				t.Errorf("mode %#o, want %#o", st.Mode().Perm(), tc.wantMode)
			}
		})
	}
}

// TestCheckDirLockNotADirectory: a data directory that is a file is for
// EnsureWritableDir to report, not CheckDirLock.
func TestCheckDirLockNotADirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := CheckDirLock(filepath.Join(file, "data")); err != nil {
		t.Errorf("CheckDirLock under a file: %v", err)
	}
}
