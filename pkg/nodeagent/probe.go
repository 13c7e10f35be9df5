package nodeagent

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/clock"
)

// ReasonProbeNotSupported is the reason of the Warning event recorded when a
// container's startup probe is of a kind the agent does not run (exec,
// grpc): the container then counts as started at once.
const ReasonProbeNotSupported = "ProbeNotSupported"

// Probe defaults, as the API defaults them.
const (
	// defaultProbePeriod is periodSeconds when unset.
	defaultProbePeriod = 10 * time.Second
	// defaultProbeTimeout is timeoutSeconds when unset.
	defaultProbeTimeout = time.Second
	// defaultFailureThreshold is failureThreshold when unset.
	defaultFailureThreshold = 3
)

// probeResult is the outcome of a startup probe for one attempt.
type probeResult struct {
	// attempt is the attempt the probe ran against.
	attempt int32
	// ok is true when the probe succeeded, false when it reached its
	// failure threshold.
	ok bool
}

// probeCheck runs one probe and returns whether it succeeded, with the
// output the kubelet would put in an Unhealthy event on failure.
type probeCheck func(ctx context.Context, timeout time.Duration) (bool, string)

// unsupportedProbe returns why the agent cannot run p, "" when it can:
// httpGet and tcpSocket probes run against 127.0.0.1 (pods share the host's
// network); exec and grpc probes are not run.
func unsupportedProbe(p *corev1.Probe) string {
	switch {
	case p.HTTPGet != nil, p.TCPSocket != nil:
		return ""
	case p.Exec != nil:
		return "exec probes are not supported by the node agent (only httpGet and tcpSocket)"
	case p.GRPC != nil:
		return "grpc probes are not supported by the node agent (only httpGet and tcpSocket)"
	default:
		return "the probe has no handler"
	}
}

// checkFor returns the check of an httpGet or tcpSocket probe of container c.
func checkFor(p *corev1.Probe, c *corev1.Container) probeCheck {
	switch {
	case p.HTTPGet != nil:
		return httpCheck(p.HTTPGet, c)
	case p.TCPSocket != nil:
		return tcpCheck(p.TCPSocket, c)
	}
	return func(context.Context, time.Duration) (bool, string) { return false, unsupportedProbe(p) }
}

// probePort resolves a probe's port, a number or the name of one of the
// container's ports.
func probePort(port intstr.IntOrString, c *corev1.Container) (int, error) {
	if port.Type == intstr.Int {
		if port.IntVal <= 0 || port.IntVal > 65535 {
			return 0, fmt.Errorf("invalid port number: %d", port.IntVal)
		}
		return int(port.IntVal), nil
	}
	for _, cp := range c.Ports {
		if cp.Name == port.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("unable to find port %q in container %s", port.StrVal, c.Name)
}

// probeHost is the host a probe reaches: its own, else the pod's IP.
func probeHost(host string) string {
	if host == "" {
		return nodeIP
	}
	return host
}

// httpCheck is an HTTP GET that succeeds with a status in [200, 400).
// Redirects are not followed (a 3xx is a success); certificates are not
// verified, as the kubelet's HTTPS probes.
func httpCheck(g *corev1.HTTPGetAction, c *corev1.Container) probeCheck {
	return func(ctx context.Context, timeout time.Duration) (bool, string) {
		port, err := probePort(g.Port, c)
		if err != nil {
			return false, err.Error()
		}
		scheme := "http"
		if g.Scheme == corev1.URISchemeHTTPS {
			scheme = "https"
		}
		u := &url.URL{Scheme: scheme, Host: net.JoinHostPort(probeHost(g.Host), strconv.Itoa(port)), Path: g.Path}
		if u.Path == "" {
			u.Path = "/"
		}
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return false, err.Error()
		}
		req.Header.Set("User-Agent", "kube-probe/jobkeeper")
		for _, h := range g.HTTPHeaders {
			if h.Name == "Host" {
				req.Host = h.Value
				continue
			}
			req.Header.Add(h.Name, h.Value)
		}
		client := &http.Client{
			Transport:     &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}, //nolint:gosec // probes do not verify, as the kubelet's
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
		res, err := client.Do(req)
		if err != nil {
			return false, err.Error()
		}
		_ = res.Body.Close()
		if res.StatusCode >= http.StatusOK && res.StatusCode < http.StatusBadRequest {
			return true, ""
		}
		return false, fmt.Sprintf("HTTP probe failed with statuscode: %d", res.StatusCode)
	}
}

// tcpCheck succeeds when a TCP connection opens.
func tcpCheck(s *corev1.TCPSocketAction, c *corev1.Container) probeCheck {
	return func(ctx context.Context, timeout time.Duration) (bool, string) {
		port, err := probePort(s.Port, c)
		if err != nil {
			return false, err.Error()
		}
		d := net.Dialer{Timeout: timeout}
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(probeHost(s.Host), strconv.Itoa(port)))
		if err != nil {
			return false, err.Error()
		}
		_ = conn.Close()
		return true, ""
	}
}

// runStartupProbe probes until the first success or failureThreshold
// consecutive failures, then reports once. The first probe runs
// initialDelaySeconds after the start, the next ones every periodSeconds.
// Each failure is passed to failed (the kubelet records an Unhealthy event
// for it). It returns early when ctx ends, without reporting.
func runStartupProbe(ctx context.Context, clk clock.WithTicker, p *corev1.Probe, check probeCheck, failed func(output string), report func(ok bool)) {
	period, timeout, threshold := defaultProbePeriod, defaultProbeTimeout, int32(defaultFailureThreshold)
	if p.PeriodSeconds > 0 {
		period = time.Duration(p.PeriodSeconds) * time.Second
	}
	if p.TimeoutSeconds > 0 {
		timeout = time.Duration(p.TimeoutSeconds) * time.Second
	}
	if p.FailureThreshold > 0 {
		threshold = p.FailureThreshold
	}
	sleep := func(d time.Duration) bool {
		if d <= 0 {
			return ctx.Err() == nil
		}
		t := clk.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C():
			return true
		}
	}
	if !sleep(time.Duration(p.InitialDelaySeconds) * time.Second) {
		return
	}
	for failures := int32(0); ; {
		ok, output := check(ctx, timeout)
		if ctx.Err() != nil {
			return
		}
		if ok {
			report(true)
			return
		}
		failed(output)
		if failures++; failures >= threshold {
			report(false)
			return
		}
		if !sleep(period) {
			return
		}
	}
}

// startProbe starts the startup probe of c's running attempt. Its outcome
// reaches the worker through probeResults and a poke.
func (w *worker) startProbe(ctx context.Context, c *container) {
	w.endProbe(c)
	ctx, cancel := context.WithCancel(ctx)
	c.stopProbe = cancel
	name, attempt, p := c.spec.Name, c.state.attempt, c.spec.StartupProbe
	check := checkFor(p, c.spec)
	failed := func(output string) {
		w.agent.event(w.currentPod(), corev1.EventTypeWarning, "Unhealthy", "Startup probe failed: "+output)
	}
	report := func(ok bool) {
		w.mu.Lock()
		w.probeResults[name] = probeResult{attempt: attempt, ok: ok}
		w.mu.Unlock()
		w.poke()
	}
	go runStartupProbe(ctx, w.agent.clock, p, check, failed, report)
}

// endProbe stops c's startup probe, if one runs.
func (w *worker) endProbe(c *container) {
	if c.stopProbe != nil {
		c.stopProbe()
		c.stopProbe = nil
	}
}

// stopProbes stops every startup probe (the worker is returning).
func (w *worker) stopProbes() {
	for _, c := range w.all() {
		w.endProbe(c)
	}
}

// collectProbes delivers the startup probe results that arrived, each to
// the attempt it probed; a result for an attempt that ended is dropped.
func (w *worker) collectProbes(ctx context.Context) bool {
	w.mu.Lock()
	results := w.probeResults
	w.probeResults = map[string]probeResult{}
	w.mu.Unlock()
	if len(results) == 0 {
		return false
	}
	pod := w.currentPod()
	for _, c := range w.all() {
		r, ok := results[c.spec.Name]
		if !ok || r.attempt != c.state.attempt || c.state.phase != phaseRunning {
			continue
		}
		ev := event{kind: evProbeSucceeded, at: w.agent.clock.Now()}
		if !r.ok {
			ev.kind, ev.grace = evProbeFailed, containerGrace(pod)
		}
		w.apply(ctx, pod, c, ev)
	}
	return true
}

// containerGrace is the grace period of a container killed on its own (a
// failed startup probe): the pod's terminationGracePeriodSeconds.
func containerGrace(pod *corev1.Pod) time.Duration {
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		return time.Duration(*g) * time.Second
	}
	return time.Duration(corev1.DefaultTerminationGracePeriodSeconds) * time.Second
}
