package podnet

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Config configures the node's side of the pod network.
type Config struct {
	// Bridge is the bridge's name. Default DefaultBridge.
	Bridge string
	// PodCIDR is the pods' addresses; its first address is the bridge's
	// (the pods' gateway). Default DefaultPodCIDR.
	PodCIDR netip.Prefix
	// MTU of the bridge and the veths. Default 1500.
	MTU int
	// StateDir holds the address allocations (one file per address).
	StateDir string
	// Redirects are TCP connections from pods sent to the node (a
	// Service's address to a relay of the node's).
	Redirects []Redirect
	// ServiceCIDR, when set, is routed to a link of the node's
	// (routeServices), so that connections to Services' addresses meet
	// their rules whatever the node's other routes.
	ServiceCIDR netip.Prefix
}

// Defaults.
const (
	DefaultBridge = "jobkeeper0"
	// PodInterface is the pod's interface name.
	PodInterface = "eth0"
)

// DefaultPodCIDR is kind's first node's pod CIDR.
var DefaultPodCIDR = netip.MustParsePrefix("10.244.0.0/24")

// Node is the node's side of the pod network, set up in one network
// namespace.
type Node struct {
	cfg Config
	// ns is the node's network namespace; h a netlink handle in it.
	ns netns.NsHandle
	h  *netlink.Handle
	// bridge is the bridge's index.
	bridge int

	// mu serialises address allocation and the pods' links.
	mu   sync.Mutex
	ipam ipam
}

// SetUp sets up the node's side in the network namespace ns (the
// caller's handle, kept open while the Node is used): the bridge with the
// gateway address, up; IPv4 forwarding; the masquerade rule. What exists
// already (a previous run's) is reused. Close releases the Node's handle
// without undoing anything; TearDown undoes it.
func SetUp(cfg Config, ns netns.NsHandle) (*Node, error) {
	if cfg.Bridge == "" {
		cfg.Bridge = DefaultBridge
	}
	if !cfg.PodCIDR.IsValid() {
		cfg.PodCIDR = DefaultPodCIDR
	}
	cfg.PodCIDR = cfg.PodCIDR.Masked()
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	if !cfg.PodCIDR.Addr().Is4() || cfg.PodCIDR.Bits() > 30 {
		return nil, fmt.Errorf("pod CIDR %s: an IPv4 range of at least 4 addresses is needed", cfg.PodCIDR)
	}
	if cfg.StateDir == "" {
		return nil, errors.New("podnet: no state directory")
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return nil, fmt.Errorf("netlink in the node's network namespace: %w", err)
	}
	n := &Node{cfg: cfg, ns: ns, h: h, ipam: ipam{dir: cfg.StateDir, prefix: cfg.PodCIDR}}
	if err := n.setUpBridge(); err != nil {
		h.Close()
		return nil, err
	}
	if err := InNamespace(ns, enableForwarding); err != nil {
		h.Close()
		return nil, fmt.Errorf("enabling IPv4 forwarding: %w", err)
	}
	if err := InNamespace(ns, func() error { return routeLocalnet(cfg.Bridge) }); err != nil {
		h.Close()
		return nil, fmt.Errorf("routing the loopback to pods' host ports on %s: %w", cfg.Bridge, err)
	}
	if err := setUpMasquerade(ns, cfg.PodCIDR, cfg.Redirects); err != nil {
		h.Close()
		return nil, fmt.Errorf("masquerading the pod CIDR %s: %w", cfg.PodCIDR, err)
	}
	return n, nil
}

// Gateway is the bridge's address, the pods' default gateway: the node's
// address on the pod network.
func (n *Node) Gateway() netip.Addr { return gateway(n.cfg.PodCIDR) }

// PodCIDR is the pods' address range.
func (n *Node) PodCIDR() netip.Prefix { return n.cfg.PodCIDR }

// setUpBridge creates (or finds) the bridge, gives it the gateway address
// and sets it up.
func (n *Node) setUpBridge() error {
	link, err := n.h.LinkByName(n.cfg.Bridge)
	if err != nil {
		var notFound netlink.LinkNotFoundError
		if !errors.As(err, &notFound) {
			return fmt.Errorf("looking up the bridge %s: %w", n.cfg.Bridge, err)
		}
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: n.cfg.Bridge, MTU: n.cfg.MTU}}
		if err := n.h.LinkAdd(br); err != nil {
			return fmt.Errorf("creating the bridge %s: %w", n.cfg.Bridge, err)
		}
		if link, err = n.h.LinkByName(n.cfg.Bridge); err != nil {
			return fmt.Errorf("looking up the bridge %s: %w", n.cfg.Bridge, err)
		}
	}
	if _, ok := link.(*netlink.Bridge); !ok {
		return fmt.Errorf("%s exists and is a %s, not a bridge", n.cfg.Bridge, link.Type())
	}
	// A bridge takes the lowest MAC of its ports unless it was given
	// one: pods coming and going would change their gateway's MAC under
	// their ARP caches. Its own is derived from its address, as the pods'.
	if mac := podMAC(gateway(n.cfg.PodCIDR)); link.Attrs().HardwareAddr.String() != mac.String() {
		if err := n.h.LinkSetHardwareAddr(link, mac); err != nil {
			return fmt.Errorf("giving the bridge %s the MAC %s: %w", n.cfg.Bridge, mac, err)
		}
	}
	gw := &netlink.Addr{IPNet: ipNet(gateway(n.cfg.PodCIDR), n.cfg.PodCIDR.Bits())}
	if err := n.h.AddrReplace(link, gw); err != nil {
		return fmt.Errorf("giving the bridge %s the address %s: %w", n.cfg.Bridge, gw.IPNet, err)
	}
	if err := n.h.LinkSetUp(link); err != nil {
		return fmt.Errorf("setting the bridge %s up: %w", n.cfg.Bridge, err)
	}
	n.bridge = link.Attrs().Index
	if n.cfg.ServiceCIDR.IsValid() {
		return n.routeServices()
	}
	return nil
}

// serviceLink is the name of the link the service CIDR is routed to, for
// the bridge bridge.
func serviceLink(bridge string) string { return bridge + "-svc" }

// routeServices routes the service CIDR to a link of its own, a bridge
// without ports, which sends nothing anywhere (as kube-proxy's IPVS mode
// uses a dummy link, a module not every kernel has), whatever the node's
// other routes (none may lead anywhere): the Services' rules send what reaches a Service's
// address on, or refuse it. Not through the bridge: a pod's packet
// forwarded back out the interface it came in by makes the node send the
// pod an ICMP redirect, which uses up the ICMP rate limit towards the pod,
// and the refusal of a UDP Service without endpoints would not be sent.
func (n *Node) routeServices() error {
	name := serviceLink(n.cfg.Bridge)
	link, err := n.h.LinkByName(name)
	if err != nil {
		if err := n.h.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}); err != nil {
			return fmt.Errorf("creating the link %s for the service CIDR: %w", name, err)
		}
		if link, err = n.h.LinkByName(name); err != nil {
			return fmt.Errorf("looking up the link %s: %w", name, err)
		}
	}
	if err := n.h.LinkSetUp(link); err != nil {
		return fmt.Errorf("setting %s up: %w", name, err)
	}
	route := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: ipNet(n.cfg.ServiceCIDR.Masked().Addr(), n.cfg.ServiceCIDR.Bits()),
		Src: net.IP(gateway(n.cfg.PodCIDR).AsSlice()), Scope: netlink.SCOPE_LINK}
	if err := n.h.RouteReplace(route); err != nil {
		return fmt.Errorf("routing the service CIDR %s to %s: %w", n.cfg.ServiceCIDR, name, err)
	}
	return nil
}

// hostVeth is the node's end of pod uid's veth pair: a name of at most 15
// bytes derived from the UID.
func hostVeth(uid string) string {
	sum := sha256.Sum256([]byte(uid))
	return "jkv" + hex.EncodeToString(sum[:6])
}

// Attach connects pod uid's network namespace podNS: a veth pair whose
// node end is on the bridge and whose other end is the pod's eth0 with the
// pod's address (allocated, or the one it has) and a default route through
// the gateway; loopback up. It returns the pod's address. A pod attached
// before (its namespace since recreated) is attached again.
func (n *Node) Attach(uid string, podNS netns.NsHandle) (netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, had, err := n.ipam.lookup(uid)
	if err != nil {
		return netip.Addr{}, err
	}
	ip, err := n.ipam.allocate(uid)
	if err != nil {
		return netip.Addr{}, err
	}
	// An address allocated now goes back if the pod is not attached; one
	// the pod had stays its own.
	fail := func(err error) (netip.Addr, error) {
		if !had {
			_ = n.ipam.release(uid)
		}
		return netip.Addr{}, err
	}
	name := hostVeth(uid)
	// A veth left from the pod's previous namespace (its end in the node
	// stays only while that namespace lives).
	if old, err := n.h.LinkByName(name); err == nil {
		_ = n.h.LinkDel(old)
	}
	veth := &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{Name: name, MTU: n.cfg.MTU, MasterIndex: n.bridge},
		PeerName:  PodInterface, PeerNamespace: netlink.NsFd(int(podNS)), PeerMTU: uint32(n.cfg.MTU),
		// Derived from the address, as Docker does: a pod whose namespace is
		// re-created keeps its MAC with its address, so its neighbours'
		// ARP caches stay right.
		PeerHardwareAddr: podMAC(ip),
	}
	undo := func() {
		if l, err := n.h.LinkByName(name); err == nil {
			_ = n.h.LinkDel(l)
		}
	}
	if err := n.h.LinkAdd(veth); err != nil {
		// It may exist half made (attaching it to the bridge is a second
		// step of the call).
		undo()
		return fail(fmt.Errorf("creating the veth pair %s/%s: %w", name, PodInterface, err))
	}
	// A pod that reaches itself through a Service's address gets its
	// own packets back through its port, which a bridge sends nowhere
	// but to where they came from only in hairpin mode (the CNI bridge
	// plugin's hairpinMode).
	if err := n.h.LinkSetHairpin(veth, true); err != nil {
		undo()
		return fail(fmt.Errorf("setting hairpin mode on %s: %w", name, err))
	}
	if err := n.h.LinkSetUp(veth); err != nil {
		undo()
		return fail(fmt.Errorf("setting %s up: %w", name, err))
	}
	if err := configurePod(podNS, ip, n.cfg.PodCIDR); err != nil {
		undo()
		return fail(err)
	}
	return ip, nil
}

// configurePod gives the pod's namespace its address, its default route
// and loopback.
func configurePod(podNS netns.NsHandle, ip netip.Addr, prefix netip.Prefix) error {
	h, err := netlink.NewHandleAt(podNS)
	if err != nil {
		return fmt.Errorf("netlink in the pod's network namespace: %w", err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("the pod's loopback: %w", err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		return fmt.Errorf("setting the pod's loopback up: %w", err)
	}
	eth, err := h.LinkByName(PodInterface)
	if err != nil {
		return fmt.Errorf("the pod's %s: %w", PodInterface, err)
	}
	if err := h.AddrReplace(eth, &netlink.Addr{IPNet: ipNet(ip, prefix.Bits())}); err != nil {
		return fmt.Errorf("giving the pod's %s the address %s: %w", PodInterface, ip, err)
	}
	if err := h.LinkSetUp(eth); err != nil {
		return fmt.Errorf("setting the pod's %s up: %w", PodInterface, err)
	}
	route := &netlink.Route{LinkIndex: eth.Attrs().Index, Gw: net.IP(gateway(prefix).AsSlice()),
		Dst: &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}}
	if err := h.RouteReplace(route); err != nil {
		return fmt.Errorf("the pod's default route through %s: %w", gateway(prefix), err)
	}
	return nil
}

// Detach removes pod uid's veth pair, if its namespace still lives, and
// frees its address.
func (n *Node) Detach(uid string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var errs []error
	if l, err := n.h.LinkByName(hostVeth(uid)); err == nil {
		if err := n.h.LinkDel(l); err != nil {
			errs = append(errs, fmt.Errorf("deleting %s: %w", l.Attrs().Name, err))
		}
	}
	if err := n.ipam.release(uid); err != nil {
		errs = append(errs, fmt.Errorf("freeing pod %s's address: %w", uid, err))
	}
	return errors.Join(errs...)
}

// attached reports whether pod uid's veth is on the node (its peer is in
// a namespace that lives).
func (n *Node) attached(uid string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	l, err := n.h.LinkByName(hostVeth(uid))
	return err == nil && l.Attrs().MasterIndex == n.bridge
}

// Address returns pod uid's address, if it has one.
func (n *Node) Address(uid string) (netip.Addr, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ip, ok, err := n.ipam.lookup(uid)
	return ip, ok && err == nil
}

// Release detaches the pods holding an address for which live is false (a
// restarted agent's pods that are gone).
func (n *Node) Release(live func(uid string) bool) error {
	n.mu.Lock()
	uids, err := n.ipam.holders()
	n.mu.Unlock()
	if err != nil {
		return err
	}
	var errs []error
	for _, uid := range uids {
		if !live(uid) {
			errs = append(errs, n.Detach(uid))
		}
	}
	return errors.Join(errs...)
}

// Close releases the Node's netlink handle; the network stays as it is.
func (n *Node) Close() { n.h.Close() }

// TearDown removes every pod's veth (deleting a bridge only detaches its
// ports), the bridge, the masquerade rule and every allocation, then
// closes the Node. IPv4 forwarding stays on: other software may need it.
func (n *Node) TearDown() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	defer n.Close()
	return removeNode(n.h, n.ns, n.cfg.Bridge, n.cfg.StateDir)
}

// RemoveNode removes what SetUp made in the network namespace ns with the
// bridge bridge and the state directory stateDir, as TearDown does,
// without a Node (jobkeeper reset, after a crash). Nothing missing is an
// error.
func RemoveNode(ns netns.NsHandle, bridge, stateDir string) error {
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink in the node's network namespace: %w", err)
	}
	defer h.Close()
	return removeNode(h, ns, bridge, stateDir)
}

// removeNode is TearDown with the handle h in ns.
func removeNode(h *netlink.Handle, ns netns.NsHandle, bridge, stateDir string) error {
	var errs []error
	if br, err := h.LinkByName(bridge); err == nil {
		if links, err := h.LinkList(); err != nil {
			errs = append(errs, fmt.Errorf("listing links: %w", err))
		} else {
			for _, l := range links {
				if l.Attrs().MasterIndex == br.Attrs().Index {
					errs = append(errs, h.LinkDel(l))
				}
			}
		}
		errs = append(errs, h.LinkDel(br))
	}
	if l, err := h.LinkByName(serviceLink(bridge)); err == nil {
		errs = append(errs, h.LinkDel(l))
	}
	errs = append(errs, tearDownMasquerade(ns), removeHostPorts(ns))
	errs = append(errs, os.RemoveAll(stateDir))
	return errors.Join(errs...)
}

// podMAC is the pod's eth0 MAC for address ip: locally administered,
// unicast, 02:42 and the four bytes of ip.
func podMAC(ip netip.Addr) net.HardwareAddr {
	b := ip.As4()
	return net.HardwareAddr{0x02, 0x42, b[0], b[1], b[2], b[3]}
}

// ipNet is ip/bits as a net.IPNet.
func ipNet(ip netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: net.IP(ip.AsSlice()), Mask: net.CIDRMask(bits, ip.BitLen())}
}

// InNamespace runs fn on a thread in the network namespace ns. A thread
// that could not be brought back is never reused.
func InNamespace(ns netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			errc <- err
			return
		}
		err = fn()
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// routeLocalnet lets the kernel route packets from loopback addresses out
// of bridge, as the CNI portmap plugin does for host ports on 127.0.0.1:
// a connection to 127.0.0.1:<hostPort> is sent to the pod, then
// masqueraded (setUpMasquerade), which also keeps anything from outside
// from reaching the loopback through it. The setting goes with the
// bridge.
func routeLocalnet(bridge string) error {
	return os.WriteFile("/proc/sys/net/ipv4/conf/"+bridge+"/route_localnet", []byte("1\n"), 0o644)
}

// enableForwarding turns IPv4 forwarding on in the calling thread's network
// namespace.
// (/proc/sys/net is the opening thread's namespace's).
func enableForwarding() error {
	return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1\n"), 0o644)
}
