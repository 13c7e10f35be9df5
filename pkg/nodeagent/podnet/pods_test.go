package podnet

import (
	"context"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// openPinned opens a pinned namespace, closed at the test's end.
func openPinned(t *testing.T, path string) netns.NsHandle {
	t.Helper()
	ns, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ns.Close() })
	return ns
}

func TestPodsPinNamespaces(t *testing.T) {
	node := newNamespace(t)
	dir := t.TempDir()
	// The kubernetes Service's address, sent to a relay of the node's.
	service := netip.MustParseAddrPort("10.0.0.1:443")
	relay := netip.AddrPortFrom(gateway(DefaultPodCIDR), 8443)
	// A DNS Service's address, in UDP, sent to the node's server.
	dnsService := netip.MustParseAddrPort("10.0.0.10:53")
	dnsServer := netip.AddrPortFrom(gateway(DefaultPodCIDR), 5353)
	_, pods := setUpPods(t, node, Config{StateDir: filepath.Join(dir, "ipam"), ServiceCIDR: netip.MustParsePrefix("10.0.0.0/24"), Redirects: []Redirect{{From: service, To: relay}, {From: dnsService, To: dnsServer, UDP: true}}})

	pathA, ipA, err := pods.Ensure("pod-a")
	if err != nil {
		t.Fatal(err)
	}
	if !isPinned(pathA) {
		t.Fatalf("%s is not a pinned namespace", pathA)
	}
	again, ipAgain, err := pods.Ensure("pod-a")
	if err != nil || again != pathA || ipAgain != ipA {
		t.Fatalf("second Ensure = %s %s %v, want %s %s", again, ipAgain, err, pathA, ipA)
	}
	pathB, ipB, err := pods.Ensure("pod-b")
	if err != nil {
		t.Fatal(err)
	}
	if ipA == ipB || pathA == pathB {
		t.Fatalf("two pods got %s %s and %s %s", pathA, ipA, pathB, ipB)
	}

	// With no process in them, the pods reach each other: the namespaces
	// live by their pins.
	nsA, nsB := openPinned(t, pathA), openPinned(t, pathB)
	// Any port and ICMP echo without a capability, as containerd 2 sets
	// a pod's namespace up.
	for _, sc := range podSysctls {
		var got []byte
		if err := InNamespace(nsA, func() (err error) { got, err = os.ReadFile(sc.path); return err }); err != nil {
			t.Fatal(err)
		}
		if v := strings.Join(strings.Fields(string(got)), " "); v != sc.value {
			t.Errorf("%s in the pod's namespace is %q, want %q", sc.path, v, sc.value)
		}
	}
	addr := listen(t, nsA, ":0")
	_, port, _ := net.SplitHostPort(addr)
	if from := dial(t, nsB, net.JoinHostPort(ipA.String(), port)); from != ipB.String() {
		t.Errorf("pod a saw pod b as %s, want %s", from, ipB)
	}

	listen(t, node, relay.String())
	if from := dial(t, nsB, service.String()); from != ipB.String() {
		t.Errorf("the relay saw pod b as %s, want %s", from, ipB)
	}
	// The node itself (its hostNetwork pods) too, through its loopback
	// (up on any host, not yet in a new namespace).
	if err := setLoopbackUp(node); err != nil {
		t.Fatal(err)
	}
	if from := dial(t, node, service.String()); from != gateway(DefaultPodCIDR).String() {
		t.Errorf("the relay saw the node as %s", from)
	}

	var pc net.PacketConn
	if err := InNamespace(node, func() (err error) { pc, err = net.ListenPacket("udp", dnsServer.String()); return err }); err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo([]byte(from.(*net.UDPAddr).IP.String()+":"+string(buf[:n])), from)
		}
	}()
	var uc net.Conn
	if err := InNamespace(nsB, func() (err error) { uc, err = net.Dial("udp", dnsService.String()); return err }); err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	_ = uc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := uc.Write([]byte("q")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 512)
	if n, err := uc.Read(buf); err != nil || string(buf[:n]) != ipB.String()+":q" {
		t.Errorf("the UDP redirect answered %q %v, want %s:q", buf[:n], err, ipB)
	}

	// DialContext reaches a server on the pod's own loopback.
	lo := listen(t, nsA, "127.0.0.1:0")
	c, err := pods.DialContext(context.Background(), "pod-a", "tcp", lo)
	if err != nil {
		t.Fatalf("dialing %s in pod a: %v", lo, err)
	}
	b, _ := io.ReadAll(c)
	_ = c.Close()
	if string(b) != "127.0.0.1" {
		t.Errorf("pod a's loopback server saw %q", b)
	}
	if _, err := pods.DialContext(context.Background(), "pod-z", "tcp", lo); err == nil {
		t.Error("dialing into a pod without a namespace did not fail")
	}

	// A veth lost (its namespace wired wrong, or a crash between pinning
	// and attaching) is attached again, on the same address.
	h, err := netlink.NewHandleAt(node)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByName(hostVeth("pod-b"))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.LinkDel(l); err != nil {
		t.Fatal(err)
	}
	if _, ip, err := pods.Ensure("pod-b"); err != nil || ip != ipB {
		t.Fatalf("Ensure after the veth was lost = %s %v, want %s", ip, err, ipB)
	}
	if from := dial(t, nsB, net.JoinHostPort(ipA.String(), port)); from != ipB.String() {
		t.Errorf("after re-attaching, pod a saw pod b as %s, want %s", from, ipB)
	}

	if p, ip, ok := pods.Lookup("pod-a"); !ok || p != pathA || ip != ipA {
		t.Errorf("Lookup(pod-a) = %s %s %v", p, ip, ok)
	}
	if err := pods.Remove("pod-a"); err != nil {
		t.Fatal(err)
	}
	if isPinned(pathA) {
		t.Error("pod a's namespace is still pinned")
	}
	if _, err := os.Stat(pathA); !os.IsNotExist(err) {
		t.Errorf("pod a's file is left: %v", err)
	}
	if _, _, ok := pods.Lookup("pod-a"); ok {
		t.Error("Lookup finds a removed pod")
	}
	if _, err := h.LinkByName(hostVeth("pod-a")); err == nil {
		t.Error("pod a's veth is left")
	}

	// An agent's restart: pod c is gone, pod b lives.
	if _, _, err := pods.Ensure("pod-c"); err != nil {
		t.Fatal(err)
	}
	if err := pods.Prune(func(uid string) bool { return uid == "pod-b" }); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := pods.Lookup("pod-c"); ok {
		t.Error("Prune kept pod c")
	}
	if _, ip, ok := pods.Lookup("pod-b"); !ok || ip != ipB {
		t.Errorf("Prune lost pod b: %s %v", ip, ok)
	}
	// The address pod a freed is handed out again.
	if _, ip, err := pods.Ensure("pod-d"); err != nil || ip != ipA {
		t.Errorf("pod d got %s %v, want pod a's freed %s", ip, err, ipA)
	}
	for _, bad := range []string{"", "..", "a/b"} {
		if _, _, err := pods.Ensure(bad); err == nil {
			t.Errorf("Ensure(%q) did not fail", bad)
		}
	}
}

// setLoopbackUp sets the loopback of ns up.
func setLoopbackUp(ns netns.NsHandle) error {
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return err
	}
	return h.LinkSetUp(lo)
}

func TestHostPorts(t *testing.T) {
	node := newNamespace(t)
	if err := setLoopbackUp(node); err != nil {
		t.Fatal(err)
	}
	n, pods := setUpPods(t, node, Config{StateDir: filepath.Join(t.TempDir(), "ipam")})
	pathA, ipA, err := pods.Ensure("pod-a")
	if err != nil {
		t.Fatal(err)
	}
	pathB, ipB, err := pods.Ensure("pod-b")
	if err != nil {
		t.Fatal(err)
	}
	nsA, nsB := openPinned(t, pathA), openPinned(t, pathB)
	listen(t, nsA, ":8080")
	if err := pods.MapPorts("pod-a", []PortMapping{{HostPort: 18080, ContainerPort: 8080}}); err != nil {
		t.Fatal(err)
	}
	// Unchanged: nothing written again.
	if err := pods.MapPorts("pod-a", []PortMapping{{HostPort: 18080, ContainerPort: 8080}}); err != nil {
		t.Fatal(err)
	}
	gw := net.JoinHostPort(n.Gateway().String(), "18080")
	if from := dial(t, nsB, gw); from != ipB.String() {
		t.Errorf("pod a saw pod b, through the node's host port, as %s, want %s", from, ipB)
	}
	if from := dial(t, node, gw); from != n.Gateway().String() {
		t.Errorf("pod a saw the node as %s", from)
	}
	// A pod reaches its own host port (masqueraded).
	if from := dial(t, nsA, gw); from != n.Gateway().String() {
		t.Errorf("pod a saw itself, through its host port, as %s (want the node's %s)", from, n.Gateway())
	}
	// The node reaches it on its loopback too, masqueraded (the CNI
	// portmap plugin's route_localnet), and on a host port bound to
	// 127.0.0.1 alone, which is not served on the node's other addresses.
	if from := dial(t, node, "127.0.0.1:18080"); from != n.Gateway().String() {
		t.Errorf("pod a saw the node, through 127.0.0.1:18080, as %s (want the node's %s)", from, n.Gateway())
	}
	listen(t, nsB, ":8081")
	if err := pods.MapPorts("pod-b", []PortMapping{{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: 18081, ContainerPort: 8081}}); err != nil {
		t.Fatal(err)
	}
	if from := dial(t, node, "127.0.0.1:18081"); from != n.Gateway().String() {
		t.Errorf("pod b saw the node, through its host port on 127.0.0.1, as %s", from)
	}
	var c net.Conn
	if err := InNamespace(nsA, func() (err error) {
		c, err = net.DialTimeout("tcp", net.JoinHostPort(n.Gateway().String(), "18081"), time.Second)
		return err
	}); err == nil {
		c.Close()
		t.Error("a host port on 127.0.0.1 is served on the node's pod-network address")
	}
	_ = ipA
	// Gone with the pod.
	if err := pods.Remove("pod-a"); err != nil {
		t.Fatal(err)
	}
	err = InNamespace(nsB, func() (err error) { c, err = net.DialTimeout("tcp", gw, 2*time.Second); return err })
	if err == nil {
		c.Close()
		t.Error("the host port still leads somewhere after its pod was removed")
	}
	if err := n.TearDown(); err != nil {
		t.Fatal(err)
	}
	conn, err := nftables.New(nftables.WithNetNSFd(int(node)))
	if err != nil {
		t.Fatal(err)
	}
	tables, _ := conn.ListTablesOfFamily(nftables.TableFamilyIPv4)
	for _, tb := range tables {
		if tb.Name == HostPortsTable {
			t.Error("the host ports' table is left after TearDown")
		}
	}
}

// setUpPods sets the node's side up in node with cfg and returns it with
// the pods' namespaces, pinned beside cfg.StateDir; nothing pinned is left
// on the host, whatever fails.
func setUpPods(t *testing.T, node netns.NsHandle, cfg Config) (*Node, *Pods) {
	t.Helper()
	n, err := SetUp(cfg, node)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	pins := filepath.Join(filepath.Dir(cfg.StateDir), "netns")
	pods, err := NewPods(n, pins)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := UnpinAll(pins); err != nil {
			t.Error(err)
		}
	})
	return n, pods
}

// TestPingGroupsOf: every group in the host's user namespace; in another,
// from its lowest mapped group to its highest (a range may only name
// mapped groups there).
func TestPingGroupsOf(t *testing.T) {
	for _, tc := range []struct{ gidMap, want string }{
		{"         0          0 4294967295\n", "0 2147483647"},
		{"     65534      65534          1\n", "65534 65534"},
		{"0 1000 1\n1 100000 65536\n", "0 65536"},
		{"65534 65534 1\n100000 100000 65536\n", "65534 165535"},
		{"", "0 2147483647"},
	} {
		if got := pingGroupsOf(tc.gidMap); got != tc.want {
			t.Errorf("pingGroupsOf(%q) = %q, want %q", tc.gidMap, got, tc.want)
		}
	}
}
