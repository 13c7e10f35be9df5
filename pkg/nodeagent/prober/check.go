package prober

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/podconfig"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// probeUserAgent is the User-Agent of HTTP and gRPC probes: the kubelet's,
// of the Kubernetes version whose behaviour the agent follows.
const probeUserAgent = "kube-probe/1.36"

// MaxOutput is how much of a probe's output (an HTTP body, an exec'd
// command's output) is kept, as the kubelet's 10 KiB.
const MaxOutput = 10 << 10

// UnsupportedProbe returns why the agent cannot run p against an attempt
// whose handle is h, "" when it can: httpGet, tcpSocket and grpc probes
// reach 127.0.0.1 (pods share the host's network); exec probes need a
// runtime that can run commands in its containers.
func UnsupportedProbe(p *corev1.Probe, h runtime.Handle) string {
	switch {
	case p.HTTPGet != nil, p.TCPSocket != nil, p.GRPC != nil:
		return ""
	case p.Exec != nil:
		if _, ok := h.(runtime.Execer); !ok {
			return "this runtime cannot run commands in containers"
		}
		return ""
	default:
		return "the probe has no handler"
	}
}

// CheckFor returns the check of probe p of container c, run against the
// attempt h.
func CheckFor(p *corev1.Probe, c *corev1.Container, h runtime.Handle, podIP string) Check {
	switch {
	case p.HTTPGet != nil:
		return httpCheck(p.HTTPGet, c, podIP)
	case p.TCPSocket != nil:
		return tcpCheck(p.TCPSocket, c, podIP)
	case p.GRPC != nil:
		return grpcCheck(p.GRPC, podIP)
	case p.Exec != nil:
		if ex, ok := h.(runtime.Execer); ok {
			return execCheck(expandStatic(p.Exec.Command, c.Env), ex)
		}
	}
	return func(context.Context, time.Duration) (Outcome, string) {
		return Error, UnsupportedProbe(p, h)
	}
}

// probePort resolves a probe's port as the kubelet does: a number, or the
// name of one of the container's ports, or a name that is a number.
func probePort(port intstr.IntOrString, c *corev1.Container) (int, error) {
	n := 0
	switch port.Type {
	case intstr.Int:
		n = port.IntValue()
	case intstr.String:
		found := false
		for _, cp := range c.Ports {
			if cp.Name == port.StrVal {
				n, found = int(cp.ContainerPort), true
				break
			}
		}
		if !found {
			var err error
			if n, err = strconv.Atoi(port.StrVal); err != nil {
				return 0, err
			}
		}
	}
	if n <= 0 || n >= 65536 {
		return 0, fmt.Errorf("invalid port number: %v", n)
	}
	return n, nil
}

// probeHost is the host a probe reaches: its own, else the pod's IP
// (podIP; empty: the node's, which pods sharing its network have).
func probeHost(host, podIP string) string {
	switch {
	case host != "":
		return host
	case podIP != "":
		return podIP
	}
	return podconfig.NodeIP
}

// probeDialer is a dialer whose sockets linger for one second at most once
// closed, as the kubelet's: probes every few seconds would otherwise leave
// many sockets in TIME-WAIT.
func probeDialer(timeout time.Duration) *net.Dialer {
	return &net.Dialer{Timeout: timeout, Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) {
			_ = syscall.SetsockoptLinger(int(fd), syscall.SOL_SOCKET, syscall.SO_LINGER, &syscall.Linger{Onoff: 1, Linger: 1})
		})
	}}
}

// HTTPRequest builds the request of an httpGet probe or hook as the kubelet
// does: the scheme lower-cased (http by default), the path parsed as a URL
// (a query stays), httpHeaders added in order, the Host header as the
// request's host, User-Agent and Accept (*/*) unless set; an Accept set to
// "" is removed.
func HTTPRequest(ctx context.Context, g *corev1.HTTPGetAction, c *corev1.Container, podIP, userAgent string) (*http.Request, error) {
	port, err := probePort(g.Port, c)
	if err != nil {
		return nil, err
	}
	scheme := strings.ToLower(string(g.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	u, err := url.Parse(g.Path)
	if err != nil {
		u = &url.URL{Path: g.Path}
	}
	u.Scheme, u.Host = scheme, net.JoinHostPort(probeHost(g.Host, podIP), strconv.Itoa(port))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	for _, hh := range g.HTTPHeaders {
		h.Add(hh.Name, hh.Value)
	}
	if _, ok := h["User-Agent"]; !ok {
		h.Set("User-Agent", userAgent)
	}
	if _, ok := h["Accept"]; !ok {
		h.Set("Accept", "*/*")
	} else if h.Get("Accept") == "" {
		h.Del("Accept")
	}
	req.Header, req.Host = h, h.Get("Host")
	return req, nil
}

// HTTPClient is the kubelet's probe client: certificates are not verified,
// no proxy, no keep-alive, no compression; redirects are followed while
// they stay on the same host (10 at most), and one to another host is not
// followed (its 3xx answer then counts, as a warning).
func HTTPClient(timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			TLSClientConfig:    &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // probes do not verify, as the kubelet's
			DisableKeepAlives:  true,
			DisableCompression: true,
			Proxy:              nil,
			DialContext:        probeDialer(0).DialContext,
		},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if req.URL.Hostname() != via[0].URL.Hostname() {
				return http.ErrUseLastResponse
			}
			if len(via) >= 10 {
				return errors.New("stopped after 10 redirects")
			}
			return nil
		},
	}
}

// httpCheck is an HTTP GET: a status in [200, 300) succeeds, a redirect
// that was not followed succeeds with a warning, anything else fails.
func httpCheck(g *corev1.HTTPGetAction, c *corev1.Container, podIP string) Check {
	return func(ctx context.Context, timeout time.Duration) (Outcome, string) {
		req, err := HTTPRequest(ctx, g, c, podIP, probeUserAgent)
		if err != nil {
			return Error, err.Error()
		}
		res, err := HTTPClient(timeout).Do(req)
		if err != nil {
			return Failure, err.Error()
		}
		defer func() { _ = res.Body.Close() }()
		body, err := io.ReadAll(io.LimitReader(res.Body, MaxOutput))
		if err != nil {
			return Failure, err.Error()
		}
		switch {
		case res.StatusCode >= http.StatusMultipleChoices && res.StatusCode < http.StatusBadRequest:
			return Warning, fmt.Sprintf("Probe terminated redirects, Response body: %v", string(body))
		case res.StatusCode >= http.StatusOK && res.StatusCode < http.StatusBadRequest:
			return Success, string(body)
		default:
			return Failure, fmt.Sprintf("HTTP probe failed with statuscode: %d", res.StatusCode)
		}
	}
}

// tcpCheck succeeds when a TCP connection opens.
func tcpCheck(s *corev1.TCPSocketAction, c *corev1.Container, podIP string) Check {
	return func(ctx context.Context, timeout time.Duration) (Outcome, string) {
		port, err := probePort(s.Port, c)
		if err != nil {
			return Error, err.Error()
		}
		conn, err := probeDialer(timeout).DialContext(ctx, "tcp", net.JoinHostPort(probeHost(s.Host, podIP), strconv.Itoa(port)))
		if err != nil {
			return Failure, err.Error()
		}
		_ = conn.Close()
		return Success, ""
	}
}

// grpcCheck calls grpc.health.v1.Health/Check for the probe's service on
// the pod's IP, without TLS, as the kubelet's: the connection must be up
// within the timeout, and the answer SERVING.
func grpcCheck(g *corev1.GRPCAction, podIP string) Check {
	return func(ctx context.Context, timeout time.Duration) (Outcome, string) {
		service := ""
		if g.Service != nil {
			service = *g.Service
		}
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		addr := net.JoinHostPort(probeHost("", podIP), strconv.Itoa(int(g.Port)))
		conn, err := grpc.NewClient("passthrough:///"+addr,
			grpc.WithUserAgent(probeUserAgent),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
				return probeDialer(0).DialContext(ctx, "tcp", addr)
			}))
		if err != nil {
			return Failure, fmt.Sprintf("error: failed to connect service at %q: %+v", addr, err)
		}
		defer func() { _ = conn.Close() }()
		// Wait for the connection, as the kubelet's blocking dial does.
		conn.Connect()
		for st := conn.GetState(); st != connectivity.Ready; st = conn.GetState() {
			if !conn.WaitForStateChange(ctx, st) {
				return Failure, fmt.Sprintf("timeout: failed to connect service %q within %v: %+v", addr, timeout, ctx.Err())
			}
		}
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			if st, ok := status.FromError(err); ok {
				switch st.Code() {
				case codes.Unimplemented:
					return Failure, fmt.Sprintf("error: this server does not implement the grpc health protocol (grpc.health.v1.Health): %s", st.Message())
				case codes.DeadlineExceeded:
					return Failure, fmt.Sprintf("timeout: health rpc did not complete within %v", timeout)
				}
			}
			return Failure, fmt.Sprintf("error: health rpc probe failed: %+v", err)
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			return Failure, fmt.Sprintf("service unhealthy (responded with %q)", resp.GetStatus().String())
		}
		return Success, "service healthy"
	}
}

// execCheck runs command inside the container (its filesystem view,
// environment and working directory): exit code 0 succeeds, another
// fails; the combined output (10 KiB at most) is the probe's output. A
// command still running at the timeout fails the probe ("command timed
// out"), as the kubelet's; it is not killed.
func execCheck(command []string, ex runtime.Execer) Check {
	return func(ctx context.Context, timeout time.Duration) (Outcome, string) {
		out, code, err := ExecCapture(ctx, ex, command, timeout)
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			return Failure, fmt.Sprintf("command timed out: %q timed out after %s", strings.Join(command, " "), timeout)
		case err != nil:
			return Error, err.Error()
		case code != 0:
			return Failure, out
		default:
			return Success, out
		}
	}
}

// ExecCapture runs command in the container through ex with no input and
// returns its combined output (MaxOutput at most) and exit code; a
// timeout of zero sets none (hooks). Output of processes it leaves running
// in the background is not waited for beyond a second.
func ExecCapture(ctx context.Context, ex runtime.Execer, command []string, timeout time.Duration) (string, int32, error) {
	devNull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return "", 0, err
	}
	defer func() { _ = devNull.Close() }()
	r, w, err := os.Pipe()
	if err != nil {
		return "", 0, err
	}
	var (
		buf  bytes.Buffer
		mu   sync.Mutex
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		chunk := make([]byte, 4096)
		for {
			n, err := r.Read(chunk)
			mu.Lock()
			if room := MaxOutput - buf.Len(); room > 0 {
				buf.Write(chunk[:min(n, room)])
			}
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	code, err := ex.Exec(ctx, runtime.ExecRequest{Command: command, Stdin: devNull, Stdout: w, Stderr: w})
	_ = w.Close()
	select {
	case <-done:
	case <-time.After(time.Second):
	}
	_ = r.Close()
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		var se *runtime.StartError
		if errors.As(err, &se) {
			err = fmt.Errorf("%s: %s", se.Reason, se.Message)
		}
	}
	return buf.String(), code, err
}

// expandStatic expands $(VAR) references in command with the container's
// env entries that have a plain value, as the kubelet's exec probes and
// hooks do (they get no other variables).
func expandStatic(command []string, env []corev1.EnvVar) []string {
	vars := map[string]string{}
	for _, e := range env {
		if e.ValueFrom == nil {
			vars[e.Name] = e.Value
		}
	}
	out := make([]string, len(command))
	for i, arg := range command {
		out[i] = podconfig.Expand(arg, func(name string) (string, bool) { v, ok := vars[name]; return v, ok })
	}
	return out
}

// Outcome is the result of running a probe once.
type Outcome int

const (
	// Success: the check passed.
	Success Outcome = iota
	// Warning: the check passed with something to say (a ProbeWarning
	// event).
	Warning
	// Failure: the check failed.
	Failure
	// Error: the check could not be run; the result is thrown away.
	Error
)

// Check runs a probe's handler once and returns its outcome with the
// output the kubelet puts in events (the error's text for Error).
type Check func(ctx context.Context, timeout time.Duration) (Outcome, string)
