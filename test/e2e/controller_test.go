package e2e

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

var (
	metricsAddr = regexp.MustCompile(`"Serving metrics" address="([^"]+)"`)
	healthAddr  = regexp.MustCompile(`"Serving health probes" address="([^"]+)"`)
)

// TestControllerCommand runs `jobkeeper controller` against a control plane
// started by `jobkeeper up`, checks its endpoints and its clean shutdown.
func TestControllerCommand(t *testing.T) {
	up, _, kc := startUp(t, t.TempDir(), "--controllers=")
	p := start(t, "controller", "--kubeconfig", kc, "--managed-by", "e2e.example.com/controller",
		"--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", "127.0.0.1:0", "--leader-elect=false")
	health := p.waitForOutput(t, healthAddr, 30*time.Second)[1]
	metrics := p.waitForOutput(t, metricsAddr, 30*time.Second)[1]

	waitHTTP(t, "http://"+health+"/readyz", "ok")
	waitHTTP(t, "http://"+health+"/healthz", "ok")
	body := waitHTTP(t, "http://"+metrics+"/metrics", "")
	for _, want := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	p.stop(t)
	up.stop(t)
}

func TestControllerBadKubeconfig(t *testing.T) {
	for name, p := range map[string]*process{
		"jobkeeper controller": start(t, "controller", "--kubeconfig", "/nonexistent/kubeconfig"),
		"jobkeeper-controller": startBinary(t, leanBinary, "--kubeconfig", "/nonexistent/kubeconfig"),
	} {
		code, out := p.waitExit(t, 30*time.Second)
		if code == 0 || !strings.Contains(out, "/nonexistent/kubeconfig") {
			t.Errorf("%s: exit %d, output %q: want a non-zero exit naming the kubeconfig", name, code, out)
		}
		oneLine(t, name+" with a bad kubeconfig", out)
	}
}

// waitHTTP polls url until it answers 200 (with want in the body, if set)
// and returns the body.
func waitHTTP(t *testing.T, url, want string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(string(b), want) {
				return string(b)
			}
			last = resp.Status + ": " + string(b)
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s did not answer 200 %q: %s", url, want, last)
	return ""
}
