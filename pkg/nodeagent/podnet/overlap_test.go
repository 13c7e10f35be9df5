package podnet

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

func TestCheckRanges(t *testing.T) {
	pods, svcs := netip.MustParsePrefix("10.244.0.0/24"), netip.MustParsePrefix("10.96.0.0/16")
	routes := []routeInfo{{netip.MustParsePrefix("192.168.1.0/24"), "eth0"}, {netip.MustParsePrefix("10.244.0.128/25"), "wg0"}}
	err := checkRanges(map[string]netip.Prefix{"pod CIDR": pods, "service CIDR": svcs}, routes)
	if err == nil || !strings.Contains(err.Error(), "pod CIDR 10.244.0.0/24 overlaps the node's route to 10.244.0.128/25 (dev wg0)") {
		t.Errorf("overlap with a route: %v", err)
	}
	err = checkRanges(map[string]netip.Prefix{"pod CIDR": pods, "service CIDR": netip.MustParsePrefix("10.0.0.0/8")}, nil)
	if err == nil || !strings.Contains(err.Error(), "the pod CIDR 10.244.0.0/24 overlaps the service CIDR 10.0.0.0/8") {
		t.Errorf("ranges overlapping each other: %v", err)
	}
	if err := checkRanges(map[string]netip.Prefix{"pod CIDR": pods, "service CIDR": svcs}, routes[:1]); err != nil {
		t.Errorf("no overlap: %v", err)
	}
}

// TestCheckRangesReadsRoutes: the node's routes, not the bridge's own.
func TestCheckRangesReadsRoutes(t *testing.T) {
	node := newNamespace(t)
	n, err := SetUp(Config{StateDir: t.TempDir()}, node)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	// A previous run's network, with its service link (a crash left it).
	n2, err := SetUp(Config{StateDir: t.TempDir(), ServiceCIDR: netip.MustParsePrefix("10.0.0.0/24")}, node)
	if err != nil {
		t.Fatal(err)
	}
	n2.Close()
	pods := map[string]netip.Prefix{"pod CIDR": DefaultPodCIDR, "service CIDR": netip.MustParsePrefix("10.0.0.0/24")}
	if err := CheckRanges(node, DefaultBridge, pods); err != nil {
		t.Errorf("the bridge's and the service link's own routes refused: %v", err)
	}
	h, err := netlink.NewHandleAt(node)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "lan0"}, PeerName: "lan1"}
	if err := h.LinkAdd(l); err != nil {
		t.Fatal(err)
	}
	if err := h.AddrAdd(l, &netlink.Addr{IPNet: ipNet(netip.MustParseAddr("10.244.0.200"), 25)}); err != nil {
		t.Fatal(err)
	}
	if err := h.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
	err = CheckRanges(node, DefaultBridge, pods)
	if err == nil || !strings.Contains(err.Error(), "10.244.0.128/25 (dev lan0)") {
		t.Errorf("a LAN's route over the pod CIDR: %v", err)
	}
}

// TestCheckRangesOwnNamespace: with netns.None() the caller's own
// namespace's routes are read without entering it, as a user may.
func TestCheckRangesOwnNamespace(t *testing.T) {
	routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	var dst netip.Prefix
	for _, r := range routes {
		if r.Dst == nil {
			continue
		}
		if p, ok := netipPrefix(r.Dst); ok && p.Bits() > 0 && p.Bits() <= 30 {
			dst = p
			break
		}
	}
	if !dst.IsValid() {
		t.Skip("this namespace has no route to a range to overlap")
	}
	err = CheckRanges(netns.None(), "jobkeeper-test0", map[string]netip.Prefix{"pod CIDR": dst})
	if err == nil || !strings.Contains(err.Error(), dst.String()) {
		t.Errorf("a pod CIDR equal to this namespace's route to %s: %v", dst, err)
	}
	if err := CheckRanges(netns.None(), "jobkeeper-test0", map[string]netip.Prefix{"pod CIDR": netip.MustParsePrefix("198.18.255.0/30")}); err != nil {
		t.Errorf("a range no route overlaps: %v", err)
	}
}

// netipPrefix converts a route's destination.
func netipPrefix(n *net.IPNet) (netip.Prefix, bool) {
	ip, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(ip.Unmap(), ones).Masked(), true
}
