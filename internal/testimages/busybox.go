package testimages

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// DefaultBusybox is where Debian's busybox-static package puts its binary.
const DefaultBusybox = "/bin/busybox"

// ErrNoBusybox is wrapped by the errors of FindBusybox and Busybox when
// there is no usable static busybox: tests skip on it.
var ErrNoBusybox = errors.New("no static busybox")

// Label keys the stand-ins carry.
const (
	// LabelStandInFor names the upstream image a stand-in replaces.
	LabelStandInFor = "dev.jobkeeper.testimages.stand-in-for"
	// LabelSource says what a stand-in was built from.
	LabelSource = "dev.jobkeeper.testimages.source"
)

// FindBusybox returns the path of a static busybox: path if not empty, else
// $JOBKEEPER_TEST_BUSYBOX if set, else DefaultBusybox. An error wrapping
// ErrNoBusybox says how to get one when that file is missing or is not a
// statically linked ELF executable of this machine's architecture.
func FindBusybox(path string) (string, error) {
	if path == "" {
		path = os.Getenv("JOBKEEPER_TEST_BUSYBOX")
	}
	if path == "" {
		path = DefaultBusybox
	}
	if _, err := staticArch(path); err != nil {
		return "", fmt.Errorf("%w: %v; %s", ErrNoBusybox, err, busyboxHint)
	}
	return path, nil
}

// Busybox is a one-layer stand-in for upstream's busybox e2e image
// (registry.k8s.io/e2e-test-images/busybox, itself Docker's busybox image)
// built from the static busybox binary at busyboxPath (Debian's
// busybox-static: `apt-get install busybox-static`). Like upstream's, it
// holds /bin/busybox, a link for each applet (at the path `busybox
// --list-full` gives, and in /bin as upstream has them all, as symbolic links
// to /bin/busybox), /etc/passwd and /etc/group (root, nobody), /tmp (1777),
// /root, /home, /dev, /var, and runs `sh` by default (Cmd ["sh"], no
// Entrypoint) with Docker's default PATH. The image's architecture is the
// binary's.
func Busybox(busyboxPath string) (v1.Image, error) {
	arch, err := staticArch(busyboxPath)
	if err != nil {
		return nil, fmt.Errorf("%w: %v; %s", ErrNoBusybox, err, busyboxHint)
	}
	binary, err := os.ReadFile(busyboxPath)
	if err != nil {
		return nil, fmt.Errorf("reading busybox: %w", err)
	}
	applets, version, err := busyboxApplets(busyboxPath)
	if err != nil {
		return nil, err
	}
	files := append(rootDirs(), usersAndGroups()...)
	files = append(files, Regular("bin/busybox", 0o755, binary))
	files = append(files, appletLinks(applets)...)
	layer, err := Layer(files...)
	if err != nil {
		return nil, fmt.Errorf("building the busybox layer: %w", err)
	}
	return Build(Config{
		Cmd:          []string{"sh"},
		Architecture: arch,
		Labels: map[string]string{
			LabelStandInFor: BusyboxImage,
			LabelSource:     version,
		},
	}, layer)
}

// busyboxApplets runs `busybox --list-full` and `busybox --help`: the applets'
// paths (relative to the root) and the version ("BusyBox v1.35.0 (Debian
// 1:1.35.0-4+deb12u1+b1)").
func busyboxApplets(busybox string) (applets []string, version string, err error) {
	out, err := exec.Command(busybox, "--list-full").Output()
	if err != nil {
		return nil, "", fmt.Errorf("listing busybox's applets (%s --list-full): %w", busybox, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if a := strings.TrimSpace(sc.Text()); a != "" {
			applets = append(applets, clean(a))
		}
	}
	if len(applets) == 0 {
		return nil, "", fmt.Errorf("%s --list-full lists no applet", busybox)
	}
	help, err := exec.Command(busybox, "--help").Output()
	if err != nil {
		return nil, "", fmt.Errorf("asking busybox its version (%s --help): %w", busybox, err)
	}
	// "BusyBox v1.35.0 (Debian 1:1.35.0-4+deb12u1+b1) multi-call binary."
	version, _, _ = strings.Cut(string(help), "\n")
	version = strings.TrimSuffix(strings.TrimSpace(version), " multi-call binary.")
	return applets, version, nil
}

// appletLinks are the symbolic links to bin/busybox for applets (paths
// relative to the root): each at its own path, and in bin/ when that is
// elsewhere, relative so that they resolve the same inside and outside the
// image's root.
func appletLinks(applets []string) []File {
	seen := map[string]bool{"bin/busybox": true}
	var links []File
	add := func(p string) {
		if seen[p] {
			return
		}
		seen[p] = true
		target := "busybox"
		if path.Dir(p) != "bin" {
			target = strings.Repeat("../", strings.Count(p, "/")) + "bin/busybox"
		}
		links = append(links, Symlink(p, target))
	}
	for _, a := range applets {
		add(a)
	}
	for _, a := range applets {
		add(path.Join("bin", path.Base(a)))
	}
	return links
}

// busyboxHint is what an error about a missing or unusable busybox tells
// the user to do.
const busyboxHint = "install Debian's busybox-static (apt-get install busybox-static: /bin/busybox), or pass the path of a static busybox"

// staticArch returns the GOARCH of the statically linked ELF executable at
// p, or an error saying why it will not run alone in an image.
func staticArch(p string) (string, error) {
	f, err := elf.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%s does not exist", p)
	}
	if err != nil {
		return "", fmt.Errorf("%s is not an ELF executable: %w", p, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return "", fmt.Errorf("%s is dynamically linked: its libraries would not be in the image", p)
		}
	}
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return "", fmt.Errorf("%s is an ELF %v, not an executable", p, f.Type)
	}
	arch, ok := map[elf.Machine]string{
		elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64", elf.EM_386: "386", elf.EM_ARM: "arm",
		elf.EM_PPC64: "ppc64le", elf.EM_S390: "s390x", elf.EM_RISCV: "riscv64",
	}[f.Machine]
	if !ok {
		return "", fmt.Errorf("%s is for %v, an architecture this package does not name", p, f.Machine)
	}
	return arch, nil
}

// rootDirs are the directories of upstream's busybox image's root: tmp
// sticky and world-writable, root private.
func rootDirs() []File {
	return []File{
		Dir("bin", 0o755), Dir("dev", 0o755), Dir("etc", 0o755), Dir("home", 0o755),
		Dir("root", 0o700), {Path: "tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
		Dir("usr", 0o755), Dir("usr/bin", 0o755), Dir("usr/sbin", 0o755), Dir("sbin", 0o755),
		Dir("var", 0o755),
	}
}

// usersAndGroups are /etc/passwd and /etc/group with root and nobody (uid
// and gid 65534), the accounts of upstream's busybox image that tests use.
func usersAndGroups() []File {
	return []File{
		Regular("etc/passwd", 0o644, []byte(
			"root:x:0:0:root:/root:/bin/sh\n"+
				"nobody:x:65534:65534:nobody:/home:/bin/false\n")),
		Regular("etc/group", 0o644, []byte(
			"root:x:0:\n"+
				"nobody:x:65534:\n")),
	}
}
