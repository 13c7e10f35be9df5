package images

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"

	"jobkeeper.dev/jobkeeper/internal/testimages"
)

// waitFor is how long these tests wait for what should happen at once.
const waitFor = 10 * time.Second

func TestPullStalledRegistryTimesOut(t *testing.T) {
	big := randomLayer(t, 20, 1<<20)
	img, err := testimages.Build(testimages.Config{}, big)
	if err != nil {
		t.Fatal(err)
	}
	var stalling atomic.Bool
	stalling.Store(true)
	// The layer sends 64 KiB, then nothing; the manifest of test/quiet
	// sends nothing at all.
	stallManifest := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/test/quiet/manifests/1") {
				<-req.Context().Done()
				return
			}
			h.ServeHTTP(w, req)
		})
	}
	stall := stallBlob(digestOf(t, big), 64<<10, &stalling, make(chan struct{}))
	host := testimages.Serve(t, map[string]v1.Image{"test/stall:1": img, "test/quiet:1": img},
		testimages.WithHandler(func(h http.Handler) http.Handler { return stall(stallManifest(h)) }))
	cases := map[string]struct {
		ref, want string
	}{
		"mid-layer": {
			ref:  host + "/test/stall:1",
			want: "no progress for 200ms pulling layer " + digestOf(t, big) + " of " + host + "/test/stall:1",
		},
		"manifest": {
			ref:  host + "/test/quiet:1",
			want: "no progress for 200ms pulling the manifest of " + host + "/test/quiet:1",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := openStore(t)
			start := time.Now()
			_, err := s.Pull(context.Background(), tc.ref, PullOptions{ProgressTimeout: 200 * time.Millisecond})
			if err == nil || err.Error() != tc.want {
				t.Errorf("Pull = %v, want %q", err, tc.want)
			}
			if d := time.Since(start); d > waitFor {
				t.Errorf("Pull took %v", d)
			}
			assertNoPartialLayers(t, s)
		})
	}
}

// gateBlob wraps a registry handler: a GET of the blob digest closes
// entered (once) and waits until release is closed or the client goes
// away; it closes gone (once) in the latter case.
func gateBlob(digest string, entered, release, gone chan struct{}) func(http.Handler) http.Handler {
	var enter, leave sync.Once
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/blobs/"+digest) {
				enter.Do(func() { close(entered) })
				select {
				case <-release:
				case <-req.Context().Done():
					leave.Do(func() { close(gone) })
					return
				}
			}
			h.ServeHTTP(w, req)
		})
	}
}

// pullWaiters is how many callers wait on the store's shared pulls.
func pullWaiters(s *Store) int {
	s.pulls.mu.Lock()
	defer s.pulls.mu.Unlock()
	n := 0
	for _, f := range s.pulls.flights {
		n += f.waiters
	}
	return n
}

// pullResult is what a Pull in a goroutine returned.
type pullResult struct {
	img *Image
	err error
}

// goPull runs s.Pull in a goroutine.
func goPull(ctx context.Context, s *Store, ref string, o PullOptions) <-chan pullResult {
	ch := make(chan pullResult, 1)
	go func() {
		img, err := s.Pull(ctx, ref, o)
		ch <- pullResult{img, err}
	}()
	return ch
}

// result waits for a goPull.
func result(t *testing.T, ch <-chan pullResult) pullResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(waitFor):
		t.Fatal("Pull did not return")
		return pullResult{}
	}
}

func TestPullSharedByCallersThatLeave(t *testing.T) {
	l := layer(t, file("app", "x"))
	cases := map[string]struct {
		// cancelSecond cancels the second caller too.
		cancelSecond bool
	}{
		"one caller leaves":   {},
		"every caller leaves": {cancelSecond: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			entered, release, gone := make(chan struct{}), make(chan struct{}), make(chan struct{})
			host := testimages.Serve(t, map[string]v1.Image{"test/app:1": image(t, "", l)},
				testimages.WithHandler(gateBlob(digestOf(t, l), entered, release, gone)))
			ref := host + "/test/app:1"
			s := openStore(t)
			ctx1, cancel1 := context.WithCancel(context.Background())
			defer cancel1()
			ctx2, cancel2 := context.WithCancel(context.Background())
			defer cancel2()
			first := goPull(ctx1, s, ref, PullOptions{})
			select {
			case <-entered:
			case <-time.After(waitFor):
				t.Fatal("the pull never asked for the layer")
			}
			second := goPull(ctx2, s, ref, PullOptions{})
			if !eventually(waitFor, func() bool { return pullWaiters(s) == 2 }) {
				t.Fatalf("%d callers wait on the pull, want 2", pullWaiters(s))
			}
			cancel1()
			if r := result(t, first); !errors.Is(r.err, context.Canceled) {
				t.Errorf("the first Pull = %v, want context.Canceled", r.err)
			}
			if !tc.cancelSecond {
				close(release)
				if r := result(t, second); r.err != nil {
					t.Errorf("the second Pull, still waiting, failed: %v", r.err)
				}
				return
			}
			cancel2()
			if r := result(t, second); !errors.Is(r.err, context.Canceled) {
				t.Errorf("the second Pull = %v, want context.Canceled", r.err)
			}
			select {
			case <-gone:
			case <-time.After(waitFor):
				t.Fatal("the registry request of a pull no caller waits on was not cancelled")
			}
			if !eventually(waitFor, func() bool { return len(layerDirs(t, s)) == 0 && pullWaiters(s) == 0 }) {
				t.Errorf("after the cancelled pull: layers %v, %d waiters", layerDirs(t, s), pullWaiters(s))
			}
			// A later caller starts a pull of its own.
			close(release)
			if _, err := s.Pull(context.Background(), ref, PullOptions{}); err != nil {
				t.Errorf("a Pull after the cancelled one: %v", err)
			}
		})
	}
}

// gateTransport holds its first request until release is closed, closing
// entered when it arrives.
type gateTransport struct {
	entered, release chan struct{}
	once             sync.Once
}

func (g *gateTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	first := false
	g.once.Do(func() { first = true; close(g.entered) })
	if first {
		<-g.release
	}
	return http.DefaultTransport.RoundTrip(req)
}

func TestConcurrentPullsWithOtherCredentials(t *testing.T) {
	host := testimages.Serve(t, map[string]v1.Image{"test/private:1": image(t, "", layer(t, file("secret", "s")))},
		testimages.WithBasicAuth("alice", "right"))
	ref := host + "/test/private:1"
	secret := &corev1.Secret{
		Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"` + host + `":{"username":"alice","password":"right"}}}`)},
	}
	s := openStore(t)
	// The anonymous pull starts first and is held; the pull with the
	// secret must not wait for it, nor take its 401.
	gate := &gateTransport{entered: make(chan struct{}), release: make(chan struct{})}
	anonymous := goPull(context.Background(), s, ref, PullOptions{Transport: gate})
	<-gate.entered
	authorized := goPull(context.Background(), s, ref, PullOptions{Keychain: SecretsKeychain([]*corev1.Secret{secret})})
	var r pullResult
	select {
	case r = <-authorized:
		close(gate.release)
	case <-time.After(2 * time.Second):
		t.Error("the pull with the secret waited for the anonymous one")
		close(gate.release)
		r = result(t, authorized)
	}
	if r.err != nil {
		t.Errorf("the pull with the secret = %v", r.err)
	}
	if r := result(t, anonymous); !errors.Is(r.err, ErrUnauthorized) {
		t.Errorf("the anonymous pull = %v, want unauthorized", r.err)
	}
}
