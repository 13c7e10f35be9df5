package testimages

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func TestParseLdd(t *testing.T) {
	out := "\tlinux-vdso.so.1 (0x00007ffd8a1f2000)\n" +
		"\tlibcurl.so.4 => /lib/x86_64-linux-gnu/libcurl.so.4 (0x00007f0f9c0a0000)\n" +
		"\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f0f9be00000)\n" +
		"\t/lib64/ld-linux-x86-64.so.2 (0x00007f0f9c1a0000)\n"
	got, err := parseLdd("curl", []byte(out))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/lib/x86_64-linux-gnu/libcurl.so.4", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"}
	if !slices.Equal(got, want) {
		t.Errorf("parseLdd: %q, want %q", got, want)
	}
	_, err = parseLdd("curl", []byte("\tlibnghttp2.so.14 => not found\n"))
	if err == nil || !strings.Contains(err.Error(), "libnghttp2.so.14") {
		t.Errorf("a missing library: %v, want an error naming it", err)
	}
}

// TestHostPrograms copies this machine's ls into an empty root and runs it
// there (as root, chrooted): the libraries and the loader came along.
func TestHostPrograms(t *testing.T) {
	if _, err := exec.LookPath("ldd"); err != nil {
		t.Skip("no ldd on this machine")
	}
	ls, err := exec.LookPath("ls")
	if err != nil {
		t.Skip("no ls on this machine")
	}
	files, err := HostPrograms(HostProgram{Source: ls, Path: "usr/local/bin/ls"})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 3 {
		t.Fatalf("HostPrograms(ls): %d files, want ls, libc and the loader at least", len(files))
	}
	if _, err := HostPrograms(HostProgram{Source: "/nonexistent", Path: "x"}); err == nil {
		t.Error("HostPrograms of a missing program succeeded")
	}
	if os.Getuid() != 0 {
		t.Skip("running the copy needs chroot (root)")
	}
	root := t.TempDir()
	for _, f := range files {
		p := filepath.Join(root, f.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f.Data, f.Mode.Perm()); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("/usr/local/bin/ls", "/usr/local/bin")
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ls" {
		t.Errorf("ls in a root holding only what HostPrograms gave: %v: %q", err, out)
	}
}
