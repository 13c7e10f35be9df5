package view

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMissingSubPathTakesTheRootsMode: a subPath that does not exist is
// created with its volume's mode, setgid included, whatever the umask, as
// the kubelet creates it (an emptyDir's is world-writable).
func TestMissingSubPathTakesTheRootsMode(t *testing.T) {
	if err := openat2Probe(); err != nil {
		t.Skip(err)
	}
	root := t.TempDir()
	if err := os.Chmod(root, 0o777|os.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	old := unix.Umask(0o022)
	defer unix.Umask(old)
	h, err := openSource(root, "sub")
	if err != nil {
		t.Fatal(err)
	}
	_ = h.Close()
	fi, err := os.Stat(filepath.Join(root, "sub"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fi.Mode()&(os.ModePerm|os.ModeSetgid), 0o777|os.ModeSetgid; got != want {
		t.Errorf("subPath mode %v, want %v", got, want)
	}
}
