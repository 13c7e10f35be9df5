package main

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"jobkeeper.dev/jobkeeper/pkg/images"
)

// fakeBinary is what fakeCompile writes: the platform and version, so
// tests can tell the images apart without running the Go toolchain.
func fakeCompile(_ context.Context, _ string, p v1.Platform, version, out string) error {
	return os.WriteFile(out, []byte("binary for "+p.String()+" "+version), 0o755)
}

// runImage runs the command with args and the given compile, and returns
// its output.
func runImage(t *testing.T, compile compileFunc, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := run(context.Background(), args, &out, &out, compile)
	return out.String(), err
}

func TestParsePlatforms(t *testing.T) {
	cases := map[string]struct {
		in      string
		want    []string
		wantErr string
	}{
		"one":             {in: "linux/amd64", want: []string{"linux/amd64"}},
		"several":         {in: "linux/amd64, linux/arm64,linux/arm/v6", want: []string{"linux/amd64", "linux/arm64", "linux/arm/v6"}},
		"arm defaults v7": {in: "linux/arm", want: []string{"linux/arm/v7"}},
		"unknown arch":    {in: "linux/amd65", wantErr: `unknown architecture "amd65"`},
		"not linux":       {in: "windows/amd64", wantErr: "only linux images"},
		"bad arm variant": {in: "linux/arm/v9", wantErr: `unknown arm variant "v9"`},
		"variant not arm": {in: "linux/amd64/v3", wantErr: "only known for arm"},
		"twice":           {in: "linux/arm64,linux/arm64", wantErr: "given twice"},
		"empty":           {in: "", wantErr: "want os/arch"},
		"empty in a list": {in: "linux/amd64,", wantErr: "want os/arch"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := parsePlatforms(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var s []string
			for _, p := range got {
				s = append(s, p.String())
			}
			if diff := cmp.Diff(tc.want, s); diff != "" {
				t.Errorf("platforms (-want +got):\n%s", diff)
			}
		})
	}
}

// TestChartNamesThisImage checks that the default name is the image the
// chart installs, as the rendered manifests show it.
func TestChartNamesThisImage(t *testing.T) {
	chart, err := readChartImage("../..")
	if err != nil {
		t.Fatal(err)
	}
	manifests, err := os.ReadFile("../manifests/jobkeeper.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rendered := regexp.MustCompile(`(?m)^\s+image: (\S+)$`).FindAllStringSubmatch(string(manifests), -1)
	if len(rendered) == 0 {
		t.Fatal("no image in deploy/manifests/jobkeeper.yaml")
	}
	for _, m := range rendered {
		if m[1] != chart.Ref() {
			t.Errorf("the chart installs %s, this builds %s by default", m[1], chart.Ref())
		}
	}
}

// TestBadInput checks that bad flags and a failing build are clear errors
// that leave no file, partial or temporary, behind.
func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	readOnly := filepath.Join(dir, "read-only")
	if err := os.Mkdir(readOnly, 0o555); err != nil {
		t.Fatal(err)
	}
	failing := func(context.Context, string, v1.Platform, string, string) error {
		return errors.New("compiler exploded")
	}
	cases := map[string]struct {
		args    []string
		compile compileFunc
		wantErr string
	}{
		"nothing to do":          {args: nil, wantErr: "nothing to do"},
		"unknown platform":       {args: []string{"-o", filepath.Join(dir, "a.tar"), "-platform", "linux/amd65"}, wantErr: `unknown architecture "amd65"`},
		"two platforms, one tar": {args: []string{"-o", filepath.Join(dir, "a.tar"), "-platform", "linux/amd64,linux/arm64"}, wantErr: "one platform per name"},
		"missing directory":      {args: []string{"-o", filepath.Join(dir, "missing", "a.tar")}, wantErr: "cannot be written"},
		"output is a directory":  {args: []string{"-o", dir}, wantErr: "is a directory"},
		"bad tag":                {args: []string{"-o", filepath.Join(dir, "a.tar"), "-tag", "UPPER/case"}, wantErr: "-tag"},
		"digest as tag":          {args: []string{"-o", filepath.Join(dir, "a.tar"), "-tag", "x@sha256:" + strings.Repeat("a", 64)}, wantErr: "-tag"},
		"failing build":          {args: []string{"-o", filepath.Join(dir, "a.tar")}, compile: failing, wantErr: "compiler exploded"},
		"extra argument":         {args: []string{"-o", filepath.Join(dir, "a.tar"), "x"}, wantErr: "unexpected arguments"},
	}
	if os.Geteuid() != 0 {
		// Root writes anywhere: the mode does not stop it.
		cases["unwritable directory"] = struct {
			args    []string
			compile compileFunc
			wantErr string
		}{args: []string{"-o", filepath.Join(readOnly, "a.tar")}, wantErr: "cannot be written"}
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			compile := tc.compile
			if compile == nil {
				compile = fakeCompile
			}
			_, err := runImage(t, compile, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("err = %v, want %q", err, tc.wantErr)
			}
			left, _ := filepath.Glob(filepath.Join(dir, "*"))
			if diff := cmp.Diff([]string{readOnly}, left); diff != "" {
				t.Errorf("files left behind (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTarball checks the image in the tarball, as `jobkeeper image load`
// stores it: its name, platform, how it runs, its labels, and its files: the
// base's users, no shell, the binary.
func TestTarball(t *testing.T) {
	// The store loads only images this machine can run.
	platform := "linux/" + runtime.GOARCH
	out := filepath.Join(t.TempDir(), "controller.tar")
	stdout, err := runImage(t, fakeCompile, "-o", out, "-tag", "example.com/jk/controller:dev", "-platform", platform, "-version", "v9.9.9", "-source", "https://example.com/jobkeeper")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout, "Wrote "+out+": example.com/jk/controller:dev ("+platform+", image ID sha256:") {
		t.Errorf("output %q", stdout)
	}
	store, err := images.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	loaded, err := store.Load(context.Background(), f)
	if err != nil {
		t.Fatalf("jobkeeper image load's store refuses the tarball: %v", err)
	}
	if len(loaded) != 1 || !cmp.Equal(loaded[0].Names, []string{"example.com/jk/controller:dev"}) || loaded[0].Platform != platform {
		t.Fatalf("loaded %+v", loaded)
	}
	wantConfig := images.Config{Entrypoint: []string{"/jobkeeper-controller"}, Cmd: []string{"controller"}, User: "65532:65532",
		WorkingDir: "/home/nonroot", Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}}
	if diff := cmp.Diff(wantConfig, loaded[0].Config); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}

	img, err := tarball.ImageFromPath(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	wantLabels := map[string]string{
		labelTitle: "jobkeeper-controller", labelVersion: "v9.9.9",
		labelSource: "https://example.com/jobkeeper", labelURL: "https://example.com/jobkeeper",
	}
	for k, v := range wantLabels {
		if cf.Config.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, cf.Config.Labels[k], v)
		}
	}
	if _, ok := cf.Config.Labels[labelRevision]; !ok {
		t.Errorf("no %s label (built in a git checkout)", labelRevision)
	}
	files := imageFiles(t, img)
	if got := string(files["jobkeeper-controller"].body); got != "binary for "+platform+" v9.9.9" {
		t.Errorf("binary %q", got)
	}
	if h := files["jobkeeper-controller"].hdr; h.Mode&0o777 != 0o755 || h.Uid != 0 {
		t.Errorf("binary mode %o uid %d", h.Mode, h.Uid)
	}
	if !strings.Contains(string(files["etc/passwd"].body), "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n") {
		t.Errorf("/etc/passwd:\n%s", files["etc/passwd"].body)
	}
	if h := files["home/nonroot/"].hdr; h == nil || h.Uid != 65532 || h.Mode&0o777 != 0o700 {
		t.Errorf("/home/nonroot: %+v", h)
	}
	if h := files["tmp/"].hdr; h == nil || h.Mode&0o7777 != 0o1777 {
		t.Errorf("/tmp: %+v", h)
	}
	for path := range files {
		if strings.HasPrefix(path, "bin/") || strings.HasPrefix(path, "usr/") || strings.HasPrefix(path, "sbin/") {
			t.Errorf("the image holds %s: the base has no programs", path)
		}
	}

	// The same inputs give the same image.
	again := filepath.Join(t.TempDir(), "again.tar")
	if _, err := runImage(t, fakeCompile, "-o", again, "-tag", "example.com/jk/controller:dev", "-platform", platform, "-version", "v9.9.9", "-source", "https://example.com/jobkeeper"); err != nil {
		t.Fatal(err)
	}
	img2, err := tarball.ImageFromPath(again, nil)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := img.Digest()
	d2, _ := img2.Digest()
	if d1 != d2 {
		t.Errorf("two builds of the same inputs: %s and %s", d1, d2)
	}
}

// tarFile is a file of an image's flattened filesystem.
type tarFile struct {
	hdr  *tar.Header
	body []byte
}

// imageFiles reads every layer of img, by path.
func imageFiles(t *testing.T, img v1.Image) map[string]tarFile {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]tarFile{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(tr)
			files[h.Name] = tarFile{hdr: h, body: body}
		}
		rc.Close()
	}
	return files
}

// TestPush pushes one platform, and an index of two, to an in-process
// registry and reads them back.
func TestPush(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")

	one := host + "/jobkeeper/jobkeeper:one"
	stdout, err := runImage(t, fakeCompile, "-push", one, "-platform", "linux/amd64")
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(mustParse(t, one))
	if err != nil {
		t.Fatalf("reading back %s: %v", one, err)
	}
	digest, _ := img.Digest()
	if !strings.Contains(stdout, "Pushed "+host+"/jobkeeper/jobkeeper@"+digest.String()) {
		t.Errorf("output %q does not name the digest %s", stdout, digest)
	}

	both := host + "/jobkeeper/jobkeeper:multi"
	out := filepath.Join(t.TempDir(), "x.tar")
	if _, err := runImage(t, fakeCompile, "-push", both, "-o", out, "-platform", "linux/amd64,linux/arm64"); err == nil {
		t.Errorf("-o with two platforms: no error")
	}
	if _, err := runImage(t, fakeCompile, "-push", both, "-platform", "linux/amd64,linux/arm64"); err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(mustParse(t, both))
	if err != nil {
		t.Fatalf("reading back %s: %v", both, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, d := range m.Manifests {
		platforms = append(platforms, d.Platform.String())
		arch, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(imageFiles(t, arch)["jobkeeper-controller"].body); got != "binary for "+d.Platform.String()+" v0.1.0" {
			t.Errorf("%s holds %q", d.Platform, got)
		}
	}
	if diff := cmp.Diff([]string{"linux/amd64", "linux/arm64"}, platforms); diff != "" {
		t.Errorf("index platforms (-want +got):\n%s", diff)
	}
}

// TestBuildsTheControllerBinary builds the real image for this machine and
// checks the binary in it: static (no program interpreter), and running it
// prints the version stamped in.
func TestBuildsTheControllerBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds jobkeeper-controller with CGO_ENABLED=0")
	}
	out := filepath.Join(t.TempDir(), "controller.tar")
	if _, err := runImage(t, goCompile, "-o", out, "-version", "v0.0.1-test"); err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	body := imageFiles(t, img)["jobkeeper-controller"].body
	bin := filepath.Join(t.TempDir(), "jobkeeper-controller")
	if err := os.WriteFile(bin, body, 0o755); err != nil {
		t.Fatal(err)
	}
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the binary has a program interpreter: it is not static")
		}
	}
	if runtime.GOOS == "linux" {
		got, err := exec.Command(bin, "version").CombinedOutput()
		if err != nil || !strings.Contains(string(got), "v0.0.1-test") {
			t.Errorf("jobkeeper-controller version: %q, %v", got, err)
		}
	}
}

// mustParse parses ref or fails the test.
func mustParse(t *testing.T, ref string) name.Reference {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
