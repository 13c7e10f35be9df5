package testimages

import (
	"crypto/subtle"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Registry is an in-process OCI registry (go-containerregistry's
// pkg/registry, in memory) served over plain HTTP on 127.0.0.1, which
// go-containerregistry and so jobkeeper's pulls reach without TLS (a
// loopback registry). Stop it with Close.
type Registry struct {
	// Host is the registry's address, "127.0.0.1:PORT", the first part of
	// the references of its images.
	Host string

	// server serves the registry.
	server *httptest.Server
	// auth authenticates Push when the registry wants credentials.
	auth authn.Authenticator

	// mu guards requests.
	mu sync.Mutex
	// requests are "METHOD PATH" of the requests served, in order.
	requests []string
}

// RegistryOption configures NewRegistry.
type RegistryOption func(*registryOptions)

// registryOptions are what RegistryOptions set.
type registryOptions struct {
	// user and password, when user is set, are the only credentials the
	// registry accepts (HTTP basic authentication).
	user, password string
	// wrap, when set, wraps the registry's handler.
	wrap func(http.Handler) http.Handler
}

// WithBasicAuth makes the registry answer 401 (with a Basic challenge) to any
// request without these credentials: pulls then need them, as from a private
// registry.
func WithBasicAuth(user, password string) RegistryOption {
	return func(o *registryOptions) { o.user, o.password = user, password }
}

// WithHandler wraps the registry's handler (inside authentication) with
// wrap: tests inject faults with it (a slow or corrupt blob, a 500, a cut
// connection).
func WithHandler(wrap func(http.Handler) http.Handler) RegistryOption {
	return func(o *registryOptions) { o.wrap = wrap }
}

// NewRegistry starts an empty registry on 127.0.0.1.
func NewRegistry(opts ...RegistryOption) *Registry {
	var o registryOptions
	for _, opt := range opts {
		opt(&o)
	}
	r := &Registry{auth: authn.Anonymous}
	var h http.Handler = registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	if o.wrap != nil {
		h = o.wrap(h)
	}
	if o.user != "" {
		r.auth = &authn.Basic{Username: o.user, Password: o.password}
		h = basicAuth(h, o.user, o.password)
	}
	r.server = httptest.NewServer(r.record(h))
	r.Host = strings.TrimPrefix(r.server.URL, "http://")
	return r
}

// Serve starts a registry holding images (by repository and tag relative to
// the registry, e.g. "test/busybox:1"), stopped when t ends, and returns its
// host:port: an image is pulled as HOST/test/busybox:1.
func Serve(t testing.TB, images map[string]v1.Image, opts ...RegistryOption) string {
	t.Helper()
	r := NewRegistry(opts...)
	t.Cleanup(r.Close)
	for ref, img := range images {
		if _, err := r.Push(ref, img); err != nil {
			t.Fatal(err)
		}
	}
	return r.Host
}

// Push uploads img as ref (repository and tag or digest relative to the
// registry, e.g. "test/busybox:1") and returns the full reference to pull
// it by (HOST/test/busybox:1).
func (r *Registry) Push(ref string, img v1.Image) (string, error) {
	full := r.Host + "/" + ref
	parsed, err := name.ParseReference(full)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %w", ref, err)
	}
	if err := remote.Write(parsed, img, remote.WithAuth(r.auth)); err != nil {
		return "", fmt.Errorf("pushing %s: %w", full, err)
	}
	return full, nil
}

// Requests returns "METHOD PATH" of every request served so far (pushes
// included), in order: tests count blob fetches with it.
func (r *Registry) Requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.requests...)
}

// ResetRequests forgets the requests served so far.
func (r *Registry) ResetRequests() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests = nil
}

// Close stops the registry.
func (r *Registry) Close() { r.server.Close() }

// record wraps h to remember each request in r.requests.
func (r *Registry) record(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.requests = append(r.requests, req.Method+" "+req.URL.Path)
		r.mu.Unlock()
		h.ServeHTTP(w, req)
	})
}

// basicAuth wraps h to refuse requests without user and password.
func basicAuth(h http.Handler, user, password string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		u, p, ok := req.BasicAuth()
		if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(user)) != 1 ||
			subtle.ConstantTimeCompare([]byte(p), []byte(password)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="testimages"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
			return
		}
		h.ServeHTTP(w, req)
	})
}
