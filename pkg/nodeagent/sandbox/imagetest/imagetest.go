// Package imagetest builds tiny container images for tests of the sandbox
// and the process runtime: unpacked layer directories, as package images
// gives them, holding one statically linked program (testdata/tool, built
// once per machine and Go version with CGO_ENABLED=0) and an overlayfs
// whiteout. Nothing of the host is in them.
package imagetest

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// toolSource is the program of the images.
//
//go:embed testdata/tool/main.go
var toolSource []byte

// Files of the base layer the tests look for.
const (
	// Passwd is the base layer's /etc/passwd: root and app (1000:1000,
	// home /home/app).
	Passwd = "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\n"
	// Group is the base layer's /etc/group: app is also in staff (50).
	Group = "root:x:0:\napp:x:1000:\nstaff:x:50:app\n"
	// HostsLink is where the base layer's /etc/hosts points (a directory
	// the image does not have), as some images link it.
	HostsLink = "/run/jobkeeper-hosts"
)

var (
	// buildOnce guards tool and buildErr.
	buildOnce sync.Once
	// tool is the built program's path.
	tool string
	// buildErr is why it could not be built.
	buildErr error
)

// Tool returns the path of the image's program, built on first use and
// cached in the system's temporary directory.
func Tool(tb testing.TB) string {
	tb.Helper()
	buildOnce.Do(func() { tool, buildErr = build() })
	if buildErr != nil {
		tb.Fatalf("building the test image's program: %v", buildErr)
	}
	return tool
}

// build compiles the program unless a build of this source with this Go
// version is cached.
func build() (string, error) {
	sum := sha256.Sum256(append(append([]byte{}, toolSource...), goruntime.Version()...))
	dir := filepath.Join(os.TempDir(), "jobkeeper-imagetest-"+hex.EncodeToString(sum[:8]))
	out := filepath.Join(dir, "tool")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	src, err := os.MkdirTemp(dir, "src-")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.RemoveAll(src) }()
	if err := os.WriteFile(filepath.Join(src, "main.go"), toolSource, 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module jobkeeperimagetool\n\ngo 1.22\n"), 0o644); err != nil {
		return "", err
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(goruntime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(goBin, "build", "-trimpath", "-o", filepath.Join(src, "tool"), ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", &buildError{err: err, output: string(b)}
	}
	// Readable by any user: tests may run sandboxes in user namespaces.
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	return out, os.Rename(filepath.Join(src, "tool"), out)
}

// buildError is a failed go build with its output.
type buildError struct {
	// err is go build's exit.
	err error
	// output is what it printed.
	output string
}

// Error implements error.
func (e *buildError) Error() string { return e.err.Error() + ": " + e.output }

// Layers writes a two-layer image under dir and returns its layer
// directories, bottom first:
//
//	base: /bin/tool, /etc/passwd (Passwd), /etc/group (Group),
//	      /etc/gone ("gone"), /etc/hosts -> HostsLink, /tmp (1777),
//	      /home/app
//	top:  a whiteout of /etc/gone, /etc/added ("added")
//
// The whiteout is a 0/0 character device, which unprivileged users may
// create since Linux 5.8.
func Layers(tb testing.TB, dir string) []string {
	tb.Helper()
	base, top := filepath.Join(dir, "base"), filepath.Join(dir, "top")
	b, err := os.ReadFile(Tool(tb))
	if err != nil {
		tb.Fatal(err)
	}
	for _, d := range []string{"bin", "etc", "tmp", "home/app"} {
		mkdir(tb, filepath.Join(base, d))
	}
	mkdir(tb, filepath.Join(top, "etc"))
	write(tb, filepath.Join(base, "bin/tool"), string(b), 0o755)
	write(tb, filepath.Join(base, "etc/passwd"), Passwd, 0o644)
	write(tb, filepath.Join(base, "etc/group"), Group, 0o644)
	write(tb, filepath.Join(base, "etc/gone"), "gone", 0o644)
	if err := os.Symlink(HostsLink, filepath.Join(base, "etc/hosts")); err != nil {
		tb.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(base, "tmp"), 0o1777); err != nil {
		tb.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(top, "etc/gone"), unix.S_IFCHR|0o000, 0); err != nil {
		tb.Fatalf("creating a whiteout: %v", err)
	}
	write(tb, filepath.Join(top, "etc/added"), "added", 0o644)
	return []string{base, top}
}

// mkdir creates a directory and its parents.
func mkdir(tb testing.TB, p string) {
	tb.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		tb.Fatal(err)
	}
}

// write creates a file.
func write(tb testing.TB, p, content string, mode os.FileMode) {
	tb.Helper()
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		tb.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		tb.Fatal(err)
	}
}
