package fault

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"

	"jobkeeper.dev/jobkeeper/bench/harness"
)

// Proxy is a fault-injecting reverse proxy to an apiserver, serving TLS on
// 127.0.0.1. It is safe for concurrent use.
type Proxy struct {
	// rp forwards requests to the apiserver.
	rp *httputil.ReverseProxy
	// srv serves the proxy.
	srv *http.Server
	// url is the proxy's https URL.
	url string
	// certPEM is the proxy's self-signed certificate, its clients' CA.
	certPEM []byte
	// ctx is cancelled by Close; it bounds the work that outlives a
	// client (hung and fail-after writes).
	ctx context.Context
	// stop cancels ctx.
	stop context.CancelFunc

	// mu guards the fields below.
	mu sync.Mutex
	// faults are the faults to inject.
	faults Faults
	// rng makes the random choices.
	rng *rand.Rand
	// counts are the counts of Injected.
	counts map[string]int
	// streams are the open watch streams.
	streams map[*watchStream]struct{}
	// closed is set by Close: new requests are refused.
	closed bool

	// work tracks the handlers and delay-line goroutines, for Close.
	work sync.WaitGroup
	// live counts the same, for tests of goroutine leaks.
	live atomic.Int64
}

// New starts a Proxy to the apiserver of config, forwarding with config's
// TLS settings and credentials. seed seeds the random choices of faults.
// The proxy injects no faults until Set.
func New(config *rest.Config, seed int64) (*Proxy, error) {
	target, _, err := rest.DefaultServerUrlFor(config)
	if err != nil {
		return nil, fmt.Errorf("parsing the apiserver URL %q: %w", config.Host, err)
	}
	transport, err := rest.TransportFor(config)
	if err != nil {
		return nil, fmt.Errorf("building the proxy's transport: %w", err)
	}
	cert, certPEM, err := selfSignedCert()
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening: %w", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	p := &Proxy{
		url:     "https://" + l.Addr().String(),
		certPEM: certPEM,
		ctx:     ctx,
		stop:    stop,
		rng:     rand.New(rand.NewPCG(uint64(seed), 0x6a6f626b)),
		counts:  map[string]int{},
		streams: map[*watchStream]struct{}{},
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport: transport,
		// Watches stream: pass every chunk on as it is read.
		FlushInterval:  -1,
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.forwardError,
	}
	p.srv = &http.Server{
		Handler:           http.HandlerFunc(p.serve),
		ReadHeaderTimeout: 10 * time.Second,
		// TLS, so that clients speak HTTP/2 to the proxy: one multiplexed
		// connection, as with a real apiserver.
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{cert},
			NextProtos:   []string{"h2", "http/1.1"},
			MinVersion:   tls.VersionTLS12,
		},
	}
	go func() { _ = p.srv.ServeTLS(l, "", "") }()
	return p, nil
}

// Set replaces the faults to inject. It affects the requests that arrive
// from now on and, for WatchDelay and the watch cuts, the watches opened
// from now on.
func (p *Proxy) Set(f Faults) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = f
}

// URL returns the proxy's URL, https://127.0.0.1:PORT.
func (p *Proxy) URL() string { return p.url }

// ClientConfig returns a configuration for clients of the proxy: its URL
// and its certificate as the CA, with no credentials.
func (p *Proxy) ClientConfig() *rest.Config {
	return &rest.Config{
		Host:            p.url,
		TLSClientConfig: rest.TLSClientConfig{CAData: bytes.Clone(p.certPEM)},
	}
}

// WriteKubeconfig writes a kubeconfig file for ClientConfig, with the CA
// embedded, for a controller in a child process.
func (p *Proxy) WriteKubeconfig(path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["fault-proxy"] = &clientcmdapi.Cluster{Server: p.url, CertificateAuthorityData: bytes.Clone(p.certPEM)}
	kc.AuthInfos["fault-proxy"] = &clientcmdapi.AuthInfo{}
	kc.Contexts["fault-proxy"] = &clientcmdapi.Context{Cluster: "fault-proxy", AuthInfo: "fault-proxy"}
	kc.CurrentContext = "fault-proxy"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// Injected returns the counts of injected faults by name: "fail-before",
// "fail-after", "throttle", "server-error", "hang" and "watch-cut", and
// also "watch-streams" (watches opened) and "requests" (all requests). A
// name that never counted is absent.
func (p *Proxy) Injected() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.counts)
}

// CutWatches closes every open watch stream now. Their clients see the
// streams end, as when the apiserver ends a watch, and open new ones.
func (p *Proxy) CutWatches() {
	p.mu.Lock()
	streams := make([]*watchStream, 0, len(p.streams))
	for s := range p.streams {
		streams = append(streams, s)
	}
	p.mu.Unlock()
	for _, s := range streams {
		p.cut(s, true)
	}
}

// Close stops the proxy: it closes the listener and every connection, ends
// the open watches and the hung writes (which are then not forwarded), and
// waits for the proxy's goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	streams := make([]*watchStream, 0, len(p.streams))
	for s := range p.streams {
		streams = append(streams, s)
	}
	p.mu.Unlock()
	p.stop()
	for _, s := range streams {
		p.cut(s, false)
	}
	err := p.srv.Close()
	p.work.Wait()
	return err
}

// cut ends the stream s if it is still open, counting it if count.
func (p *Proxy) cut(s *watchStream, count bool) {
	p.mu.Lock()
	_, open := p.streams[s]
	if open {
		delete(p.streams, s)
		if count {
			p.counts[CountWatchCut]++
		}
	}
	p.mu.Unlock()
	if open {
		close(s.cut)
		s.cancel()
	}
}

// begin counts the start of a handler or goroutine into work and live;
// false (and nothing counted) if the proxy is closed.
func (p *Proxy) begin() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.work.Add(1)
	p.live.Add(1)
	return true
}

// end counts the end of what begin counted.
func (p *Proxy) end() {
	p.live.Add(-1)
	p.work.Done()
}

// decision is what to inject into one request.
type decision struct {
	// throttle answers 429.
	throttle bool
	// serverError answers 503.
	serverError bool
	// failBefore answers 500 without forwarding.
	failBefore bool
	// hang holds the write for hangFor first.
	hang bool
	// hangFor is how long to hold it.
	hangFor time.Duration
	// failAfter forwards and answers 500.
	failAfter bool
}

// decide rolls the dice for a request of kind (not a watch) and counts the
// faults chosen, but for fail-after, counted once the write was forwarded.
func (p *Proxy) decide(kind string) decision {
	p.mu.Lock()
	f := p.faults
	p.mu.Unlock()
	writes := f.Writes
	if writes == nil {
		writes = DefaultWrites
	}
	// Writes is the caller's function: call it without holding mu.
	write := writes(kind)

	p.mu.Lock()
	defer p.mu.Unlock()
	var d decision
	switch {
	case p.roll(f.Throttle):
		d.throttle = true
		p.counts[CountThrottle]++
	case p.roll(f.ServerError):
		d.serverError = true
		p.counts[CountServerError]++
	case !write:
	case p.roll(f.FailBefore):
		d.failBefore = true
		p.counts[CountFailBefore]++
	default:
		if p.roll(f.Hang) {
			d.hang, d.hangFor = true, f.HangFor
			p.counts[CountHang]++
		}
		d.failAfter = p.roll(f.FailAfter)
	}
	return d
}

// roll returns true with probability frac. The caller holds mu.
func (p *Proxy) roll(frac float64) bool {
	if frac <= 0 {
		return false
	}
	return p.rng.Float64() < frac
}

// isWatch tells whether r opens a watch.
func isWatch(r *http.Request) bool {
	if r.Method != http.MethodGet {
		return false
	}
	w := r.URL.Query().Get("watch")
	return w == "true" || w == "1"
}

// serve handles one request of a client.
func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	if !p.begin() {
		writeStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, "the fault proxy is closed", 0)
		return
	}
	defer p.end()
	p.mu.Lock()
	p.counts[CountRequests]++
	p.mu.Unlock()
	if isWatch(r) {
		p.serveWatch(w, r)
		return
	}
	d := p.decide(harness.RequestKind(r))
	switch {
	case d.throttle:
		writeStatus(w, http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests,
			"injected fault throttle: too many requests, the request was not forwarded", 1)
		return
	case d.serverError:
		writeStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
			"injected fault server-error: service unavailable, the request was not forwarded", 0)
		return
	case d.failBefore:
		writeStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError,
			"injected fault fail-before: the request was not forwarded to the apiserver", 0)
		return
	case !d.hang && !d.failAfter:
		p.rp.ServeHTTP(w, r)
		return
	}

	// A hung or fail-after write is forwarded even if its client goes
	// away: read its body while the client is there.
	body, err := io.ReadAll(r.Body)
	if err != nil {
		// The client went away before sending it: nothing to forward.
		return
	}
	if d.hang && !p.hang(r, d.hangFor) {
		// The client gave up: the write lands later all the same.
		if p.ctx.Err() == nil {
			p.forwardDetached(r, body)
		}
		return
	}
	if p.ctx.Err() != nil {
		writeStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, "the fault proxy is closed", 0)
		return
	}
	if d.failAfter {
		p.forwardDetached(r, body)
		p.mu.Lock()
		p.counts[CountFailAfter]++
		p.mu.Unlock()
		writeStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError,
			"injected fault fail-after: the apiserver applied the request but its response was replaced", 0)
		return
	}
	p.rp.ServeHTTP(w, withBody(r, r.Context(), body))
}

// hang holds the request for d, however long its client waits (unless the
// proxy is closed). It returns whether the client is still there.
func (p *Proxy) hang(r *http.Request, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-p.ctx.Done():
	}
	return r.Context().Err() == nil
}

// forwardDetached forwards r with body to the apiserver and discards the
// response, whether or not the client is still there; only Close aborts
// it. It returns the response's status code (502 if forwarding failed).
func (p *Proxy) forwardDetached(r *http.Request, body []byte) (status int) {
	// The reverse proxy aborts the handler with http.ErrAbortHandler when
	// the apiserver's response breaks off; there is no client to tell.
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				panic(v)
			}
			status = http.StatusBadGateway
		}
	}()
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()
	stop := context.AfterFunc(p.ctx, cancel)
	defer stop()
	rec := &discard{header: http.Header{}}
	p.rp.ServeHTTP(rec, withBody(r, ctx, body))
	return rec.status
}

// withBody returns a copy of r with context ctx and body.
func withBody(r *http.Request, ctx context.Context, body []byte) *http.Request {
	out := r.WithContext(ctx)
	out.ContentLength = int64(len(body))
	if len(body) == 0 {
		out.Body = http.NoBody
		out.GetBody = func() (io.ReadCloser, error) { return http.NoBody, nil }
		return out
	}
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return out
}

// discard is a ResponseWriter that keeps the status code only.
type discard struct {
	// header is the (ignored) response header.
	header http.Header
	// status is the response's status code.
	status int
}

// Header returns the ignored header.
func (d *discard) Header() http.Header { return d.header }

// Write discards b.
func (d *discard) Write(b []byte) (int, error) {
	if d.status == 0 {
		d.status = http.StatusOK
	}
	return len(b), nil
}

// WriteHeader records the first final status code.
func (d *discard) WriteHeader(code int) {
	if d.status == 0 && code >= 200 {
		d.status = code
	}
}

// serveWatch forwards a watch through a delay line that the proxy can cut.
func (p *Proxy) serveWatch(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	s := &watchStream{cut: make(chan struct{}), cancel: cancel}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	f := p.faults
	s.delay = f.WatchDelay
	var life time.Duration
	if f.CutWatchMax > 0 {
		life = f.CutWatchMin
		if f.CutWatchMax > f.CutWatchMin {
			life += time.Duration(p.rng.Int64N(int64(f.CutWatchMax-f.CutWatchMin) + 1))
		}
		life = max(life, 0)
	}
	p.streams[s] = struct{}{}
	p.counts[CountWatchStreams]++
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.streams, s)
		p.mu.Unlock()
	}()
	if f.CutWatchMax > 0 {
		t := time.AfterFunc(life, func() { p.cut(s, true) })
		defer t.Stop()
	}
	p.rp.ServeHTTP(w, r.WithContext(context.WithValue(ctx, streamKey{}, s)))
}

// modifyResponse puts the body of a successful watch response behind a
// delay line.
func (p *Proxy) modifyResponse(resp *http.Response) error {
	s, ok := resp.Request.Context().Value(streamKey{}).(*watchStream)
	if !ok || resp.StatusCode != http.StatusOK {
		return nil
	}
	if !p.begin() {
		return errors.New("the fault proxy is closed")
	}
	resp.Body = newDelayLine(resp.Request.Context(), resp.Body, s, p.end)
	return nil
}

// forwardError answers a request that could not be forwarded: nothing if
// its client went away (or its watch was cut), else 502.
func (p *Proxy) forwardError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return
	}
	klog.FromContext(r.Context()).Error(err, "Fault proxy: forwarding to the apiserver failed", "method", r.Method, "path", r.URL.Path)
	writeStatus(w, http.StatusBadGateway, "", "the fault proxy could not forward the request: "+err.Error(), 0)
}
