package podnet

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// newNamespace returns a new network namespace, nothing of the host's
// touched; it lives until the handle is closed (at the test's end).
func newNamespace(t *testing.T) netns.NsHandle {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces and links")
	}
	type result struct {
		ns  netns.NsHandle
		err error
	}
	c := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			c <- result{err: err}
			return
		}
		defer orig.Close()
		ns, err := netns.New()
		if err == nil && netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		c <- result{ns, err}
	}()
	r := <-c
	if r.err != nil {
		t.Skipf("cannot create a network namespace: %v", r.err)
	}
	t.Cleanup(func() { _ = r.ns.Close() })
	return r.ns
}

// listen listens on TCP in ns and accepts one connection, sending back
// the address it came from.
func listen(t *testing.T, ns netns.NsHandle, addr string) string {
	t.Helper()
	var ln net.Listener
	if err := InNamespace(ns, func() (err error) { ln, err = net.Listen("tcp", addr); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, c.RemoteAddr().(*net.TCPAddr).IP.String())
			_ = c.Close()
		}
	}()
	return ln.Addr().String()
}

// dial connects from ns to addr and returns what the other side saw as
// the connection's source address.
func dial(t *testing.T, ns netns.NsHandle, addr string) string {
	t.Helper()
	var c net.Conn
	if err := InNamespace(ns, func() (err error) { c, err = net.Dial("tcp", addr); return err }); err != nil {
		t.Fatalf("dialing %s: %v", addr, err)
	}
	defer c.Close()
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestAttachConnectsPods(t *testing.T) {
	node, pod1, pod2, outside := newNamespace(t), newNamespace(t), newNamespace(t), newNamespace(t)
	state := filepath.Join(t.TempDir(), "podnet")
	services := netip.MustParsePrefix("10.0.0.0/24")
	n, err := SetUp(Config{StateDir: state, ServiceCIDR: services}, node)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	// Set up twice (a restarted agent): the same bridge, the same rules
	// (the pod CIDR's masquerade, the loopback's).
	n2, err := SetUp(Config{StateDir: state, ServiceCIDR: services}, node)
	if err != nil {
		t.Fatalf("second SetUp: %v", err)
	}
	n2.Close()
	if rules := masqueradeRules(t, node); rules != 2 {
		t.Errorf("%d masquerade rules after two SetUps, want 2", rules)
	}

	ip1, err := n.Attach("pod-1", pod1)
	if err != nil {
		t.Fatal(err)
	}
	ip2, err := n.Attach("pod-2", pod2)
	if err != nil {
		t.Fatal(err)
	}
	if ip1.String() != "10.244.0.2" || ip2.String() != "10.244.0.3" {
		t.Errorf("addresses %s and %s, want 10.244.0.2 and .3", ip1, ip2)
	}
	if got, ok := n.Address("pod-2"); !ok || got != ip2 {
		t.Errorf("Address(pod-2) = %v %v", got, ok)
	}

	// Pod to pod, directly; the node to a pod, from the gateway; a pod's
	// own loopback.
	a1 := listen(t, pod1, ":0")
	_, port, _ := net.SplitHostPort(a1)
	if from := dial(t, pod2, net.JoinHostPort(ip1.String(), port)); from != ip2.String() {
		t.Errorf("pod 1 saw pod 2 as %s, want %s", from, ip2)
	}
	if from := dial(t, node, net.JoinHostPort(ip1.String(), port)); from != n.Gateway().String() {
		t.Errorf("pod 1 saw the node as %s, want the gateway %s", from, n.Gateway())
	}
	if from := dial(t, pod1, net.JoinHostPort("127.0.0.1", port)); from != "127.0.0.1" {
		t.Errorf("loopback: %s", from)
	}

	// Out of the pod CIDR, masqueraded: an "outside" network reached
	// through the node (192.0.2.0/24 on a veth pair).
	h, err := netlink.NewHandleAt(node)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	up := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "up0"}, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(outside))}
	if err := h.LinkAdd(up); err != nil {
		t.Fatal(err)
	}
	if err := h.AddrAdd(up, &netlink.Addr{IPNet: ipNet(netip.MustParseAddr("192.0.2.1"), 24)}); err != nil {
		t.Fatal(err)
	}
	if err := h.LinkSetUp(up); err != nil {
		t.Fatal(err)
	}
	ho, err := netlink.NewHandleAt(outside)
	if err != nil {
		t.Fatal(err)
	}
	defer ho.Close()
	eth, err := ho.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	if err := ho.AddrAdd(eth, &netlink.Addr{IPNet: ipNet(netip.MustParseAddr("192.0.2.2"), 24)}); err != nil {
		t.Fatal(err)
	}
	if err := ho.LinkSetUp(eth); err != nil {
		t.Fatal(err)
	}
	ao := listen(t, outside, "192.0.2.2:0")
	if from := dial(t, pod1, ao); from != "192.0.2.1" {
		t.Errorf("outside saw pod 1 as %s, want the node's 192.0.2.1 (masquerade)", from)
	}

	// A pod's namespace recreated: the same address again (the node's
	// end of the old pair, if the old namespace still lives, replaced).
	pod1b := newNamespace(t)
	if ip, err := n.Attach("pod-1", pod1b); err != nil || ip != ip1 {
		t.Errorf("Attach of a recreated namespace = %v, %v; want %s", ip, err, ip1)
	}
	hb, err := netlink.NewHandleAt(pod1b)
	if err != nil {
		t.Fatal(err)
	}
	defer hb.Close()
	if eth, err := hb.LinkByName(PodInterface); err != nil || eth.Attrs().HardwareAddr.String() != "02:42:0a:f4:00:02" {
		t.Errorf("the recreated eth0: %v, %v; want the MAC derived from %s", eth, err, ip1)
	}
	// Reached at once: its MAC is the old one's, which pod 2 has cached.
	_, port1b, _ := net.SplitHostPort(listen(t, pod1b, ":0"))
	if from := dial(t, pod2, net.JoinHostPort(ip1.String(), port1b)); from != ip2.String() {
		t.Errorf("the recreated namespace is not reached: %s", from)
	}

	if err := n.Detach("pod-2"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.LinkByName(hostVeth("pod-2")); err == nil {
		t.Errorf("pod 2's veth is still there after Detach")
	}
	if err := n.Release(func(uid string) bool { return uid != "pod-1" }); err != nil {
		t.Fatal(err)
	}
	if _, ok := n.Address("pod-1"); ok {
		t.Errorf("pod 1 kept its address after Release")
	}

	if _, err := n.Attach("pod-3", newNamespace(t)); err != nil {
		t.Fatal(err)
	}
	if err := n.TearDown(); err != nil {
		t.Fatal(err)
	}
	if _, err := h.LinkByName(hostVeth("pod-3")); err == nil {
		t.Errorf("pod 3's veth left after TearDown")
	}
	var notFound netlink.LinkNotFoundError
	if _, err := h.LinkByName(DefaultBridge); !errors.As(err, &notFound) {
		t.Errorf("bridge after TearDown: %v", err)
	}
	if _, err := h.LinkByName(serviceLink(DefaultBridge)); !errors.As(err, &notFound) {
		t.Errorf("the service CIDR's link after TearDown: %v", err)
	}
	c, err := nftables.New(nftables.WithNetNSFd(int(node)))
	if err != nil {
		t.Fatal(err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyIPv4)
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range tables {
		if tb.Name == Table {
			t.Errorf("nftables table %s left after TearDown", Table)
		}
	}
}

// masqueradeRules counts the rules of the masquerade chain in ns.
func masqueradeRules(t *testing.T, ns netns.NsHandle) int {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := c.GetRules(&nftables.Table{Name: Table, Family: nftables.TableFamilyIPv4}, &nftables.Chain{Name: "postrouting"})
	if err != nil {
		t.Fatal(err)
	}
	return len(rules)
}

func TestSetUpRefuses(t *testing.T) {
	node := newNamespace(t)
	for _, c := range []Config{
		{StateDir: t.TempDir(), PodCIDR: netip.MustParsePrefix("fd00::/64")},
		{StateDir: t.TempDir(), PodCIDR: netip.MustParsePrefix("10.0.0.0/31")},
		{},
	} {
		if n, err := SetUp(c, node); err == nil {
			n.Close()
			t.Errorf("SetUp(%+v) succeeded", c)
		}
	}
	// A link of the bridge's name that is not a bridge.
	h, err := netlink.NewHandleAt(node)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: DefaultBridge}, PeerName: "peer"}); err != nil {
		t.Fatal(err)
	}
	if n, err := SetUp(Config{StateDir: t.TempDir()}, node); err == nil {
		n.Close()
		t.Errorf("SetUp over a veth succeeded")
	}
}
