package testimages

import (
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// pull fetches ref (with auth, when not nil), its config and its layers.
func pull(ref string, auth authn.Authenticator) (v1.Image, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, err
	}
	opts := []remote.Option{}
	if auth != nil {
		opts = append(opts, remote.WithAuth(auth))
	}
	img, err := remote.Image(r, opts...)
	if err != nil {
		return nil, err
	}
	if _, err := img.ConfigFile(); err != nil {
		return nil, err
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	for _, l := range layers {
		rc, err := l.Compressed()
		if err != nil {
			return nil, err
		}
		rc.Close()
	}
	return img, nil
}

// status is the HTTP status of a registry error, 0 if err is none.
func status(err error) int {
	var te *transport.Error
	if errors.As(err, &te) {
		return te.StatusCode
	}
	return 0
}

func TestServe(t *testing.T) {
	app, err := Static(map[string][]byte{"app": []byte("app")}, "/app")
	if err != nil {
		t.Fatal(err)
	}
	img, err := WithWhiteout(app, "app")
	if err != nil {
		t.Fatal(err)
	}
	host := Serve(t, map[string]v1.Image{"test/app:1": img})
	if !strings.HasPrefix(host, "127.0.0.1:") {
		t.Errorf("registry at %s, want 127.0.0.1:PORT", host)
	}
	got, err := pull(host+"/test/app:1", nil)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	if d, _ := got.Digest(); d != want {
		t.Errorf("pulled %s, want %s", d, want)
	}
	if _, err := pull(host+"/test/app:nonexistent", nil); status(err) != http.StatusNotFound {
		t.Errorf("pulling a tag that does not exist: %v; want a 404", err)
	}
}

func TestRegistryBasicAuth(t *testing.T) {
	app, err := Static(map[string][]byte{"app": []byte("app")}, "/app")
	if err != nil {
		t.Fatal(err)
	}
	r := NewRegistry(WithBasicAuth("user", "secret"))
	defer r.Close()
	ref, err := r.Push("private/app:1", app)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pull(ref, nil); status(err) != http.StatusUnauthorized {
		t.Errorf("anonymous pull: %v; want a 401", err)
	}
	if _, err := pull(ref, &authn.Basic{Username: "user", Password: "wrong"}); status(err) != http.StatusUnauthorized {
		t.Errorf("pull with a wrong password: %v; want a 401", err)
	}
	r.ResetRequests()
	if _, err := pull(ref, &authn.Basic{Username: "user", Password: "secret"}); err != nil {
		t.Errorf("pull with the credentials: %v", err)
	}
	var blobs int
	for _, req := range r.Requests() {
		if strings.HasPrefix(req, "GET /v2/private/app/blobs/") {
			blobs++
		}
	}
	if blobs != 2 { // the config and the one layer
		t.Errorf("%d blob fetches, want 2: %q", blobs, r.Requests())
	}
}

func TestRegistryWithHandler(t *testing.T) {
	app, err := Static(map[string][]byte{"app": []byte("app")}, "/app")
	if err != nil {
		t.Fatal(err)
	}
	var failBlobs atomic.Bool
	r := NewRegistry(WithHandler(func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if failBlobs.Load() && req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/blobs/") {
				http.Error(w, "injected", http.StatusForbidden) // a 5xx would be retried
				return
			}
			h.ServeHTTP(w, req)
		})
	}))
	defer r.Close()
	ref, err := r.Push("test/app:1", app)
	if err != nil {
		t.Fatal(err)
	}
	failBlobs.Store(true)
	if _, err := pull(ref, nil); err == nil {
		t.Error("pull succeeded with every blob fetch failing")
	}
}
