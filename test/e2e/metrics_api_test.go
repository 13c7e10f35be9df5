package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"

	"jobkeeper.dev/jobkeeper/test/builder"
)

// TestUpResourceMetrics: on up as root, a busy container limited to 200m
// CPU is held to its limit, and the resource metrics API (what kubectl
// top reads) shows it within 10% of that, as it shows the node; the node
// agent's kubelet endpoints /stats/summary and /metrics/resource report
// the same container.
func TestUpResourceMetrics(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("pods get cgroups, and so usage figures, only when up runs as root (docs/node-agent.md)")
	}
	ctx := context.Background()
	dataDir := t.TempDir()
	up, c, kc := startUp(t, dataDir)
	defer up.stop(t)
	up.waitForOutput(t, regexp.MustCompile(`Pods and containers get cgroups with their cpu and memory limits`), 30*time.Second)
	pod := builder.MakePod("busy", "default").Command("sh", "-c", "while :; do :; done").Obj()
	pod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	if _, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	mc, err := metricsclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Two samples 10 s apart are needed for a rate; the APIService must
	// be available first.
	var cpu, mem resource.Quantity
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pm, err := mc.MetricsV1beta1().PodMetricses("default").Get(ctx, "busy", metav1.GetOptions{})
		if err != nil || len(pm.Containers) != 1 {
			return false, nil
		}
		cpu, mem = pm.Containers[0].Usage[corev1.ResourceCPU], pm.Containers[0].Usage[corev1.ResourceMemory]
		return cpu.MilliValue() > 0, nil
	}); err != nil {
		t.Fatalf("no metrics for pod busy in the resource metrics API: %v", err)
	}
	t.Logf("pod busy: cpu %s, memory %s", cpu.String(), mem.String())
	if cpu.MilliValue() > 220 {
		t.Errorf("the container used %dm CPU over the window, above its 200m limit (+10%%)", cpu.MilliValue())
	}
	if mem.IsZero() || mem.Value() > 64<<20 {
		t.Errorf("memory working set %s, want some, under the 64Mi limit", mem.String())
	}
	nodes, err := mc.MetricsV1beta1().NodeMetricses().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 1 || nodes.Items[0].Usage.Cpu().IsZero() || nodes.Items[0].Usage.Memory().IsZero() {
		t.Fatalf("node metrics %+v (err %v), want the node's usage", nodes, err)
	}

	// The kubelet endpoints, as the apiserver's kubelet client reaches them.
	node, err := c.CoreV1().Nodes().Get(ctx, nodes.Items[0].Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	get := kubeletGetter(t, dataDir, internalIP(t, node), node.Status.DaemonEndpoints.KubeletEndpoint.Port)
	var summary statsapi.Summary
	if err := json.Unmarshal(get("/stats/summary"), &summary); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range summary.Pods {
		if p.PodRef.Name == "busy" && len(p.Containers) == 1 && p.Containers[0].CPU != nil && p.Containers[0].CPU.UsageNanoCores != nil {
			found = true
			if n := *p.Containers[0].CPU.UsageNanoCores; n > 220_000_000 {
				t.Errorf("/stats/summary: %d nanocores, above the 200m limit", n)
			}
		}
	}
	if !found || summary.Node.CPU == nil || summary.Node.Memory == nil {
		t.Errorf("/stats/summary has no usage of pod busy or of the node: %+v", summary)
	}
	text := string(get("/metrics/resource"))
	for _, want := range []string{`container_cpu_usage_seconds_total{container="main",namespace="default",pod="busy"}`,
		`container_memory_working_set_bytes{container="main",namespace="default",pod="busy"}`, "node_cpu_usage_seconds_total ", "resource_scrape_error 0"} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics/resource has no %s:\n%s", want, text)
		}
	}
}

// internalIP is the node's InternalIP address, where the apiserver reaches
// its kubelet endpoints (127.0.0.1, or the node's address on the pod
// network with --network=pod).
func internalIP(t *testing.T, node *corev1.Node) string {
	t.Helper()
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	t.Fatalf("the node has no InternalIP: %+v", node.Status.Addresses)
	return ""
}

// kubeletGetter returns a GET of the node agent's endpoints at host:port with
// the apiserver's kubelet client certificate (from up's data directory).
func kubeletGetter(t *testing.T, dataDir, host string, port int32) func(path string) []byte {
	pki := filepath.Join(dataDir, "pki")
	cert, err := tls.LoadX509KeyPair(filepath.Join(pki, "apiserver-kubelet-client.crt"), filepath.Join(pki, "apiserver-kubelet-client.key"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join(pki, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool}}}
	return func(path string) []byte {
		t.Helper()
		resp, err := client.Get("https://" + net.JoinHostPort(host, strconv.Itoa(int(port))) + path)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s %s (err %v)", path, resp.Status, b, err)
		}
		return b
	}
}
