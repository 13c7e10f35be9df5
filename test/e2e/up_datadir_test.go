package e2e

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

var (
	// apiserverLine is the banner's first line, with the apiserver's URL.
	apiserverLine = regexp.MustCompile(`kube-apiserver at (https://\S+)`)
	// metricsLine says where up's metrics are.
	metricsLine = regexp.MustCompile(`(?m)^jobkeeper's metrics: https://127\.0\.0\.1:\d+/metrics \(read them with: jobkeeper metrics --data-dir \S+\)$`)
	// logsLine ends the banner.
	logsLine = regexp.MustCompile(`^Logs: `)
)

// upPort starts up on dataDir with the extra flags, waits for its banner and
// returns the process and the apiserver's port.
func upPort(t *testing.T, dataDir string, extra ...string) (*process, string) {
	t.Helper()
	p, _, _ := startUp(t, dataDir, extra...)
	p.waitForLine(t, logsLine, 10*time.Second)
	m := apiserverLine.FindStringSubmatch(p.output())
	if m == nil {
		t.Fatalf("no apiserver URL in the banner:\n%s", p.output())
	}
	u, err := url.Parse(m[1])
	if err != nil {
		t.Fatal(err)
	}
	return p, u.Port()
}

// TestUpDataDir checks what up says and does about its data directory
// across starts: a second up on a directory in use is told so whatever its
// port; --port 0 keeps the last port while it is free and the banner says
// when it is new; a data directory and a kubeconfig open to other users are
// made private, and the banner says so; the banner says where up's metrics
// are, and `jobkeeper metrics` reads them while up runs.
func TestUpDataDir(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	first, port := upPort(t, dataDir)
	if strings.Contains(first.output(), "port is new") {
		t.Errorf("first start says the port is new:\n%s", first.output())
	}

	// The first up holds both the directory and its port.
	for name, args := range map[string][]string{
		"default port":    {"up", "--data-dir", dataDir},
		"the first one's": {"up", "--data-dir", dataDir, "--port", port},
		"any port":        {"up", "--data-dir", dataDir, "--port", "0"},
	} {
		code, out := start(t, args...).waitExit(t, 30*time.Second)
		if code == 0 || !strings.Contains(out, "data directory "+dataDir+" is in use by another jobkeeper") || strings.Contains(out, "already in use") {
			t.Errorf("second up, %s: exit %d, output:\n%s", name, code, out)
		}
		oneLine(t, "second up, "+name, out)
	}
	first.stop(t)

	// Free: the port is kept, and nothing is said about it.
	again, port2 := upPort(t, dataDir)
	if port2 != port {
		t.Errorf("restart with --port 0: port %s, want the last one, %s", port2, port)
	}
	if strings.Contains(again.output(), "port is new") {
		t.Errorf("restart on the same port says it is new:\n%s", again.output())
	}
	again.stop(t)

	// Taken by another program: any free port, and the banner says so.
	// Meanwhile the directory and the kubeconfig were opened to others.
	busy, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		t.Fatalf("holding the last port: %v", err)
	}
	defer busy.Close()
	kubeconfig := filepath.Join(dataDir, "kubeconfig")
	if err := os.Chmod(dataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(kubeconfig, 0o644); err != nil {
		t.Fatal(err)
	}
	moved, port3 := upPort(t, dataDir)
	if port3 == port {
		t.Fatalf("up served on the busy port %s", port)
	}
	out := moved.output()
	for _, want := range []string{
		"The apiserver's port is new (" + port3 + ", was " + port + "): kubeconfigs written earlier for this data directory are stale",
		"The data directory " + dataDir + " was open to other users (mode 0755); it is now private (mode 0700).",
		"The kubeconfig " + kubeconfig + " holds credentials and was readable by other users (mode 0644); it is now mode 0600.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("banner does not say %q:\n%s", want, out)
		}
	}
	for path, want := range map[string]os.FileMode{dataDir: 0o700, kubeconfig: 0o600} {
		if st, err := os.Stat(path); err != nil || st.Mode().Perm() != want {
			t.Errorf("%s: %v, %v; want mode %#o", path, st, err, want)
		}
	}

	// The banner says where up's own metrics are, and `jobkeeper metrics`
	// reads them with the kubeconfig's credentials.
	if !metricsLine.MatchString(out) {
		t.Errorf("banner does not say where the metrics are:\n%s", out)
	}
	code, metrics := start(t, "metrics", "--data-dir", dataDir).waitExit(t, 30*time.Second)
	if code != 0 || !strings.Contains(metrics, "# TYPE job_controller_api_queue_wait_seconds histogram") {
		t.Errorf("jobkeeper metrics: exit %d, output:\n%.2000s", code, metrics)
	}
	moved.stop(t)
	// etcd's JSON lines, its client's included, go to etcd.log, never here.
	for _, p := range []*process{first, again, moved} {
		if strings.Contains(p.output(), `{"level":`) {
			t.Errorf("up printed etcd's log lines:\n%s", p.output())
		}
	}
	code, metrics = start(t, "metrics", "--data-dir", dataDir).waitExit(t, 30*time.Second)
	if code == 0 || !strings.Contains(metrics, "no jobkeeper up serves metrics") {
		t.Errorf("jobkeeper metrics after the stop: exit %d, output:\n%s", code, metrics)
	}
}
