package main

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/process"
)

func TestOnlyLoopbackNameservers(t *testing.T) {
	for conf, want := range map[string]bool{
		"nameserver 127.0.0.53\noptions edns0 trust-ad\nsearch lan\n": true,
		"nameserver 127.0.0.1\nnameserver ::1\n":                      true,
		"nameserver 127.0.0.53\nnameserver 10.0.2.3\n":                false,
		"nameserver 192.168.1.1\n":                                    false,
		"search lan\n":                                                false,
		"":                                                            false,
		"nameserver bogus\n":                                          false,
	} {
		if got := onlyLoopbackNameservers([]byte(conf)); got != want {
			t.Errorf("onlyLoopbackNameservers(%q) = %v, want %v", conf, got, want)
		}
	}
}

func TestPodNetworkLockIsOneUpsAtATime(t *testing.T) {
	saved := podNetworkLock
	t.Cleanup(func() { podNetworkLock = saved })
	podNetworkLock = filepath.Join(t.TempDir(), "podnet.lock")
	first, err := lockPodNetwork("/data/a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockPodNetwork("/data/b"); err == nil || !strings.Contains(err.Error(), "/data/a") || !strings.Contains(err.Error(), "--network=host") {
		t.Errorf("a second lock gave %v, want a refusal naming /data/a and --network=host", err)
	}
	_ = first.Close()
	second, err := lockPodNetwork("/data/b")
	if err != nil {
		t.Fatalf("the lock once released: %v", err)
	}
	_ = second.Close()

	// A network left running by its up (--keep-running-on-stop) is that
	// up's until it is started again or reset.
	kept := t.TempDir()
	if err := os.MkdirAll(networkDir(filepath.Join(kept, "node")), 0o700); err != nil {
		t.Fatal(err)
	}
	third, err := lockPodNetwork(kept)
	if err != nil {
		t.Fatal(err)
	}
	_ = third.Close()
	if _, err := lockPodNetwork("/data/b"); err == nil || !strings.Contains(err.Error(), "--keep-running-on-stop") || !strings.Contains(err.Error(), kept) {
		t.Errorf("another up over a kept network gave %v, want a refusal naming %s", err, kept)
	}
	again, err := lockPodNetwork(kept)
	if err != nil {
		t.Fatalf("the kept network's own up: %v", err)
	}
	_ = again.Close()
}

func TestPodNetworkFlags(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("as another user --network=pod is refused before anything else (e2e: TestUpPodNetworkRefusedAsUser)")
	}
	for _, tc := range []struct {
		name   string
		f      nodeAgentFlags
		reject string
	}{
		{"unknown mode", nodeAgentFlags{network: "bridge"}, `--network "bridge"`},
		{"simulated pods", nodeAgentFlags{network: networkPod, podCIDR: "10.244.0.0/24"}, "--runtime=process"},
		{"no isolation", nodeAgentFlags{network: networkPod, podCIDR: "10.244.0.0/24", opts: nodeAgentOpts(process.Name, process.IsolationOff)}, "--pod-isolation=auto"},
		{"bad CIDR", nodeAgentFlags{network: networkPod, podCIDR: "10.244.0.0", opts: nodeAgentOpts(process.Name, process.IsolationAuto)}, "--pod-cidr"},
		{"too small", nodeAgentFlags{network: networkPod, podCIDR: "10.244.0.0/31", opts: nodeAgentOpts(process.Name, process.IsolationAuto)}, "at least 4 addresses"},
		{"IPv6", nodeAgentFlags{network: networkPod, podCIDR: "fd00::/64", opts: nodeAgentOpts(process.Name, process.IsolationAuto)}, "IPv4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.f.validateNetwork()
			if err == nil || !strings.Contains(err.Error(), tc.reject) {
				t.Errorf("validateNetwork() = %v, want an error with %q", err, tc.reject)
			}
		})
	}
	ok := nodeAgentFlags{network: networkPod, podCIDR: "10.244.1.7/24", opts: nodeAgentOpts(process.Name, process.IsolationAuto)}
	if err := ok.validateNetwork(); err != nil {
		t.Fatal(err)
	} else if ok.cidr.String() != "10.244.1.0/24" {
		t.Errorf("the pod CIDR is %s, want it masked", ok.cidr)
	}
}

// nodeAgentOpts are node agent options with a runtime and an isolation.
func nodeAgentOpts(runtime, isolation string) nodeagent.Options {
	return nodeagent.Options{Runtime: runtime, Isolation: isolation}
}

// TestAPIServerEndpoints: the relay is published as the kubernetes
// Service's Endpoints (not mirrored) and EndpointSlice (not managed by a
// controller), and an earlier up's other address is replaced.
func TestAPIServerEndpoints(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(&corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default", ResourceVersion: "1"},
		Subsets:    []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: "10.244.9.1"}}}},
	})
	relay := netip.MustParseAddrPort("10.244.0.1:443")
	for range 2 { // the second finds everything in place
		if err := ensureAPIServerEndpoints(ctx, client, relay); err != nil {
			t.Fatal(err)
		}
	}
	ep, err := client.CoreV1().Endpoints("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ep.Subsets) != 1 || len(ep.Subsets[0].Addresses) != 1 || ep.Subsets[0].Addresses[0].IP != "10.244.0.1" ||
		len(ep.Subsets[0].Ports) != 1 || ep.Subsets[0].Ports[0].Port != 443 || ep.Subsets[0].Ports[0].Name != "https" {
		t.Errorf("Endpoints: %+v, want 10.244.0.1 with https 443", ep.Subsets)
	}
	if ep.Labels[discoveryv1.LabelSkipMirror] != "true" {
		t.Errorf("Endpoints labels %v: want them not mirrored", ep.Labels)
	}
	slices, err := client.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=kubernetes"})
	if err != nil {
		t.Fatal(err)
	}
	if len(slices.Items) != 1 {
		t.Fatalf("%d EndpointSlices of the kubernetes Service, want 1", len(slices.Items))
	}
	s := slices.Items[0]
	if s.AddressType != discoveryv1.AddressTypeIPv4 || len(s.Endpoints) != 1 || s.Endpoints[0].Addresses[0] != "10.244.0.1" ||
		len(s.Ports) != 1 || *s.Ports[0].Port != 443 || s.Labels[discoveryv1.LabelManagedBy] != "" {
		t.Errorf("EndpointSlice: %+v", s)
	}
	writes := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "create" || a.GetVerb() == "update" {
			writes++
		}
	}
	if writes != 2 {
		t.Errorf("%d writes, want 2 (the Endpoints updated, the slice created; nothing the second time)", writes)
	}
}

// TestKubeletPortAt: the kubelet's port when it is free, else any.
func TestKubeletPortAt(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:10250")
	if err != nil {
		t.Skipf("127.0.0.1:10250 is taken here: %v", err)
	}
	if got := kubeletPortAt("127.0.0.1"); got != 0 {
		t.Errorf("with 10250 taken: %d, want 0 (any free port)", got)
	}
	_ = ln.Close()
	if got := kubeletPortAt("127.0.0.1"); got != defaultKubeletPort {
		t.Errorf("with 10250 free: %d, want %d", got, defaultKubeletPort)
	}
}
