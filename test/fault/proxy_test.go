package fault

import (
	"bufio"
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"jobkeeper.dev/jobkeeper/bench/harness"
)

// seen is a request that reached the backend.
type seen struct {
	// kind is its harness.RequestKind.
	kind string
	// body is its body.
	body string
	// at is when it arrived.
	at time.Time
}

// backend is a fake apiserver: it records requests, echoes writes, answers
// gets with a pod and serves watches with its watch handler.
type backend struct {
	// srv serves TLS with HTTP/2, as an apiserver does.
	srv *httptest.Server
	// watch serves watches; nil holds them open until the client leaves.
	watch http.HandlerFunc
	// mu guards reqs.
	mu sync.Mutex
	// reqs are the requests that arrived, in order.
	reqs []seen
}

func newBackend(t *testing.T, watchHandler http.HandlerFunc) *backend {
	t.Helper()
	b := &backend{watch: watchHandler}
	b.srv = httptest.NewUnstartedServer(http.HandlerFunc(b.serve))
	b.srv.EnableHTTP2 = true
	b.srv.StartTLS()
	t.Cleanup(b.srv.Close)
	return b
}

func (b *backend) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	kind := harness.RequestKind(r)
	b.mu.Lock()
	b.reqs = append(b.reqs, seen{kind: kind, body: string(body), at: time.Now()})
	b.mu.Unlock()
	w.Header().Set("X-Backend", "yes")
	w.Header().Set("Content-Type", "application/json")
	switch {
	case strings.HasPrefix(kind, "watch "):
		if b.watch != nil {
			b.watch(w, r)
			return
		}
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	case r.Method == http.MethodPost && strings.Contains(string(body), "already-exists"):
		st := apierrors.NewAlreadyExists(corev1.Resource("pods"), "already-exists").Status()
		st.Kind, st.APIVersion = "Status", "v1"
		w.WriteHeader(http.StatusConflict)
		json.NewEncoder(w).Encode(&st)
	case r.Method == http.MethodPost:
		// Echo the body as it came, JSON or protobuf.
		w.Header().Set("Content-Type", r.Header.Get("Content-Type"))
		w.WriteHeader(http.StatusCreated)
		w.Write(body)
	case r.Method == http.MethodPut:
		w.Header().Set("Content-Type", r.Header.Get("Content-Type"))
		w.Write(body)
	case r.Method == http.MethodDelete:
		w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Success"}`))
	default:
		fmt.Fprintf(w, `{"kind":"Pod","apiVersion":"v1","metadata":{"name":%q,"namespace":"ns"}}`, path.Base(r.URL.Path))
	}
}

// got returns the requests of kind that reached the backend.
func (b *backend) got(kind string) []seen {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []seen
	for _, s := range b.reqs {
		if s.kind == kind {
			out = append(out, s)
		}
	}
	return out
}

// count returns how many requests reached the backend.
func (b *backend) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.reqs)
}

// config returns the configuration of a client of the backend.
func (b *backend) config() *rest.Config {
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: b.srv.Certificate().Raw})
	return &rest.Config{Host: b.srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}}
}

func newProxy(t *testing.T, b *backend, seed int64) *Proxy {
	t.Helper()
	p, err := New(b.config(), seed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

func clientset(t *testing.T, p *Proxy) *kubernetes.Clientset {
	t.Helper()
	cfg := p.ClientConfig()
	cfg.QPS, cfg.Burst = 1000, 1000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func httpClient(t *testing.T, p *Proxy) *http.Client {
	t.Helper()
	rt, err := rest.TransportFor(p.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: rt}
}

func pod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
}

// waitIdle waits until the proxy has no handler or goroutine running.
func waitIdle(t *testing.T, p *Proxy) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for p.live.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d handlers or goroutines of the proxy still running", p.live.Load())
		}
		time.Sleep(time.Millisecond)
	}
}

// waitFor polls cond for up to 3 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func checkCount(t *testing.T, p *Proxy, name string, want int) {
	t.Helper()
	if got := p.Injected()[name]; got != want {
		t.Errorf("Injected()[%q] = %d, want %d (all: %v)", name, got, want, p.Injected())
	}
}

func TestPassThrough(t *testing.T) {
	b := newBackend(t, nil)
	p := newProxy(t, b, 1)
	ctx := t.Context()
	if !strings.HasPrefix(p.URL(), "https://127.0.0.1:") {
		t.Errorf("URL() = %q", p.URL())
	}

	body := `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"raw","namespace":"ns"}}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.URL()+"/api/v1/namespaces/ns/pods", strings.NewReader(body))
	resp, err := httpClient(t, p).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("X-Backend") != "yes" || string(got) != body {
		t.Errorf("response %d %v %q, want 201 from the backend echoing %q", resp.StatusCode, resp.Header, got, body)
	}
	if resp.ProtoMajor != 2 {
		t.Errorf("client spoke %s to the proxy, want HTTP/2", resp.Proto)
	}

	cs := clientset(t, p)
	created, err := cs.CoreV1().Pods("ns").Create(ctx, pod("a"), metav1.CreateOptions{})
	if err != nil || created.Name != "a" {
		t.Fatalf("Create = %v, %v", created, err)
	}
	if _, err := cs.CoreV1().Pods("ns").Create(ctx, pod("already-exists"), metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Errorf("Create of an existing pod: %v, want AlreadyExists from the backend", err)
	}
	if got, err := cs.CoreV1().Pods("ns").Get(ctx, "b", metav1.GetOptions{}); err != nil || got.Name != "b" {
		t.Errorf("Get = %v, %v", got, err)
	}
	if n := len(b.got("create pods")); n != 3 {
		t.Errorf("backend got %d creates, want 3", n)
	}
	checkCount(t, p, CountRequests, 4)
	for _, name := range []string{CountFailBefore, CountFailAfter, CountThrottle, CountServerError, CountHang} {
		checkCount(t, p, name, 0)
	}
}

func TestFailBefore(t *testing.T) {
	b := newBackend(t, nil)
	p := newProxy(t, b, 1)
	p.Set(Faults{FailBefore: 1})
	cs := clientset(t, p)
	ctx := t.Context()
	_, err := cs.CoreV1().Pods("ns").Create(ctx, pod("a"), metav1.CreateOptions{})
	if !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), "injected fault") {
		t.Errorf("Create: %v, want an injected InternalError", err)
	}
	if n := len(b.got("create pods")); n != 0 {
		t.Errorf("backend got %d creates, want none", n)
	}
	// Reads are not writes.
	if _, err := cs.CoreV1().Pods("ns").Get(ctx, "a", metav1.GetOptions{}); err != nil {
		t.Errorf("Get: %v", err)
	}
	checkCount(t, p, CountFailBefore, 1)
}

func TestFailAfter(t *testing.T) {
	b := newBackend(t, nil)
	p := newProxy(t, b, 1)
	p.Set(Faults{FailAfter: 1})
	cs := clientset(t, p)
	_, err := cs.CoreV1().Pods("ns").Create(t.Context(), pod("applied"), metav1.CreateOptions{})
	if !apierrors.IsInternalError(err) {
		t.Errorf("Create: %v, want InternalError", err)
	}
	got := b.got("create pods")
	if len(got) != 1 || !strings.Contains(got[0].body, "applied") {
		t.Errorf("backend got %v, want the create of a", got)
	}
	checkCount(t, p, CountFailAfter, 1)
}

func TestThrottle(t *testing.T) {
	b := newBackend(t, nil)
	p := newProxy(t, b, 1)
	p.Set(Faults{Throttle: 1})
	ctx := t.Context()

	// client-go, without its retries of 429s.
	err := clientset(t, p).CoreV1().RESTClient().Get().AbsPath("/api/v1/namespaces/ns/pods/a").MaxRetries(0).Do(ctx).Error()
	if !apierrors.IsTooManyRequests(err) {
		t.Errorf("Get: %v, want TooManyRequests", err)
	}
	if s, ok := apierrors.SuggestsClientDelay(err); !ok || s != 1 {
		t.Errorf("SuggestsClientDelay = %d, %v, want 1 s", s, ok)
	}

	// The response as it is on the wire.
	resp := rawRequest(t, p, http.MethodGet, "/api/v1/namespaces/ns/pods")
	defer resp.Body.Close()
	var st metav1.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("response %d %v, want 429 with Retry-After 1 and JSON", resp.StatusCode, resp.Header)
	}
	if st.Kind != "Status" || st.APIVersion != "v1" || st.Status != metav1.StatusFailure || st.Reason != metav1.StatusReasonTooManyRequests || st.Code != 429 || !strings.Contains(st.Message, "injected") {
		t.Errorf("status %+v", st)
	}
	if n := b.count(); n != 0 {
		t.Errorf("backend got %d requests, want none", n)
	}
	checkCount(t, p, CountThrottle, 2)
}

// rawRequest sends one bodyless request through the proxy with a plain
// HTTP client, for checks of the response as it is on the wire.
func rawRequest(t *testing.T, p *Proxy, method, path string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, p.URL()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := httpClient(t, p).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestServerError(t *testing.T) {
	b := newBackend(t, nil)
	p := newProxy(t, b, 1)
	p.Set(Faults{ServerError: 1})
	ctx := t.Context()
	_, err := clientset(t, p).CoreV1().Pods("ns").Get(ctx, "a", metav1.GetOptions{})
	if !apierrors.IsServiceUnavailable(err) {
		t.Errorf("Get: %v, want ServiceUnavailable", err)
	}
	resp := rawRequest(t, p, http.MethodDelete, "/api/v1/namespaces/ns/pods/a")
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "" {
		t.Errorf("response %d %v, want 503 without Retry-After", resp.StatusCode, resp.Header)
	}
	if n := b.count(); n != 0 {
		t.Errorf("backend got %d requests, want none", n)
	}
	checkCount(t, p, CountServerError, 2)
}

func TestWrites(t *testing.T) {
	for _, tc := range []struct {
		kind string
		want bool
	}{
		{"create pods", true}, {"update pods", true}, {"patch pods", true}, {"delete pods", true},
		{"create jobs", true}, {"patch jobs", true}, {"update jobs/status", true}, {"delete jobs", true},
		{"get pods", false}, {"list jobs", false}, {"watch pods", false}, {"create events", false},
		{"update pods/status", false}, {"deletecollection pods", false}, {"get discovery", false},
	} {
		if got := DefaultWrites(tc.kind); got != tc.want {
			t.Errorf("DefaultWrites(%q) = %v, want %v", tc.kind, got, tc.want)
		}
	}

	b := newBackend(t, nil)
	p := newProxy(t, b, 1)
	p.Set(Faults{FailBefore: 1, Writes: func(kind string) bool { return kind == "create events" }})
	cs := clientset(t, p)
	ctx := t.Context()
	if _, err := cs.CoreV1().Pods("ns").Create(ctx, pod("a"), metav1.CreateOptions{}); err != nil {
		t.Errorf("Create pod: %v, want no fault", err)
	}
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: "ns"}}
	if _, err := cs.CoreV1().Events("ns").Create(ctx, ev, metav1.CreateOptions{}); !apierrors.IsInternalError(err) {
		t.Errorf("Create event: %v, want InternalError", err)
	}
	checkCount(t, p, CountFailBefore, 1)
}

func TestSeed(t *testing.T) {
	b := newBackend(t, nil)
	outcomes := func() string {
		p := newProxy(t, b, 42)
		p.Set(Faults{FailBefore: 0.5})
		cs := clientset(t, p)
		var s strings.Builder
		for i := range 20 {
			_, err := cs.CoreV1().Pods("ns").Create(t.Context(), pod(fmt.Sprint("p", i)), metav1.CreateOptions{})
			if err != nil {
				s.WriteByte('x')
			} else {
				s.WriteByte('.')
			}
		}
		return s.String()
	}
	first, second := outcomes(), outcomes()
	if first != second {
		t.Errorf("same seed, different faults: %s and %s", first, second)
	}
	if !strings.Contains(first, "x") || !strings.Contains(first, ".") {
		t.Errorf("FailBefore 0.5 failed %s", first)
	}
}

// lineWatch returns a backend watch handler that writes n lines, one every
// interval, recording when each was sent, and then ends the stream.
func lineWatch(n int, interval time.Duration, sent []time.Time) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		rc.Flush()
		for i := range n {
			if i > 0 {
				time.Sleep(interval)
			}
			sent[i] = time.Now()
			fmt.Fprintf(w, "line %d\n", i)
			if err := rc.Flush(); err != nil {
				return
			}
		}
	}
}

func TestWatchDelay(t *testing.T) {
	const n, delay = 5, 80 * time.Millisecond
	sent := make([]time.Time, n)
	b := newBackend(t, lineWatch(n, 10*time.Millisecond, sent))
	p := newProxy(t, b, 1)
	p.Set(Faults{WatchDelay: delay})

	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, p.URL()+"/api/v1/pods?watch=true", nil)
	start := time.Now()
	resp, err := httpClient(t, p).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if headers := time.Since(start); headers >= delay {
		t.Logf("headers took %v (expected at once, not after the delay)", headers)
	}
	r := bufio.NewReader(resp.Body)
	for i := range n {
		line, err := r.ReadString('\n')
		at := time.Now()
		if err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		if want := fmt.Sprintf("line %d\n", i); line != want {
			t.Fatalf("got %q, want %q", line, want)
		}
		if late := at.Sub(sent[i]); late < delay {
			t.Errorf("line %d arrived %v after it was sent, want at least %v", i, late, delay)
		}
	}
	if _, err := r.ReadString('\n'); err != io.EOF {
		t.Errorf("after the lines: %v, want EOF", err)
	}
	checkCount(t, p, CountWatchStreams, 1)
	checkCount(t, p, CountWatchCut, 0)
	waitIdle(t, p)
}

func TestWatchClientGo(t *testing.T) {
	const delay = 30 * time.Millisecond
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		rc.Flush()
		for i := range 3 {
			fmt.Fprintf(w, `{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p%d","namespace":"ns","resourceVersion":"%d"}}}`+"\n", i, i+1)
			rc.Flush()
		}
		<-r.Context().Done()
	})
	p := newProxy(t, b, 1)
	p.Set(Faults{WatchDelay: delay})
	start := time.Now()
	wi, err := clientset(t, p).CoreV1().Pods("ns").Watch(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer wi.Stop()
	for i := range 3 {
		ev, ok := <-wi.ResultChan()
		if !ok {
			t.Fatalf("watch closed after %d events", i)
		}
		if name := ev.Object.(*corev1.Pod).Name; ev.Type != watch.Added || name != fmt.Sprint("p", i) {
			t.Errorf("event %d: %s %s", i, ev.Type, name)
		}
	}
	if took := time.Since(start); took < delay {
		t.Errorf("events arrived after %v, want at least %v", took, delay)
	}
	// A cut ends the watch as the apiserver ending it would: the result
	// channel closes without an error event.
	p.CutWatches()
	select {
	case ev, ok := <-wi.ResultChan():
		if ok {
			t.Errorf("after the cut: event %v, want the channel closed", ev)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("watch still open after CutWatches")
	}
	checkCount(t, p, CountWatchCut, 1)
	waitIdle(t, p)
}

// openWatch opens a raw watch through p.
func openWatch(t *testing.T, ctx context.Context, p *Proxy) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL()+"/api/v1/namespaces/ns/pods?watch=1", nil)
	resp, err := httpClient(t, p).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("watch: %s", resp.Status)
	}
	return resp
}

// readEnds reads resp's body until it ends and returns the error that ended
// it (nil for a clean end).
func readEnds(t *testing.T, resp *http.Response) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, resp.Body)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(3 * time.Second):
		t.Fatal("watch stream still open")
		return nil
	}
}

func TestCutWatches(t *testing.T) {
	b := newBackend(t, nil)
	p := newProxy(t, b, 1)
	p.Set(Faults{WatchDelay: 10 * time.Millisecond})
	r1, r2 := openWatch(t, t.Context(), p), openWatch(t, t.Context(), p)
	defer r1.Body.Close()
	defer r2.Body.Close()
	checkCount(t, p, CountWatchStreams, 2)
	p.CutWatches()
	for _, r := range []*http.Response{r1, r2} {
		if err := readEnds(t, r); err != nil {
			t.Errorf("cut stream ended with %v, want a clean end", err)
		}
	}
	checkCount(t, p, CountWatchCut, 2)
	waitIdle(t, p)
	// Nothing open: nothing to cut.
	p.CutWatches()
	checkCount(t, p, CountWatchCut, 2)
}

func TestWatchCutTimer(t *testing.T) {
	b := newBackend(t, nil)
	p := newProxy(t, b, 1)
	p.Set(Faults{CutWatchMin: 10 * time.Millisecond, CutWatchMax: 30 * time.Millisecond})
	start := time.Now()
	r := openWatch(t, t.Context(), p)
	defer r.Body.Close()
	if err := readEnds(t, r); err != nil {
		t.Errorf("cut stream ended with %v, want a clean end", err)
	}
	if took := time.Since(start); took < 10*time.Millisecond {
		t.Errorf("stream cut after %v, want at least 10ms", took)
	}
	checkCount(t, p, CountWatchCut, 1)
	waitIdle(t, p)
}

func TestWatchClientGoneNoLeak(t *testing.T) {
	backendDone := make(chan struct{})
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		defer close(backendDone)
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		for i := 0; ; i++ {
			fmt.Fprintf(w, "line %d\n", i)
			if rc.Flush() != nil {
				return
			}
			select {
			case <-r.Context().Done():
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	})
	p := newProxy(t, b, 1)
	p.Set(Faults{WatchDelay: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	resp := openWatch(t, ctx, p)
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	waitIdle(t, p)
	select {
	case <-backendDone:
	case <-time.After(3 * time.Second):
		t.Error("the backend's watch is still open")
	}
	checkCount(t, p, CountWatchCut, 0)
}

func TestHang(t *testing.T) {
	const hangFor = 100 * time.Millisecond
	b := newBackend(t, nil)
	p := newProxy(t, b, 1)
	p.Set(Faults{Hang: 1, HangFor: hangFor})
	cs := clientset(t, p)

	// A patient client gets its answer after the hang.
	start := time.Now()
	if _, err := cs.CoreV1().Pods("ns").Create(t.Context(), pod("patient"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < hangFor {
		t.Errorf("hung create answered after %v, want at least %v", took, hangFor)
	}

	// A client that gives up: the write lands all the same, later.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	start = time.Now()
	if _, err := cs.CoreV1().Pods("ns").Create(ctx, pod("gaveup"), metav1.CreateOptions{}); err == nil {
		t.Fatal("Create with a 10ms timeout succeeded through a 100ms hang")
	}
	var landed seen
	waitFor(t, "the abandoned write to reach the backend", func() bool {
		for _, s := range b.got("create pods") {
			if strings.Contains(s.body, "gaveup") {
				landed = s
				return true
			}
		}
		return false
	})
	if after := landed.at.Sub(start); after < hangFor {
		t.Errorf("abandoned write landed after %v, want at least %v", after, hangFor)
	}
	checkCount(t, p, CountHang, 2)
	waitIdle(t, p)
}

func TestCloseEndsEverything(t *testing.T) {
	b := newBackend(t, nil)
	p, err := New(b.config(), 1)
	if err != nil {
		t.Fatal(err)
	}
	p.Set(Faults{Hang: 1, HangFor: time.Hour, WatchDelay: time.Millisecond})
	w := openWatch(t, t.Context(), p)
	defer w.Body.Close()
	cs := clientset(t, p)
	errs := make(chan error, 1)
	go func() {
		_, err := cs.CoreV1().Pods("ns").Create(t.Context(), pod("hung"), metav1.CreateOptions{})
		errs <- err
	}()
	waitFor(t, "the hang", func() bool { return p.Injected()[CountHang] == 1 })
	start := time.Now()
	if err := p.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Close took %v", took)
	}
	if p.live.Load() != 0 {
		t.Errorf("%d handlers or goroutines running after Close", p.live.Load())
	}
	if err := <-errs; err == nil {
		t.Error("hung create succeeded across Close")
	}
	readEnds(t, w)
	if n := len(b.got("create pods")); n != 0 {
		t.Errorf("backend got %d creates, want none (Close drops hung writes)", n)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestWriteKubeconfig(t *testing.T) {
	b := newBackend(t, nil)
	p := newProxy(t, b, 1)
	file := filepath.Join(t.TempDir(), "kubeconfig")
	if err := p.WriteKubeconfig(file); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", file)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != p.URL() {
		t.Errorf("kubeconfig server %q, want %q", cfg.Host, p.URL())
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods("ns").Get(t.Context(), "a", metav1.GetOptions{}); err != nil {
		t.Errorf("Get through the kubeconfig: %v", err)
	}
}
