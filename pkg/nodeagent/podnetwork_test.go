package nodeagent

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	testingclock "k8s.io/utils/clock/testing"

	"jobkeeper.dev/jobkeeper/internal/testimages"
	"jobkeeper.dev/jobkeeper/pkg/images"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/imagemanager"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/lifecycle"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/podnet"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
	"jobkeeper.dev/jobkeeper/test/builder"
)

// fakePodNetwork hands out 10.244.0.<n> and records what the agent asks.
type fakePodNetwork struct {
	mu      sync.Mutex
	byPod   map[string]netip.Addr
	next    byte
	fail    error
	ensured []string
	removed []string
	ports   map[string][]podnet.PortMapping
}

func newFakePodNetwork() *fakePodNetwork {
	return &fakePodNetwork{byPod: map[string]netip.Addr{}, next: 2}
}

func (n *fakePodNetwork) Ensure(uid string) (string, netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.ensured = append(n.ensured, uid)
	if n.fail != nil {
		return "", netip.Addr{}, n.fail
	}
	ip, ok := n.byPod[uid]
	if !ok {
		ip = netip.AddrFrom4([4]byte{10, 244, 0, n.next})
		n.next++
		n.byPod[uid] = ip
	}
	return "/netns/" + uid, ip, nil
}

func (n *fakePodNetwork) Lookup(uid string) (string, netip.Addr, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ip, ok := n.byPod[uid]
	return "/netns/" + uid, ip, ok
}

func (n *fakePodNetwork) Remove(uid string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.byPod, uid)
	n.removed = append(n.removed, uid)
	return nil
}

func (n *fakePodNetwork) Prune(live func(string) bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for uid := range n.byPod {
		if !live(uid) {
			delete(n.byPod, uid)
			n.removed = append(n.removed, uid)
		}
	}
	return nil
}

func (n *fakePodNetwork) DialContext(context.Context, string, string, string) (net.Conn, error) {
	return nil, errors.New("not in a test")
}

func (n *fakePodNetwork) MapPorts(uid string, ports []podnet.PortMapping) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ports == nil {
		n.ports = map[string][]podnet.PortMapping{}
	}
	n.ports[uid] = ports
	return nil
}

func (n *fakePodNetwork) portsOf(uid string) ([]podnet.PortMapping, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	p, ok := n.ports[uid]
	return p, ok
}

func (n *fakePodNetwork) setFail(err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.fail = err
}

func (n *fakePodNetwork) wasRemoved(uid string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Contains(n.removed, uid)
}

func (n *fakePodNetwork) ensuredCount() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.ensured)
}

// netFakeRuntime is a fake runtime that joins network namespaces.
type netFakeRuntime struct{ *fakeRuntime }

func (netFakeRuntime) NetworkNamespaces() (bool, string) { return true, "" }

// startNetworkAgent runs an agent whose pods get networks of their own from
// net, with cluster DNS at 10.244.0.1, the node's address (NodeIP).
func startNetworkAgent(t *testing.T, pn *fakePodNetwork, pods ...*corev1.Pod) (*testAgent, *fakeRuntime) {
	t.Helper()
	var rt *fakeRuntime
	var objs []kruntime.Object
	for _, p := range pods {
		p.Spec.NodeName = testNode
		objs = append(objs, p)
	}
	ta := startAgentOn(t, Options{MaxPods: 10, Runtime: "simulated", PodNetwork: pn, ClusterDNS: []string{"10.244.0.1"}, NodeIP: "10.244.0.1"}, func(clk *testingclock.FakeClock) runtime.Runtime {
		rt = newFakeRuntime(clk)
		return netFakeRuntime{rt}
	}, objs...)
	return ta, rt
}

func TestPodNetworkOfItsOwn(t *testing.T) {
	pod := builder.MakePod("p", "ns").UID("u1").Obj()
	pod.Spec.Containers[0].Env = []corev1.EnvVar{
		{Name: "MY_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		{Name: "MY_IPS", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIPs"}}},
		{Name: "MY_HOST", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}},
	}
	pod.Spec.Containers[0].Ports = []corev1.ContainerPort{
		{ContainerPort: 8080, HostPort: 18080},
		{ContainerPort: 53, HostPort: 5353, Protocol: corev1.ProtocolUDP, HostIP: "10.1.2.3"},
		{ContainerPort: 9090}, // no hostPort
		{ContainerPort: 7, HostPort: 7, Protocol: corev1.ProtocolSCTP},
	}
	host := builder.MakePod("h", "ns").UID("u2").Obj()
	host.Spec.HostNetwork = true
	host.Spec.Containers[0].Env = pod.Spec.Containers[0].Env
	pn := newFakePodNetwork()
	ta, rt := startNetworkAgent(t, pn, pod, host)

	h := rt.podAttempt(t, "p", "main", 0)
	if h.spec.NetworkNamespace != "/netns/u1" {
		t.Errorf("the container's network namespace is %q, want the pod's", h.spec.NetworkNamespace)
	}
	wantPorts := []podnet.PortMapping{{HostPort: 18080, ContainerPort: 8080}, {HostIP: netip.MustParseAddr("10.1.2.3"), HostPort: 5353, ContainerPort: 53, UDP: true}}
	if got, ok := pn.portsOf("u1"); !ok || !slices.Equal(got, wantPorts) {
		t.Errorf("host ports %+v %v, want %+v", got, ok, wantPorts)
	}
	for _, want := range []string{"MY_IP=10.244.0.2", "MY_IPS=10.244.0.2", "MY_HOST=10.244.0.1"} {
		if !slices.Contains(h.spec.Env, want) {
			t.Errorf("environment %v lacks %s", h.spec.Env, want)
		}
	}
	got := ta.waitPod(t, "p", phaseIs(corev1.PodRunning))
	if got.Status.PodIP != "10.244.0.2" || len(got.Status.PodIPs) != 1 || got.Status.PodIPs[0].IP != "10.244.0.2" {
		t.Errorf("status podIP %q podIPs %v, want the pod's own", got.Status.PodIP, got.Status.PodIPs)
	}
	if got.Status.HostIP != "10.244.0.1" || len(got.Status.HostIPs) != 1 || got.Status.HostIPs[0].IP != "10.244.0.1" {
		t.Errorf("hostIP %q hostIPs %v, want the node's address", got.Status.HostIP, got.Status.HostIPs)
	}
	node, err := ta.client.CoreV1().Nodes().Get(context.Background(), testNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.244.0.1"}) {
		t.Errorf("node addresses %v, want InternalIP 10.244.0.1", node.Status.Addresses)
	}
	// The managed files of image mode (and of isolated host mode).
	if _, err := ta.agent.podEtcFiles(got, "p"); err != nil {
		t.Fatal(err)
	}
	etc := filepath.Join(ta.agent.podDir("u1"), "etc")
	hosts, err := os.ReadFile(filepath.Join(etc, "hosts"))
	if err != nil || !strings.Contains(string(hosts), "10.244.0.2\tp") {
		t.Errorf("/etc/hosts lacks the pod's address: %q %v", hosts, err)
	}
	resolv, err := os.ReadFile(filepath.Join(etc, "resolv.conf"))
	if err != nil || !strings.Contains(string(resolv), "nameserver 10.244.0.1\n") || !strings.Contains(string(resolv), "search ns.svc.cluster.local svc.cluster.local cluster.local") {
		t.Errorf("resolv.conf is not the cluster's: %q %v", resolv, err)
	}

	// A hostNetwork pod keeps the node's network, and has its address.
	hh := rt.podAttempt(t, "h", "main", 0)
	if hh.spec.NetworkNamespace != "" {
		t.Errorf("a hostNetwork pod's container joins %q", hh.spec.NetworkNamespace)
	}
	for _, want := range []string{"MY_IP=10.244.0.1", "MY_IPS=10.244.0.1", "MY_HOST=10.244.0.1"} {
		if !slices.Contains(hh.spec.Env, want) {
			t.Errorf("the hostNetwork pod's environment %v lacks %s", hh.spec.Env, want)
		}
	}
	if got := ta.waitPod(t, "h", phaseIs(corev1.PodRunning)); got.Status.PodIP != "10.244.0.1" {
		t.Errorf("the hostNetwork pod's podIP is %q, want the node's", got.Status.PodIP)
	}

	// The pod finishes: its network goes; its status keeps the address.
	h.exit(0)
	got = ta.waitPod(t, "p", phaseIs(corev1.PodSucceeded))
	if got.Status.PodIP != "10.244.0.2" {
		t.Errorf("the finished pod's podIP is %q", got.Status.PodIP)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !pn.wasRemoved("u1") && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if !pn.wasRemoved("u1") {
		t.Error("the finished pod's network was not removed")
	}
	if pn.wasRemoved("u2") {
		t.Error("the hostNetwork pod's network was removed")
	}
}

func TestPodNetworkFailureWaits(t *testing.T) {
	pod := builder.MakePod("p", "ns").UID("u1").Obj()
	pn := newFakePodNetwork()
	pn.setFail(errors.New("no addresses left"))
	ta, rt := startNetworkAgent(t, pn, pod)

	got := ta.waitPod(t, "p", func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Waiting != nil &&
			strings.Contains(p.Status.ContainerStatuses[0].State.Waiting.Message, "no addresses left")
	})
	if w := got.Status.ContainerStatuses[0].State.Waiting; w.Reason != lifecycle.ReasonContainerCreating {
		t.Errorf("waiting reason %q, want ContainerCreating", w.Reason)
	}
	if got.Status.PodIP != "" {
		t.Errorf("a pod without its network shows podIP %q", got.Status.PodIP)
	}
	if msgs := ta.eventMessages(t, ReasonFailedCreatePodSandBox); len(msgs) == 0 || !strings.Contains(msgs[0], "no addresses left") {
		t.Errorf("FailedCreatePodSandBox events %q", msgs)
	}
	if rt.count("main") != 0 {
		t.Error("the container started without its network")
	}
	// Once the network can be made, the container starts on its retry.
	pn.setFail(nil)
	before := pn.ensuredCount()
	ta.stepUntil(t, sandboxRetry, func() bool { return rt.count("main") == 1 })
	if pn.ensuredCount() <= before {
		t.Error("the network was not tried again")
	}
	if got := ta.waitPod(t, "p", phaseIs(corev1.PodRunning)); got.Status.PodIP != "10.244.0.2" {
		t.Errorf("podIP %q after the retry", got.Status.PodIP)
	}
}

// TestPodNetworkBeforeImage: as the kubelet makes a pod's sandbox before
// pulling its images, a pod whose image cannot be pulled has its address.
func TestPodNetworkBeforeImage(t *testing.T) {
	store, err := images.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	pod := imagePod("p", testimages.Serve(t, nil)+"/test/missing:v1", corev1.PullIfNotPresent)
	pod.Spec.NodeName = testNode
	pn := newFakePodNetwork()
	ta := startAgentOn(t, Options{MaxPods: 10, Runtime: "simulated", imageStore: store, PodNetwork: pn, NodeIP: "10.244.0.1"}, func(clk *testingclock.FakeClock) runtime.Runtime {
		return netFakeRuntime{newFakeRuntime(clk)}
	}, pod)
	got := ta.waitPod(t, "p", func(p *corev1.Pod) bool { return waitingReason(p) == imagemanager.ReasonErrImagePull })
	if got.Status.PodIP != "10.244.0.2" {
		t.Errorf("a pod waiting for its image has podIP %q, want its own", got.Status.PodIP)
	}
}
