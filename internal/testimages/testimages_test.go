package testimages

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// entry is what a test checks of a tar entry.
type entry struct {
	Type byte
	Mode int64
	Link string
	Data string
}

// tarEntries reads an uncompressed layer (or flattened image) into its
// entries' names, in order, and the entries by name.
func tarEntries(t *testing.T, rc io.ReadCloser) ([]string, map[string]entry) {
	t.Helper()
	defer rc.Close()
	var names []string
	byName := map[string]entry{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return names, byName
		}
		if err != nil {
			t.Fatalf("reading the tar: %v", err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("reading %s: %v", hdr.Name, err)
		}
		names = append(names, hdr.Name)
		byName[hdr.Name] = entry{Type: hdr.Typeflag, Mode: hdr.Mode, Link: hdr.Linkname, Data: string(data)}
	}
}

// layerEntries reads the n-th layer of img.
func layerEntries(t *testing.T, img v1.Image, n int) ([]string, map[string]entry) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if n >= len(layers) {
		t.Fatalf("the image has %d layers, want layer %d", len(layers), n)
	}
	rc, err := layers[n].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	return tarEntries(t, rc)
}

func TestLayer(t *testing.T) {
	layer, err := Layer(
		Hardlink("bin/[", "bin/test"),
		Regular("/bin/test", 0o755, []byte("binary")),
		Symlink("usr/bin/env", "../../bin/test"),
		Whiteout("/etc/old"),
		Opaque("var/cache"),
		File{Path: "tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
	)
	if err != nil {
		t.Fatal(err)
	}
	mt, err := layer.MediaType()
	if err != nil || mt != types.OCILayer {
		t.Errorf("media type %q, %v; want %q", mt, err, types.OCILayer)
	}
	rc, err := layer.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	names, byName := tarEntries(t, rc)
	wantNames := []string{
		"bin/", "bin/test", "etc/", "etc/.wh.old", "tmp/", "usr/", "usr/bin/", "usr/bin/env",
		"var/", "var/cache/", "var/cache/.wh..wh..opq",
		"bin/[", // hard links last, after their targets
	}
	if diff := cmp.Diff(wantNames, names); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
	want := map[string]entry{
		"bin/test":               {Type: tar.TypeReg, Mode: 0o755, Data: "binary"},
		"bin/[":                  {Type: tar.TypeLink, Mode: 0o755, Link: "bin/test"},
		"usr/bin/env":            {Type: tar.TypeSymlink, Mode: 0o777, Link: "../../bin/test"},
		"etc/.wh.old":            {Type: tar.TypeReg, Mode: 0o644},
		"var/cache/.wh..wh..opq": {Type: tar.TypeReg, Mode: 0o644},
		"tmp/":                   {Type: tar.TypeDir, Mode: 0o1777},
		"usr/":                   {Type: tar.TypeDir, Mode: 0o755},
	}
	for name, w := range want {
		if diff := cmp.Diff(w, byName[name]); diff != "" {
			t.Errorf("entry %s (-want +got):\n%s", name, diff)
		}
	}
}

func TestLayerRefuses(t *testing.T) {
	cases := map[string][]File{
		"two entries for a path":  {Regular("a", 0o644, nil), Regular("/a", 0o644, nil)},
		"a path leaving the root": {Regular("../a", 0o644, nil)},
		"the root itself":         {Dir("/", 0o755)},
		"a hard link to nothing":  {Hardlink("a", "b")},
		"a hard link to a dir":    {Dir("b", 0o755), Hardlink("a", "b")},
		"a symlink to nothing":    {{Path: "a", Mode: fs.ModeSymlink}},
		"a device":                {{Path: "a", Mode: fs.ModeDevice}},
	}
	for name, files := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := Layer(files...); err == nil {
				t.Error("Layer succeeded, want an error")
			}
		})
	}
}

func TestStaticWithWhiteout(t *testing.T) {
	base, err := Static(map[string][]byte{"app": []byte("app"), "data/a": []byte("a"), "data/b": []byte("b")}, "/app", "--flag")
	if err != nil {
		t.Fatal(err)
	}
	img, err := WithWhiteout(base, "data/a")
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	wantConfig := v1.Config{Entrypoint: []string{"/app", "--flag"}, Env: []string{"PATH=" + DefaultPath}}
	if diff := cmp.Diff(wantConfig, cf.Config); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH || len(cf.RootFS.DiffIDs) != 2 {
		t.Errorf("platform %s/%s with %d diff IDs, want linux/%s with 2", cf.OS, cf.Architecture, len(cf.RootFS.DiffIDs), runtime.GOARCH)
	}
	if mt, err := img.MediaType(); err != nil || mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %q, %v; want %q", mt, err, types.OCIManifestSchema1)
	}
	names, _ := layerEntries(t, img, 1)
	if diff := cmp.Diff([]string{"data/", "data/.wh.a"}, names); diff != "" {
		t.Errorf("the whiteout layer (-want +got):\n%s", diff)
	}
	// Flattened as a runtime unpacks it, data/a is gone and data/b stays.
	_, flat := tarEntries(t, mutate.Extract(img))
	if _, ok := flat["data/a"]; ok {
		t.Error("data/a is still in the flattened image")
	}
	if flat["data/b"].Data != "b" || flat["app"].Data != "app" {
		t.Errorf("flattened image lost data/b or app: %v", flat)
	}

	// WithConfig keeps the layers and replaces the config.
	shell, err := WithConfig(img, Config{Entrypoint: []string{"/bin/sh", "-c"}, Env: []string{"PATH=/bin", "A=b"}, User: "nobody"})
	if err != nil {
		t.Fatal(err)
	}
	scf, err := shell.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	wantShell := v1.Config{Entrypoint: []string{"/bin/sh", "-c"}, Env: []string{"PATH=/bin", "A=b"}, User: "nobody"}
	if diff := cmp.Diff(wantShell, scf.Config); diff != "" {
		t.Errorf("WithConfig's config (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(cf.RootFS, scf.RootFS); diff != "" {
		t.Errorf("WithConfig's rootfs (-want +got):\n%s", diff)
	}

	// The same inputs give the same image.
	again, err := Static(map[string][]byte{"data/b": []byte("b"), "app": []byte("app"), "data/a": []byte("a")}, "/app", "--flag")
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := base.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Errorf("two builds of one image: %s and %s", d1, d2)
	}
}

// busybox returns the static busybox to test with, or skips the test.
func busybox(t *testing.T) string {
	t.Helper()
	return BusyboxOrSkip(t)
}

func TestBusybox(t *testing.T) {
	img, err := Busybox(busybox(t))
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"sh"}, cf.Config.Cmd); diff != "" || len(cf.Config.Entrypoint) != 0 {
		t.Errorf("Cmd (-want +got):\n%s; Entrypoint %q, want none", diff, cf.Config.Entrypoint)
	}
	if diff := cmp.Diff([]string{"PATH=" + DefaultPath}, cf.Config.Env); diff != "" {
		t.Errorf("Env (-want +got):\n%s", diff)
	}
	if cf.Config.Labels[LabelStandInFor] != BusyboxImage || !strings.HasPrefix(cf.Config.Labels[LabelSource], "BusyBox v") {
		t.Errorf("labels %v", cf.Config.Labels)
	}
	if layers, _ := img.Layers(); len(layers) != 1 {
		t.Errorf("%d layers, want 1", len(layers))
	}
	_, byName := layerEntries(t, img, 0)
	checks := map[string]entry{
		"bin/busybox": {Type: tar.TypeReg, Mode: 0o755},
		"bin/sh":      {Type: tar.TypeSymlink, Mode: 0o777, Link: "busybox"},
		"bin/env":     {Type: tar.TypeSymlink, Mode: 0o777, Link: "busybox"},
		"usr/bin/env": {Type: tar.TypeSymlink, Mode: 0o777, Link: "../../bin/busybox"},
		"bin/[[":      {Type: tar.TypeSymlink, Mode: 0o777, Link: "busybox"},
		"tmp/":        {Type: tar.TypeDir, Mode: 0o1777},
		"root/":       {Type: tar.TypeDir, Mode: 0o700},
		"etc/passwd":  {Type: tar.TypeReg, Mode: 0o644},
		"etc/group":   {Type: tar.TypeReg, Mode: 0o644},
	}
	for name, want := range checks {
		got := byName[name]
		got.Data = ""
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("entry %s (-want +got):\n%s", name, diff)
		}
	}
	for _, line := range []string{"root:x:0:0:", "nobody:x:65534:65534:"} {
		if !strings.Contains(byName["etc/passwd"].Data, line) {
			t.Errorf("/etc/passwd lacks %q:\n%s", line, byName["etc/passwd"].Data)
		}
	}
	if !strings.Contains(byName["etc/group"].Data, "nobody:x:65534:") {
		t.Errorf("/etc/group lacks nobody:\n%s", byName["etc/group"].Data)
	}

	// Unpacked, the image's sh is busybox's (dash has no [[), through the
	// relative links.
	root := t.TempDir()
	unpack(t, img, root)
	out, err := exec.Command(filepath.Join(root, "usr/bin/env"), "sh", "-c", `[[ -r /etc/passwd ]] && echo "ok $((6*7))"`).CombinedOutput()
	if err != nil || string(out) != "ok 42\n" {
		t.Errorf("the unpacked image's sh: %q, %v; want \"ok 42\"", out, err)
	}
}

// unpack writes img's regular files, directories and symbolic links under
// root (enough to run busybox from it).
func unpack(t *testing.T, img v1.Image, root string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(root, hdr.Name)
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeSymlink:
			err = os.Symlink(hdr.Linkname, p)
		case tar.TypeReg:
			var data []byte
			if data, err = io.ReadAll(tr); err == nil {
				err = os.WriteFile(p, data, fs.FileMode(hdr.Mode).Perm())
			}
		}
		if err != nil {
			t.Fatalf("unpacking %s: %v", hdr.Name, err)
		}
	}
}

func TestFindBusyboxRefuses(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "busybox")
	_, err := FindBusybox(missing)
	if !errors.Is(err, ErrNoBusybox) || !strings.Contains(err.Error(), "apt-get install busybox-static") {
		t.Errorf("a missing busybox: %v; want ErrNoBusybox saying how to install it", err)
	}
	notELF := filepath.Join(t.TempDir(), "busybox")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := FindBusybox(notELF); !errors.Is(err, ErrNoBusybox) || !strings.Contains(err.Error(), "not an ELF") {
		t.Errorf("a script: %v; want ErrNoBusybox, not an ELF executable", err)
	}
	// The go command is a static Go binary; a dynamically linked one is
	// refused.
	for _, dynamic := range []string{"/bin/ls", "/usr/bin/ls", "/bin/sh"} {
		if arch, err := staticArch(dynamic); err != nil || arch == "" {
			if _, err := FindBusybox(dynamic); !errors.Is(err, ErrNoBusybox) || !strings.Contains(err.Error(), "dynamically linked") {
				t.Errorf("%s: %v; want ErrNoBusybox, dynamically linked", dynamic, err)
			}
			return
		}
	}
	t.Log("no dynamically linked /bin/ls or /bin/sh to test with")
}

// pauseBinary is the pause program, built once for the tests that need it.
var pauseBinary struct {
	path string
	err  error
	once bool
}

// pause returns the path of the pause program, building it the first time.
func pause(t *testing.T) string {
	t.Helper()
	if !pauseBinary.once {
		pauseBinary.once = true
		dir, err := os.MkdirTemp("", "testimages-pause-")
		if err != nil {
			t.Fatal(err)
		}
		pauseBinary.path, pauseBinary.err = BuildPause(dir)
	}
	if pauseBinary.err != nil {
		t.Fatal(pauseBinary.err)
	}
	return pauseBinary.path
}

func TestMain(m *testing.M) {
	code := m.Run()
	if pauseBinary.path != "" {
		os.RemoveAll(filepath.Dir(pauseBinary.path))
	}
	os.Exit(code)
}

func TestPause(t *testing.T) {
	p := pause(t)
	img, err := Pause(p)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"/pause"}, cf.Config.Entrypoint); diff != "" || cf.Config.Cmd != nil || cf.Config.User != PauseUser {
		t.Errorf("Entrypoint (-want +got):\n%s; Cmd %q (want none), User %q (want %q)", diff, cf.Config.Cmd, cf.Config.User, PauseUser)
	}
	names, byName := layerEntries(t, img, 0)
	if diff := cmp.Diff([]string{"pause"}, names); diff != "" || byName["pause"].Mode != 0o755 {
		t.Errorf("layer entries (-want +got):\n%s; mode %o", diff, byName["pause"].Mode)
	}

	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		cmd := exec.Command(p)
		stderr := &syncBuffer{}
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		// Signalled at once, before it installed its handlers, it would die
		// of the signal: wait for its first word.
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(stderr.String(), "first process") && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		select {
		case err := <-done:
			t.Fatalf("pause exited before a signal: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("pause after %v: %v, want exit 0; stderr %q", sig, err, stderr)
			}
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("pause still running 10s after %v", sig)
		}
	}
}

// syncBuffer is a strings.Builder safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestStandIns(t *testing.T) {
	nnp, err := BuildNNP(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(nnp).Output(); err != nil || string(out) != fmt.Sprintf("Effective uid: %d\n", os.Geteuid()) {
		t.Errorf("nnp printed %q (%v)", out, err)
	}
	// Any static program stands in for agnhost's here, and any dynamic
	// one (this machine's ls) for the tools.
	porter := t.TempDir()
	for _, name := range []string{"localhost.crt", "localhost.key"} {
		if err := os.WriteFile(filepath.Join(porter, name), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	src := Sources{Busybox: busybox(t), Pause: pause(t), NNP: nnp, Agnhost: pause(t), AgnhostPorterDir: porter}
	ls, lsErr := exec.LookPath("ls")
	if _, err := exec.LookPath("ldd"); err == nil && lsErr == nil {
		src.AgnhostTools = []HostProgram{{Source: ls, Path: "usr/bin/curl"}, {Source: ls, Path: "bin/sh"}}
		src.GlibcDNSTools = []HostProgram{{Source: ls, Path: "usr/bin/dig"}}
	}
	images, err := StandIns(src)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for n := range images {
		names = append(names, n)
	}
	slices.Sort(names)
	want := []string{AgnhostPrevImage, AgnhostImage, BusyboxImage, GlibcDNSImage, NginxImage, NginxNewImage, NonewprivsImage, NonRootImage, PauseImage}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("stand-ins (-want +got):\n%s", diff)
	}
	config := func(name string) v1.Config {
		cf, err := images[name].ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Config.Labels[LabelStandInFor] != name && !(name == NginxNewImage && cf.Config.Labels[LabelStandInFor] == NginxImage) &&
			!(name == AgnhostPrevImage && cf.Config.Labels[LabelStandInFor] == AgnhostImage) {
			t.Errorf("%s: labels %v", name, cf.Config.Labels)
		}
		return cf.Config
	}
	// flat is the image's file system, its layers applied in order.
	flat := func(name string) map[string]entry {
		_, byName := tarEntries(t, mutate.Extract(images[name]))
		return byName
	}

	if cfg := config(NonewprivsImage); !slices.Equal(cfg.Cmd, []string{"nnp"}) || cfg.User != "" {
		t.Errorf("nonewprivs: Cmd %q User %q, want [nnp] and none", cfg.Cmd, cfg.User)
	}
	if got := flat(NonewprivsImage)["usr/local/bin/nnp"]; got.Type != tar.TypeReg || got.Mode != 0o4755 {
		t.Errorf("nonewprivs: usr/local/bin/nnp type %c mode %o, want a set-user-ID 04755 file", got.Type, got.Mode)
	}
	if cfg := config(NonRootImage); cfg.User != "1234" || !slices.Equal(cfg.Cmd, []string{"sh"}) {
		t.Errorf("nonroot: User %q Cmd %q, want 1234 and [sh]", cfg.User, cfg.Cmd)
	}
	if cfg := config(AgnhostImage); !slices.Equal(cfg.Entrypoint, []string{"/agnhost"}) || !slices.Equal(cfg.Cmd, []string{"pause"}) {
		t.Errorf("agnhost: Entrypoint %q Cmd %q, want [/agnhost] [pause]", cfg.Entrypoint, cfg.Cmd)
	}
	fs := flat(AgnhostImage)
	if got := fs["agnhost"]; got.Type != tar.TypeReg || got.Mode != 0o755 {
		t.Errorf("agnhost: /agnhost type %c mode %o", got.Type, got.Mode)
	}
	if got := fs["agnhost-2"]; got.Type != tar.TypeSymlink || got.Link != "agnhost" {
		t.Errorf("agnhost: /agnhost-2 %+v, want a link to agnhost", got)
	}
	for _, name := range []string{"localhost.crt", "localhost.key"} {
		if got := fs[name]; got.Type != tar.TypeReg || got.Data != name {
			t.Errorf("agnhost: /%s %+v, want porter's file", name, got)
		}
	}
	if src.AgnhostTools != nil {
		for _, p := range []string{"usr/bin/curl", "bin/sh"} {
			if got := fs[p]; got.Type != tar.TypeReg {
				t.Errorf("agnhost: /%s %+v, want the tool copied over busybox's", p, got)
			}
		}
		if got := flat(GlibcDNSImage)["usr/bin/dig"]; got.Type != tar.TypeReg {
			t.Errorf("glibc-dns-testing: /usr/bin/dig %+v, want the tool", got)
		}
	}
	if cfg := config(NginxImage); !slices.Equal(cfg.Cmd, NginxCmd) {
		t.Errorf("nginx: Cmd %q", cfg.Cmd)
	}
	if got := flat(NginxImage)["usr/share/nginx/html/index.html"]; !strings.Contains(got.Data, "Welcome to nginx!") {
		t.Errorf("nginx: index.html %+v", got)
	}
	for file, line := range map[string]string{
		"etc/passwd": "user-defined-in-image:x:1000:1000:",
		"etc/group":  "group-defined-in-image:x:50000:user-defined-in-image\n",
	} {
		if !strings.Contains(fs[file].Data, line) || !strings.Contains(fs[file].Data, "nobody:x:65534:") {
			t.Errorf("agnhost: /%s lacks %q or nobody:\n%s", file, line, fs[file].Data)
		}
	}
}
