package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// entry is one tar entry of a test layer.
type entry struct {
	name, body, link string
	typ              byte
	mode             int64
	// uid and gid own the entry (0 unless set).
	uid, gid int
	// xattrs are the entry's extended attributes (PAX SCHILY.xattr.*).
	xattrs map[string]string
}

// file, dir, symlink and hardlink build entries.
func file(name, body string) entry {
	return entry{name: name, body: body, typ: tar.TypeReg, mode: 0o644}
}
func dir(name string) entry { return entry{name: name, typ: tar.TypeDir, mode: 0o755} }
func symlink(name, to string) entry {
	return entry{name: name, link: to, typ: tar.TypeSymlink, mode: 0o777}
}
func hardlink(name, to string) entry {
	return entry{name: name, link: to, typ: tar.TypeLink, mode: 0o644}
}

// layerTar returns the uncompressed tar of entries.
func layerTar(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, Size: int64(len(e.body)), ModTime: time.Unix(1700000000, 0), Uid: e.uid, Gid: e.gid}
		for k, v := range e.xattrs {
			if hdr.PAXRecords == nil {
				hdr.PAXRecords = map[string]string{}
			}
			hdr.PAXRecords["SCHILY.xattr."+k] = v
		}
		if e.typ != tar.TypeReg {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			if _, err := io.WriteString(tw, e.body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// layer is a gzip-compressed layer of entries.
func layer(t *testing.T, entries ...entry) v1.Layer {
	t.Helper()
	data := layerTar(t, entries...)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// image builds a linux image for this architecture (or arch, if given)
// from layers, with entrypoint "/bin/app".
func image(t *testing.T, arch string, layers ...v1.Layer) v1.Image {
	t.Helper()
	if arch == "" {
		arch = runtime.GOARCH
	}
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Config.Entrypoint = []string{"/bin/app"}
	cf.Config.Cmd = []string{"--flag"}
	cf.Config.Env = []string{"PATH=/bin"}
	cf.Config.WorkingDir = "/work"
	cf.Config.User = "1000"
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// testRegistry is an in-process registry that counts blob downloads and
// can serve wrong bytes for a blob or require basic auth.
type testRegistry struct {
	// host is "127.0.0.1:port".
	host string

	mu sync.Mutex
	// blobGets counts GETs of each blob digest.
	blobGets map[string]int
	// corrupt maps a blob digest to the bytes served instead.
	corrupt map[string][]byte
	// user and password, if set, are required.
	user, password string
}

// newRegistry starts a registry for the test.
func newRegistry(t *testing.T) *testRegistry {
	r := &testRegistry{blobGets: map[string]int{}, corrupt: map[string][]byte{}}
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		user, password := r.user, r.password
		r.mu.Unlock()
		if user != "" {
			u, p, ok := req.BasicAuth()
			if !ok || u != user || p != password {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
				return
			}
		}
		if i := strings.Index(req.URL.Path, "/blobs/sha256:"); i >= 0 && req.Method == http.MethodGet {
			digest := req.URL.Path[i+len("/blobs/"):]
			r.mu.Lock()
			r.blobGets[digest]++
			bad, isBad := r.corrupt[digest]
			r.mu.Unlock()
			if isBad {
				w.Header().Set("Content-Length", "")
				w.Write(bad)
				return
			}
		}
		inner.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	r.host = strings.TrimPrefix(srv.URL, "http://")
	return r
}

// push writes img to the registry as repo:tag and returns its reference.
func (r *testRegistry) push(t *testing.T, ref string, img v1.Image) name.Reference {
	t.Helper()
	n, err := name.ParseReference(r.host + "/" + ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(n, img); err != nil {
		t.Fatal(err)
	}
	return n
}

// gets returns how many times each blob was downloaded.
func (r *testRegistry) gets() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for k, v := range r.blobGets {
		out[k] = v
	}
	return out
}

// openStore opens a store in a new temp directory.
func openStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// digestOf returns a layer's or image's digest as a string.
func digestOf(t *testing.T, d interface{ Digest() (v1.Hash, error) }) string {
	t.Helper()
	h, err := d.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}

// randomLayer is a gzip-compressed layer holding one file, "data/<seed>",
// of size random (incompressible) bytes: as big on the wire as on disk.
func randomLayer(tb testing.TB, seed uint64, size int) v1.Layer {
	tb.Helper()
	data := make([]byte, size)
	rng := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16)})
	rng.Read(data)
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	tw := tar.NewWriter(zw)
	hdr := &tar.Header{Name: fmt.Sprintf("data/%d", seed), Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(size), ModTime: time.Unix(1700000000, 0)}
	if err := tw.WriteHeader(hdr); err != nil {
		tb.Fatal(err)
	}
	if _, err := tw.Write(data); err != nil {
		tb.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		tb.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		tb.Fatal(err)
	}
	compressed := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(compressed)), nil })
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

// layerDirs returns the names of the directories under l/.
func layerDirs(t *testing.T, s *Store) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(s.dir, layersDir))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// layerDirsOf returns the names of the directories under l/ of img's
// layers.
func layerDirsOf(img *Image) []string {
	var out []string
	for _, l := range img.Layers {
		out = append(out, filepath.Base(filepath.Dir(l)))
	}
	sort.Strings(out)
	return out
}
