package harness

import (
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// RequestKind names an API request by verb and resource, as
// "<verb> <resource>[/<subresource>]": "create pods", "update jobs/status",
// "watch pods", "list jobs", "delete jobs", "deletecollection pods". The
// verb follows the apiserver's audit verbs: a GET is get, list or watch
// depending on the path and the watch parameter. Requests outside a
// resource path (/api, /apis, /version, /openapi/...) are "get discovery".
func RequestKind(r *http.Request) string {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	var rest []string
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		rest = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		rest = parts[3:]
	default:
		return "get discovery"
	}
	// namespaces/<ns>/<resource>/... is a namespaced resource; namespaces,
	// namespaces/<ns> and its subresources (status, finalize) are the
	// namespaces resource itself.
	if len(rest) >= 3 && rest[0] == "namespaces" && !(len(rest) == 3 && (rest[2] == "status" || rest[2] == "finalize")) {
		rest = rest[2:]
	}
	resource := rest[0]
	named := len(rest) >= 2
	if len(rest) >= 3 {
		resource += "/" + rest[2]
	}
	var verb string
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		switch w := r.URL.Query().Get("watch"); {
		case w == "true" || w == "1":
			verb = "watch"
		case named:
			verb = "get"
		default:
			verb = "list"
		}
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
		if !named {
			verb = "deletecollection"
		}
	default:
		verb = strings.ToLower(r.Method)
	}
	return verb + " " + resource
}

// Counter counts requests by kind. It is safe for concurrent use.
type Counter struct {
	mu     sync.Mutex
	counts map[string]int
	// last is when the latest request of each kind was answered.
	last map[string]time.Time
	// first is when the first request of each kind arrived.
	first map[string]time.Time
}

// NewCounter returns an empty Counter.
func NewCounter() *Counter {
	return &Counter{counts: map[string]int{}, last: map[string]time.Time{}, first: map[string]time.Time{}}
}

// Add counts one request of kind.
func (c *Counter) Add(kind string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts[kind]++
	if _, seen := c.first[kind]; !seen {
		c.first[kind] = time.Now()
	}
}

// FirstSeen returns when the first request of kind arrived (zero if none did).
func (c *Counter) FirstSeen(kind string) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.first[kind]
}

// answered records that a request of kind got its response headers.
func (c *Counter) answered(kind string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last[kind] = time.Now()
}

// Snapshot returns a copy of the counts.
func (c *Counter) Snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.counts))
	for k, v := range c.counts {
		out[k] = v
	}
	return out
}

// LastAnswered returns when the latest request of kind was answered (zero if
// none was).
func (c *Counter) LastAnswered(kind string) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last[kind]
}

// Total returns the sum of counts.
func Total(counts map[string]int) int {
	n := 0
	for _, v := range counts {
		n += v
	}
	return n
}

// Diff returns after-before for every kind that grew.
func Diff(after, before map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// Format renders counts as "kind=n" pairs sorted by kind.
func Format(counts map[string]int) string {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s=%d", k, counts[k])
	}
	return b.String()
}

// Wrap returns a rest.Config WrapTransport function that counts every request
// of the client into c (use with config.Wrap).
func (c *Counter) Wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		kind := RequestKind(r)
		c.Add(kind)
		resp, err := rt.RoundTrip(r)
		c.answered(kind)
		return resp, err
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Proxy is a reverse proxy to an apiserver that counts the requests passing
// through it. Clients talk plain HTTP to it without credentials; the proxy
// forwards with the credentials of the configuration it was built from, so
// a process under test needs nothing but the proxy's URL, and its requests
// are counted outside of it, the same way for every implementation.
type Proxy struct {
	rp      *httputil.ReverseProxy
	counter atomic.Pointer[Counter]
}

// NewProxy returns a Proxy to the apiserver of config (with its TLS and
// credentials). Serve it with an http.Server.
func NewProxy(config *rest.Config) (*Proxy, error) {
	target, err := url.Parse(config.Host)
	if err != nil {
		return nil, fmt.Errorf("parsing apiserver URL %q: %w", config.Host, err)
	}
	transport, err := rest.TransportFor(config)
	if err != nil {
		return nil, fmt.Errorf("building the proxy's transport: %w", err)
	}
	p := &Proxy{}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = target.Host
		},
		Transport: roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := transport.RoundTrip(r)
			if c := p.counter.Load(); c != nil {
				c.answered(RequestKind(r))
			}
			return resp, err
		}),
		// Watches stream: pass every event through as it arrives.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			// A client that went away (a watch closed on shutdown) is normal.
			if r.Context().Err() == nil {
				klog.FromContext(r.Context()).Error(err, "Proxying to the apiserver failed", "method", r.Method, "path", r.URL.Path)
			}
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	return p, nil
}

// Count makes the proxy count into c from now on (nil stops counting).
func (p *Proxy) Count(c *Counter) { p.counter.Store(c) }

// ServeHTTP counts the request and forwards it.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if c := p.counter.Load(); c != nil {
		c.Add(RequestKind(r))
	}
	p.rp.ServeHTTP(w, r)
}
