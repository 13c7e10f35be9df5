package serviceproxy

import (
	"errors"
	"io"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/podnet"
)

// in runs fn on a thread in the network namespace ns.
func in(t *testing.T, ns netns.NsHandle, fn func() error) error {
	t.Helper()
	return podnet.InNamespace(ns, fn)
}

// newNode returns a network namespace of the test's own, with the pod
// network set up in it and pods a, b and c attached.
func newNode(t *testing.T) (node netns.NsHandle, pods map[string]netns.NsHandle, ips map[string]netip.Addr) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces, links and nftables")
	}
	c := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			c <- err
			return
		}
		defer orig.Close()
		node, err = netns.New()
		if err == nil && netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		c <- err
	}()
	if err := <-c; err != nil {
		t.Skipf("cannot create a network namespace: %v", err)
	}
	t.Cleanup(func() { _ = node.Close() })
	// Loopback up, as a node's is: the node's connections to its own
	// addresses go through it.
	h, err := netlink.NewHandleAt(node)
	if err != nil {
		t.Fatal(err)
	}
	lo, err := h.LinkByName("lo")
	if err == nil {
		err = h.LinkSetUp(lo)
	}
	h.Close()
	if err != nil {
		t.Fatalf("setting the node's loopback up: %v", err)
	}
	dir := t.TempDir()
	n, err := podnet.SetUp(podnet.Config{StateDir: filepath.Join(dir, "ipam"), ServiceCIDR: netip.MustParsePrefix("10.0.0.0/24")}, node)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	pins := filepath.Join(dir, "netns")
	p, err := podnet.NewPods(n, pins)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := podnet.UnpinAll(pins); err != nil {
			t.Error(err)
		}
	})
	pods, ips = map[string]netns.NsHandle{}, map[string]netip.Addr{}
	for _, name := range []string{"a", "b", "c"} {
		path, ip, err := p.Ensure(name)
		if err != nil {
			t.Fatal(err)
		}
		ns, err := netns.GetFromPath(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ns.Close() })
		pods[name], ips[name] = ns, ip
	}
	return node, pods, ips
}

// serve answers each TCP connection on addr in ns with name.
func serve(t *testing.T, ns netns.NsHandle, addr, name string) {
	t.Helper()
	serveWith(t, ns, addr, func(net.Conn) string { return name })
}

// serveSource answers each TCP connection on addr in ns with the
// address it came from.
func serveSource(t *testing.T, ns netns.NsHandle, addr string) {
	t.Helper()
	serveWith(t, ns, addr, func(c net.Conn) string {
		return c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap().String()
	})
}

// serveWith answers each TCP connection on addr in ns with what answer
// says for it, then closes it.
func serveWith(t *testing.T, ns netns.NsHandle, addr string, answer func(net.Conn) string) {
	t.Helper()
	var ln net.Listener
	if err := in(t, ns, func() (err error) { ln, err = net.Listen("tcp", addr); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, answer(c))
			_ = c.Close()
		}
	}()
}

// ask connects from ns to addr and returns what it answered.
func ask(t *testing.T, ns netns.NsHandle, addr string) (string, error) {
	t.Helper()
	var c net.Conn
	if err := in(t, ns, func() (err error) { c, err = net.DialTimeout("tcp", addr, 3*time.Second); return err }); err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	b, err := io.ReadAll(c)
	return string(b), err
}

// answers asks addr from ns n times and counts who answered; an error
// fails the test, naming who asked.
func answers(t *testing.T, ns netns.NsHandle, who, addr string, n int) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for range n {
		got, err := ask(t, ns, addr)
		if err != nil {
			t.Fatalf("%s to %s: %v", who, addr, err)
		}
		seen[got]++
	}
	return seen
}

func TestApplyRoutesServices(t *testing.T) {
	node, pods, ips := newNode(t)
	serve(t, pods["a"], ":8080", "a")
	serve(t, pods["b"], ":8080", "b")
	web := netip.MustParseAddrPort("10.0.0.50:80")
	empty := netip.MustParseAddrPort("10.0.0.51:80")
	rules := []Rule{
		{Service: "ns/web:", Address: web, Protocol: corev1.ProtocolTCP, Endpoints: []netip.AddrPort{
			netip.AddrPortFrom(ips["a"], 8080), netip.AddrPortFrom(ips["b"], 8080)}},
		{Service: "ns/empty:", Address: empty, Protocol: corev1.ProtocolTCP},
	}
	if err := Apply(node, rules); err != nil {
		t.Fatal(err)
	}
	// Written twice (the proxy's next sync): one table.
	if err := Apply(node, rules); err != nil {
		t.Fatal(err)
	}

	// From another pod, both endpoints answer (missing one in 40 tries
	// has a chance of 2^-39).
	if seen := answers(t, pods["c"], "pod c", web.String(), 40); seen["a"] == 0 || seen["b"] == 0 || len(seen) != 2 {
		t.Errorf("answers from the Service: %v, want a and b", seen)
	}
	// A pod reaches its own Service, itself included (hairpin).
	if answers(t, pods["a"], "pod a", web.String(), 40)["a"] == 0 {
		t.Error("pod a never reached itself through its Service")
	}
	// The node itself reaches the Service.
	if _, err := ask(t, node, web.String()); err != nil {
		t.Errorf("the node to the Service: %v", err)
	}
	// A Service without endpoints refuses at once.
	start := time.Now()
	_, err := ask(t, pods["c"], empty.String())
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("a Service without endpoints gave %v, want connection refused", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("refusing took %s", d)
	}

	// Endpoints change: only b is left.
	rules[0].Endpoints = rules[0].Endpoints[1:]
	if err := Apply(node, rules); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if got, err := ask(t, pods["c"], web.String()); err != nil || got != "b" {
			t.Fatalf("after a change the Service answered %q %v, want b", got, err)
		}
	}

	if err := Remove(node); err != nil {
		t.Fatal(err)
	}
	conn, err := nftables.New(nftables.WithNetNSFd(int(node)))
	if err != nil {
		t.Fatal(err)
	}
	tables, err := conn.ListTablesOfFamily(nftables.TableFamilyIPv4)
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range tables {
		if tb.Name == Table {
			t.Error("the table is left after Remove")
		}
	}
	if err := Remove(node); err != nil {
		t.Errorf("Remove without a table: %v", err)
	}
}

func TestApplyRoutesUDP(t *testing.T) {
	node, pods, ips := newNode(t)
	var pc net.PacketConn
	if err := in(t, pods["a"], func() (err error) { pc, err = net.ListenPacket("udp", ":5353"); return err }); err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go func() {
		buf := make([]byte, 64)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(append([]byte("a:"), buf[:n]...), from)
		}
	}()
	dns := netip.MustParseAddrPort("10.0.0.52:53")
	none := netip.MustParseAddrPort("10.0.0.53:53")
	if err := Apply(node, []Rule{
		{Address: dns, Protocol: corev1.ProtocolUDP, Endpoints: []netip.AddrPort{netip.AddrPortFrom(ips["a"], 5353)}},
		{Address: none, Protocol: corev1.ProtocolUDP},
	}); err != nil {
		t.Fatal(err)
	}
	exchange := func(addr string) (string, error) {
		var c net.Conn
		if err := in(t, pods["c"], func() (err error) { c, err = net.Dial("udp", addr); return err }); err != nil {
			return "", err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write([]byte("q")); err != nil {
			return "", err
		}
		buf := make([]byte, 64)
		n, err := c.Read(buf)
		return string(buf[:n]), err
	}
	if got, err := exchange(dns.String()); err != nil || got != "a:q" {
		t.Errorf("the UDP Service answered %q %v", got, err)
	}
	if _, err := exchange(none.String()); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("a UDP Service without endpoints gave %v, want refused (port unreachable)", err)
	}

	// A connected socket's flow moves once its endpoint is gone: a is
	// replaced by b, and its conntrack entry cleared.
	var pb net.PacketConn
	if err := in(t, pods["b"], func() (err error) { pb, err = net.ListenPacket("udp", ":5353"); return err }); err != nil {
		t.Fatal(err)
	}
	defer pb.Close()
	go func() {
		buf := make([]byte, 64)
		for {
			n, from, err := pb.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pb.WriteTo(append([]byte("b:"), buf[:n]...), from)
		}
	}()
	var c net.Conn
	if err := in(t, pods["c"], func() (err error) { c, err = net.Dial("udp", dns.String()); return err }); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	roundTrip := func() string {
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write([]byte("q")); err != nil {
			return err.Error()
		}
		buf := make([]byte, 64)
		n, err := c.Read(buf)
		if err != nil {
			return err.Error()
		}
		return string(buf[:n])
	}
	if got := roundTrip(); got != "a:q" {
		t.Fatalf("the flow answered %q, want a:q", got)
	}
	before := []Rule{{Address: dns, Protocol: corev1.ProtocolUDP, Endpoints: []netip.AddrPort{netip.AddrPortFrom(ips["a"], 5353)}}}
	after := []Rule{{Address: dns, Protocol: corev1.ProtocolUDP, Endpoints: []netip.AddrPort{netip.AddrPortFrom(ips["b"], 5353)}}}
	if err := Apply(node, after); err != nil {
		t.Fatal(err)
	}
	if got := roundTrip(); got != "a:q" {
		t.Logf("before clearing, the flow answered %q", got)
	}
	if err := clearStaleUDP(node, before, after); err != nil {
		t.Fatal(err)
	}
	if got := roundTrip(); got != "b:q" {
		t.Errorf("after its endpoint left, the flow answered %q, want b:q", got)
	}
}

// TestApplyManyServices: hundreds of Services, each with endpoints, go in
// one write (the batch outgrows a netlink socket's default buffers).
func TestApplyManyServices(t *testing.T) {
	node, _, ips := newNode(t)
	var rules []Rule
	for i := range 600 {
		rules = append(rules, Rule{
			Address:  netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(1 + i/250), byte(i % 250)}), 80),
			Protocol: corev1.ProtocolTCP,
			Endpoints: []netip.AddrPort{
				netip.AddrPortFrom(ips["a"], 8080), netip.AddrPortFrom(ips["b"], 8080), netip.AddrPortFrom(ips["c"], 8080)},
		})
	}
	if err := Apply(node, rules); err != nil {
		t.Fatalf("writing 600 Services of 3 endpoints: %v", err)
	}
	// 1500 Services with affinity (a set per endpoint), then none: the
	// deletions of 1500 chains and 1500 sets go in one batch too.
	rules = nil
	for i := range 1500 {
		rules = append(rules, Rule{
			Address:   netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(1 + i/250), byte(i % 250)}), 80),
			Protocol:  corev1.ProtocolTCP,
			Endpoints: []netip.AddrPort{netip.AddrPortFrom(ips["a"], 8080)},
			Affinity:  time.Hour,
		})
	}
	if err := Apply(node, rules); err != nil {
		t.Fatalf("writing 1500 Services with affinity: %v", err)
	}
	if err := Apply(node, nil); err != nil {
		t.Fatalf("removing them: %v", err)
	}
}

// TestApplySessionAffinity: with ClientIP affinity a client keeps its
// endpoint, across rewrites of the table for other Services, until that
// endpoint leaves; the sets go when the affinity does.
func TestApplySessionAffinity(t *testing.T) {
	node, pods, ips := newNode(t)
	serve(t, pods["a"], ":8080", "a")
	serve(t, pods["b"], ":8080", "b")
	web := netip.MustParseAddrPort("10.0.0.60:80")
	endpoints := []netip.AddrPort{netip.AddrPortFrom(ips["a"], 8080), netip.AddrPortFrom(ips["b"], 8080)}
	rules := []Rule{{Service: "ns/web:", Address: web, Protocol: corev1.ProtocolTCP, Endpoints: endpoints, Affinity: time.Hour}}
	if err := Apply(node, rules); err != nil {
		t.Fatal(err)
	}
	// sticky asks n times from ns and returns the one endpoint that
	// answered, failing the test if several did.
	sticky := func(ns netns.NsHandle, who string, n int) string {
		t.Helper()
		seen := answers(t, ns, who, web.String(), n)
		if len(seen) != 1 {
			t.Fatalf("%s reached %v, want one endpoint throughout", who, seen)
		}
		for e := range seen {
			return e
		}
		return ""
	}
	first := sticky(pods["c"], "pod c", 20)
	sticky(node, "the node", 20)

	// Another Service appears: the table is rewritten, the client's
	// endpoint kept.
	rules = append(rules, Rule{Service: "ns/other:", Address: netip.MustParseAddrPort("10.0.0.61:80"), Protocol: corev1.ProtocolTCP,
		Endpoints: endpoints})
	if err := Apply(node, rules); err != nil {
		t.Fatal(err)
	}
	if got := sticky(pods["c"], "pod c after a rewrite", 10); got != first {
		t.Errorf("after a rewrite for another Service pod c reached %s, before %s", got, first)
	}

	// Its endpoint leaves: it goes to the other.
	other := map[string]netip.AddrPort{"a": endpoints[1], "b": endpoints[0]}[first]
	rules[0].Endpoints = []netip.AddrPort{other}
	if err := Apply(node, rules); err != nil {
		t.Fatal(err)
	}
	if got := sticky(pods["c"], "pod c after its endpoint left", 5); got == first {
		t.Errorf("pod c still reached %s, which left", got)
	}

	// Affinity off: the sets are gone, and connections spread again.
	rules[0].Endpoints, rules[0].Affinity = endpoints, 0
	if err := Apply(node, rules); err != nil {
		t.Fatal(err)
	}
	conn, err := nftables.New(nftables.WithNetNSFd(int(node)))
	if err != nil {
		t.Fatal(err)
	}
	sets, err := conn.GetSets(&nftables.Table{Name: Table, Family: nftables.TableFamilyIPv4})
	if err != nil {
		t.Fatal(err)
	}
	if len(sets) != 0 {
		t.Errorf("%d affinity sets left without affinity", len(sets))
	}
	if seen := answers(t, pods["c"], "pod c", web.String(), 40); len(seen) != 2 {
		t.Errorf("without affinity pod c reached %v, want both", seen)
	}
}

// TestApplyNodePort: a Service's node port, on an address of the node's,
// reaches the Service's endpoints from a pod and from the node itself,
// masqueraded, under the Service's affinity; without endpoints it refuses
// at once, a server of the node's on that port notwithstanding; the
// loopback addresses serve no node port; gone, the node port is closed
// again.
func TestApplyNodePort(t *testing.T) {
	node, pods, ips := newNode(t)
	serve(t, pods["a"], ":8080", "a")
	serve(t, pods["b"], ":8080", "b")
	serve(t, node, ":30081", "node")
	serveSource(t, pods["a"], ":8081")
	// The bridge's address, the first of the pod CIDR (newNode's is the
	// default): the node's address on the pod network.
	gateway := podnet.DefaultPodCIDR.Masked().Addr().Next()
	web := netip.AddrPortFrom(gateway, 30080)
	empty := netip.AddrPortFrom(gateway, 30081)
	sticky := netip.AddrPortFrom(gateway, 30082)
	source := netip.AddrPortFrom(gateway, 30083)
	endpoints := []netip.AddrPort{netip.AddrPortFrom(ips["a"], 8080), netip.AddrPortFrom(ips["b"], 8080)}
	rules := []Rule{
		{Service: "ns/web:", Address: netip.MustParseAddrPort("10.0.0.70:80"), Protocol: corev1.ProtocolTCP,
			Endpoints: endpoints, NodePort: web.Port()},
		{Service: "ns/empty:", Address: netip.MustParseAddrPort("10.0.0.71:80"), Protocol: corev1.ProtocolTCP,
			NodePort: empty.Port()},
		{Service: "ns/sticky:", Address: netip.MustParseAddrPort("10.0.0.72:80"), Protocol: corev1.ProtocolTCP,
			Endpoints: endpoints, Affinity: time.Hour, NodePort: sticky.Port()},
		{Service: "ns/source:", Address: netip.MustParseAddrPort("10.0.0.73:80"), Protocol: corev1.ProtocolTCP,
			Endpoints: []netip.AddrPort{netip.AddrPortFrom(ips["a"], 8081)}, NodePort: source.Port()},
	}
	if err := Apply(node, rules); err != nil {
		t.Fatal(err)
	}

	// From another pod, both endpoints answer.
	if seen := answers(t, pods["c"], "pod c", web.String(), 40); seen["a"] == 0 || seen["b"] == 0 || len(seen) != 2 {
		t.Errorf("answers from the node port: %v, want a and b", seen)
	}
	// An endpoint reaches itself through the node port.
	if answers(t, pods["a"], "pod a", web.String(), 40)["a"] == 0 {
		t.Error("pod a never reached itself through the node port")
	}
	// The node reaches it at its address, not at the loopback's.
	if got, err := ask(t, node, web.String()); err != nil || (got != "a" && got != "b") {
		t.Errorf("the node to the node port: %q %v", got, err)
	}
	if _, err := ask(t, node, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), web.Port()).String()); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("the node to the node port on 127.0.0.1 gave %v, want connection refused (not served on the loopback)", err)
	}

	// The endpoint sees the connection come from the node, so that its
	// replies go back through it (the bridge may not pass them to
	// netfilter).
	if got, err := ask(t, pods["c"], source.String()); err != nil || got != gateway.String() {
		t.Errorf("pod c's connection through the node port came from %q %v, want %s (masqueraded)", got, err, gateway)
	}
	// At the cluster IP it is not masqueraded.
	if got, err := ask(t, pods["c"], rules[3].Address.String()); err != nil || got != ips["c"].String() {
		t.Errorf("pod c's connection to the cluster IP came from %q %v, want %s", got, err, ips["c"])
	}

	// Without endpoints the node port refuses at once, from a pod and
	// from the node, though the node has a server on that port.
	for _, from := range []struct {
		name string
		ns   netns.NsHandle
	}{{"pod c", pods["c"]}, {"the node", node}} {
		start := time.Now()
		if got, err := ask(t, from.ns, empty.String()); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("%s to a node port without endpoints: %q %v, want connection refused", from.name, got, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s: refusing took %s", from.name, d)
		}
	}

	// With ClientIP affinity, a client reaches the same endpoint at the
	// node port as at the cluster IP.
	viaClusterIP, viaNodePort := answers(t, pods["c"], "pod c", rules[2].Address.String(), 10), answers(t, pods["c"], "pod c", sticky.String(), 10)
	if len(viaClusterIP) != 1 || !maps.Equal(viaClusterIP, viaNodePort) {
		t.Errorf("with affinity pod c reached %v at the cluster IP and %v at the node port, want one endpoint throughout", viaClusterIP, viaNodePort)
	}

	// The Service gone, its node port is closed (nothing on the node
	// listens there).
	if err := Apply(node, rules[1:]); err != nil {
		t.Fatal(err)
	}
	for _, from := range []struct {
		name string
		ns   netns.NsHandle
	}{{"pod c", pods["c"]}, {"the node", node}} {
		if got, err := ask(t, from.ns, web.String()); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("%s to the node port of a Service gone: %q %v, want connection refused", from.name, got, err)
		}
	}
}
