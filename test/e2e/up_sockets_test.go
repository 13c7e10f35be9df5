package e2e

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"fmt"
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

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// listeningSocket is a socket a process listens on.
type listeningSocket struct {
	// network is "tcp", "tcp6" or "unix".
	network string
	// addr is host:port for TCP, the path for unix sockets.
	addr string
}

// listeningSockets returns the sockets the process pid listens on: those
// among its open file descriptors that its network namespace lists as
// listening (TCP state 0A; unix sockets with the accepting flag).
func listeningSockets(t *testing.T, pid int) []listeningSocket {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(target, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]")] = true
		}
	}
	var out []listeningSocket
	for _, network := range []string{"tcp", "tcp6"} {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, network))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" || !inodes[f[9]] {
				continue
			}
			out = append(out, listeningSocket{network: network, addr: procTCPAddr(t, f[1])})
		}
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/unix", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		// Num RefCount Protocol Flags Type St Inode [Path]
		if len(f) < 7 || f[3] != "00010000" || !inodes[f[6]] {
			continue
		}
		path := "(unnamed)"
		if len(f) > 7 {
			path = f[7]
		}
		out = append(out, listeningSocket{network: "unix", addr: path})
	}
	return out
}

// procTCPAddr decodes an address of /proc/net/tcp{,6}: the IP in hex,
// 32-bit words in host (little-endian) order, and the port in hex.
func procTCPAddr(t *testing.T, s string) string {
	t.Helper()
	hexIP, hexPort, ok := strings.Cut(s, ":")
	raw, err := hex.DecodeString(hexIP)
	port, perr := strconv.ParseUint(hexPort, 16, 16)
	if !ok || err != nil || perr != nil || len(raw)%4 != 0 {
		t.Fatalf("cannot parse address %q", s)
	}
	ip := make(net.IP, len(raw))
	for i := 0; i < len(raw); i += 4 {
		ip[i], ip[i+1], ip[i+2], ip[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(int(port)))
}

// probe is one unauthenticated read tried on every TCP socket.
type probe struct {
	method, path, body string
}

// unauthenticatedProbes read what each server up runs would give away: the
// apiserver's Secrets, Prometheus metrics, etcd's keys (its JSON gateway)
// and members (its peer API), versions, and whatever / serves.
var unauthenticatedProbes = []probe{
	{method: http.MethodGet, path: "/"},
	{method: http.MethodGet, path: "/api/v1/secrets"},
	{method: http.MethodGet, path: "/metrics"},
	{method: http.MethodGet, path: "/debug/pprof/"},
	{method: http.MethodPost, path: "/v3/kv/range", body: `{"key":"AA==","range_end":"AA=="}`},
	{method: http.MethodGet, path: "/members"},
	{method: http.MethodGet, path: "/version"},
	{method: http.MethodGet, path: "/healthz"},
	{method: http.MethodGet, path: "/readyz"},
}

// podNetworkGateway is the node's address on the default pod network.
const podNetworkGateway = "10.244.0.1"

// openHealthPaths are the only answers an unauthenticated caller may get,
// on the controllers' health probe address (docs/operations.md).
var openHealthPaths = map[string]bool{"/healthz": true, "/readyz": true}

// healthAddrInLog matches the manager's log line naming its health address.
var healthAddrInLog = regexp.MustCompile(`"Serving health probes" address="([^"]+)"`)

// metricsAddrInLog matches the log line naming up's metrics address.
var metricsAddrInLog = regexp.MustCompile(`"Serving metrics" address="([^"]+)"`)

// TestUpSocketsRequireCredentials lists every socket a running `up`
// listens on and checks that none gives anything to a caller without
// credentials, over plain HTTP or HTTPS, except the controllers' health
// probes; every TCP socket is on loopback; etcd listens on no TCP port at all
// but on a unix socket in a directory only its owner can enter. It also
// checks that the metrics endpoint serves the admin (a client certificate of
// the cluster CA) and refuses a ServiceAccount the apiserver does not allow.
func TestUpSocketsRequireCredentials(t *testing.T) {
	ctx := context.Background()
	dataDir := t.TempDir()
	up, c, kc := startUp(t, dataDir)
	defer up.stop(t)
	// The node agent's kubelet API listens once its Node is registered,
	// with the port in it: the listing waits for it.
	var kubeletPort string
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil || len(nodes.Items) != 1 || nodes.Items[0].Status.DaemonEndpoints.KubeletEndpoint.Port == 0 {
			return false, nil
		}
		kubeletPort = strconv.Itoa(int(nodes.Items[0].Status.DaemonEndpoints.KubeletEndpoint.Port))
		return true, nil
	}); err != nil {
		t.Fatal("the node never registered with its kubelet port")
	}
	sockets := listeningSockets(t, up.cmd.Process.Pid)
	t.Logf("up listens on %v", sockets)
	logData, err := os.ReadFile(filepath.Join(dataDir, "logs", "jobkeeper.log"))
	if err != nil {
		t.Fatal(err)
	}
	var healthAddr, metricsAddr string
	if m := healthAddrInLog.FindSubmatch(logData); m != nil {
		healthAddr = string(m[1])
	}
	if m := metricsAddrInLog.FindSubmatch(logData); m != nil {
		metricsAddr = string(m[1])
	}

	plain := &http.Client{Timeout: 5 * time.Second}
	noCert := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
	var tcp int
	for _, s := range sockets {
		if s.network == "unix" {
			checkPrivateSocket(t, s.addr, dataDir)
			continue
		}
		tcp++
		host, port, _ := net.SplitHostPort(s.addr)
		// With a pod network (the default as root) the cluster DNS (53),
		// the relay to the apiserver (443) and the kubelet API (the
		// node's InternalIP, where the apiserver reaches it) listen on
		// the node's address on it, which only pods and this host reach.
		podNetwork := host == podNetworkGateway && (port == "53" || port == "443" || port == kubeletPort)
		if ip := net.ParseIP(host); ip == nil || (!ip.IsLoopback() && !podNetwork) {
			t.Errorf("%s listens on %s, not on loopback", s.network, s.addr)
		}
		for _, pr := range unauthenticatedProbes {
			for scheme, client := range map[string]*http.Client{"http": plain, "https": noCert} {
				req, err := http.NewRequestWithContext(ctx, pr.method, scheme+"://"+s.addr+pr.path, strings.NewReader(pr.body))
				if err != nil {
					t.Fatal(err)
				}
				resp, err := client.Do(req)
				if err != nil {
					continue // refused: no TLS without a client certificate, or no HTTP at all
				}
				body, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
				resp.Body.Close()
				if resp.StatusCode < 300 && !(s.addr == healthAddr && openHealthPaths[pr.path]) {
					t.Errorf("%s %s://%s%s without credentials: %s %q", pr.method, scheme, s.addr, pr.path, resp.Status, body)
				}
			}
		}
	}
	if tcp == 0 {
		t.Fatal("no TCP socket found: the listing is broken")
	}
	if healthAddr == "" {
		t.Error("the log names no health probe address")
	}
	if metricsAddr == "" {
		t.Fatal("the log names no metrics address")
	}

	// The admin, with its client certificate, reads the metrics.
	admin, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	adminTLS, err := rest.TLSConfigFor(admin)
	if err != nil {
		t.Fatal(err)
	}
	adminClient := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: adminTLS}}
	resp, err := adminClient.Get("https://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatalf("the admin cannot read the metrics: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "go_goroutines") {
		t.Errorf("the admin reading the metrics: %s %.300q", resp.Status, body)
	}
	// A ServiceAccount's token authenticates, and RBAC does not let it.
	waitDefaultServiceAccount(t, c, metav1.NamespaceDefault)
	tr, err := c.CoreV1().ServiceAccounts(metav1.NamespaceDefault).CreateToken(ctx, "default", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+metricsAddr+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+tr.Status.Token)
	resp, err = noCert.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a ServiceAccount without RBAC reading the metrics: %s, want 403 Forbidden", resp.Status)
	}
}

// checkPrivateSocket fails the test unless the unix socket at path is in a
// directory that only this user can enter (etcd's, under dataDir).
func checkPrivateSocket(t *testing.T, path, dataDir string) {
	t.Helper()
	if !strings.HasPrefix(path, dataDir+string(filepath.Separator)) {
		t.Errorf("unix socket %s is outside the data directory %s", path, dataDir)
	}
	st, err := os.Stat(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		t.Errorf("unix socket %s is in a directory of mode %v, open to others", path, st.Mode().Perm())
	}
}

// waitDefaultServiceAccount waits for the default ServiceAccount of ns.
func waitDefaultServiceAccount(t *testing.T, c kubernetes.Interface, ns string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := c.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("no default ServiceAccount in %s: %v", ns, err)
	}
}
