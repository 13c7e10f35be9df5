package clusterdns

import (
	"context"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

func clusterIPService(ns, name string, ips []string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: ips[0], ClusterIPs: ips, Ports: ports}}
}

func headlessService(ns, name string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, ClusterIPs: []string{corev1.ClusterIPNone}, Ports: ports}}
}

func externalName(ns, name, target string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: target}}
}

type ep struct {
	ip       string
	hostname string
	ready    *bool
}

func slice(ns, svc, name string, family discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps ...ep) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		Labels: map[string]string{discoveryv1.LabelServiceName: svc}}, AddressType: family, Ports: ports}
	for _, e := range eps {
		d := discoveryv1.Endpoint{Addresses: []string{e.ip}, Conditions: discoveryv1.EndpointConditions{Ready: e.ready}}
		if e.hostname != "" {
			d.Hostname = ptr.To(e.hostname)
		}
		s.Endpoints = append(s.Endpoints, d)
	}
	return s
}

func namedPort(name string, proto corev1.Protocol, port int32) discoveryv1.EndpointPort {
	return discoveryv1.EndpointPort{Name: ptr.To(name), Protocol: ptr.To(proto), Port: ptr.To(port)}
}

// newTestServer is a Server on informers of a fake clientset holding objs.
func newTestServer(t *testing.T, opts Options, objs ...runtime.Object) *Server {
	t.Helper()
	client := fake.NewClientset(objs...)
	f := informers.NewSharedInformerFactory(client, 0)
	svcs, eps := f.Core().V1().Services().Informer(), f.Discovery().V1().EndpointSlices().Informer()
	if err := AddIndexers(svcs, eps); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); f.Shutdown() })
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	s, err := New(opts, svcs, eps)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ask returns the server's answer to name and qtype, as text lines, and
// its rcode and authority section's types.
func ask(t *testing.T, s *Server, name string, qtype uint16) (rcode string, answer, extra []string, ns []uint16) {
	t.Helper()
	q := new(dns.Msg)
	q.SetQuestion(name, qtype)
	m := s.answer(context.Background(), q, false)
	for _, rr := range m.Answer {
		answer = append(answer, strings.ReplaceAll(rr.String(), "\t", " "))
	}
	for _, rr := range m.Extra {
		extra = append(extra, strings.ReplaceAll(rr.String(), "\t", " "))
	}
	for _, rr := range m.Ns {
		ns = append(ns, rr.Header().Rrtype)
	}
	return dns.RcodeToString[m.Rcode], answer, extra, ns
}

func testObjects() []runtime.Object {
	http := corev1.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}
	return []runtime.Object{
		clusterIPService("default", "kubernetes", []string{"10.0.0.1"}, corev1.ServicePort{Name: "https", Protocol: corev1.ProtocolTCP, Port: 443}),
		clusterIPService("shop", "web", []string{"10.0.0.20", "fd00::20"}, http, corev1.ServicePort{Protocol: corev1.ProtocolTCP, Port: 8080}),
		headlessService("ml", "workers", http),
		slice("ml", "workers", "workers-a", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{namedPort("http", corev1.ProtocolTCP, 29500)},
			ep{ip: "10.244.0.5", hostname: "train-0"}, ep{ip: "10.244.0.6", hostname: "train-1", ready: ptr.To(true)},
			ep{ip: "10.244.0.7", ready: ptr.To(true)}, ep{ip: "10.244.0.8", hostname: "train-3", ready: ptr.To(false)}),
		headlessService("ml", "empty"),
		slice("ml", "empty", "empty-a", discoveryv1.AddressTypeIPv4, nil, ep{ip: "10.244.0.9", ready: ptr.To(false)}),
	}
}

func TestResolveServices(t *testing.T) {
	s := newTestServer(t, Options{Upstreams: nil}, append(testObjects(),
		externalName("shop", "db", "db.Example.com"),
		externalName("shop", "api", "kubernetes.default.svc.cluster.local"),
		externalName("shop", "loop", "loop.shop.svc.cluster.local"))...)
	for _, c := range []struct {
		name   string
		qtype  uint16
		rcode  string
		answer []string
		extra  []string
	}{
		{"dns-version.cluster.local.", dns.TypeTXT, "NOERROR", []string{`dns-version.cluster.local. 5 IN TXT "1.1.0"`}, nil},
		{"kubernetes.default.svc.cluster.local.", dns.TypeA, "NOERROR", []string{"kubernetes.default.svc.cluster.local. 5 IN A 10.0.0.1"}, nil},
		// Case-insensitive; the answer spelt as the question.
		{"KUBERNETES.Default.SVC.cluster.local.", dns.TypeA, "NOERROR", []string{"KUBERNETES.Default.SVC.cluster.local. 5 IN A 10.0.0.1"}, nil},
		{"kubernetes.default.svc.cluster.local.", dns.TypeAAAA, "NOERROR", nil, nil},
		{"web.shop.svc.cluster.local.", dns.TypeAAAA, "NOERROR", []string{"web.shop.svc.cluster.local. 5 IN AAAA fd00::20"}, nil},
		{"_https._tcp.kubernetes.default.svc.cluster.local.", dns.TypeSRV, "NOERROR",
			[]string{"_https._tcp.kubernetes.default.svc.cluster.local. 5 IN SRV 0 100 443 kubernetes.default.svc.cluster.local."},
			[]string{"kubernetes.default.svc.cluster.local. 5 IN A 10.0.0.1"}},
		{"_http._udp.web.shop.svc.cluster.local.", dns.TypeSRV, "NXDOMAIN", nil, nil},
		{"missing.shop.svc.cluster.local.", dns.TypeA, "NXDOMAIN", nil, nil},
		{"shop.svc.cluster.local.", dns.TypeA, "NOERROR", nil, nil},
		{"nowhere.svc.cluster.local.", dns.TypeA, "NXDOMAIN", nil, nil},
		{"svc.cluster.local.", dns.TypeA, "NOERROR", nil, nil},
		{"web.shop.cluster.local.", dns.TypeA, "NXDOMAIN", nil, nil},
		// Headless: the ready endpoints only (nil is ready).
		{"workers.ml.svc.cluster.local.", dns.TypeA, "NOERROR", []string{
			"workers.ml.svc.cluster.local. 5 IN A 10.244.0.5", "workers.ml.svc.cluster.local. 5 IN A 10.244.0.6",
			"workers.ml.svc.cluster.local. 5 IN A 10.244.0.7"}, nil},
		{"train-1.workers.ml.svc.cluster.local.", dns.TypeA, "NOERROR", []string{"train-1.workers.ml.svc.cluster.local. 5 IN A 10.244.0.6"}, nil},
		{"10-244-0-7.workers.ml.svc.cluster.local.", dns.TypeA, "NOERROR", []string{"10-244-0-7.workers.ml.svc.cluster.local. 5 IN A 10.244.0.7"}, nil},
		{"train-3.workers.ml.svc.cluster.local.", dns.TypeA, "NXDOMAIN", nil, nil},
		{"empty.ml.svc.cluster.local.", dns.TypeA, "NXDOMAIN", nil, nil},
		{"_http._tcp.workers.ml.svc.cluster.local.", dns.TypeSRV, "NOERROR", []string{
			"_http._tcp.workers.ml.svc.cluster.local. 5 IN SRV 0 33 29500 train-0.workers.ml.svc.cluster.local.",
			"_http._tcp.workers.ml.svc.cluster.local. 5 IN SRV 0 33 29500 train-1.workers.ml.svc.cluster.local.",
			"_http._tcp.workers.ml.svc.cluster.local. 5 IN SRV 0 33 29500 10-244-0-7.workers.ml.svc.cluster.local."}, []string{
			"train-0.workers.ml.svc.cluster.local. 5 IN A 10.244.0.5", "train-1.workers.ml.svc.cluster.local. 5 IN A 10.244.0.6",
			"10-244-0-7.workers.ml.svc.cluster.local. 5 IN A 10.244.0.7"}},
		// ExternalName: the CNAME, whose target cannot be followed here
		// (no upstream); one inside the zone is.
		{"db.shop.svc.cluster.local.", dns.TypeA, "SERVFAIL", []string{"db.shop.svc.cluster.local. 5 IN CNAME db.example.com."}, nil},
		{"api.shop.svc.cluster.local.", dns.TypeA, "NOERROR", []string{
			"api.shop.svc.cluster.local. 5 IN CNAME kubernetes.default.svc.cluster.local.",
			"kubernetes.default.svc.cluster.local. 5 IN A 10.0.0.1"}, nil},
		{"loop.shop.svc.cluster.local.", dns.TypeA, "NOERROR", []string{
			"loop.shop.svc.cluster.local. 5 IN CNAME loop.shop.svc.cluster.local."}, nil},
		// Names with no records of their own above SRV records: NODATA.
		{"_tcp.kubernetes.default.svc.cluster.local.", dns.TypeA, "NOERROR", nil, nil},
		{"_udp.kubernetes.default.svc.cluster.local.", dns.TypeA, "NXDOMAIN", nil, nil},
		// Pods by address.
		{"10-244-0-5.ml.pod.cluster.local.", dns.TypeA, "NOERROR", []string{"10-244-0-5.ml.pod.cluster.local. 5 IN A 10.244.0.5"}, nil},
		{"fd00--5.ml.pod.cluster.local.", dns.TypeAAAA, "NOERROR", []string{"fd00--5.ml.pod.cluster.local. 5 IN AAAA fd00::5"}, nil},
		{"10-244-0.ml.pod.cluster.local.", dns.TypeA, "NXDOMAIN", nil, nil},
		// Reverse.
		{"1.0.0.10.in-addr.arpa.", dns.TypePTR, "NOERROR", []string{"1.0.0.10.in-addr.arpa. 5 IN PTR kubernetes.default.svc.cluster.local."}, nil},
		{"6.0.244.10.in-addr.arpa.", dns.TypePTR, "NOERROR", []string{"6.0.244.10.in-addr.arpa. 5 IN PTR train-1.workers.ml.svc.cluster.local."}, nil},
		{"0.2.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa.", dns.TypePTR, "NOERROR",
			[]string{"0.2.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa. 5 IN PTR web.shop.svc.cluster.local."}, nil},
		{"cluster.local.", dns.TypeSOA, "NOERROR", []string{"cluster.local. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 5"}, nil},
	} {
		rcode, answer, extra, ns := ask(t, s, c.name, c.qtype)
		if rcode != c.rcode || !cmp.Equal(c.answer, answer) || !cmp.Equal(c.extra, extra) {
			t.Errorf("%s %s: %s %q extra %q, want %s %q extra %q", c.name, dns.TypeToString[c.qtype], rcode, answer, extra, c.rcode, c.answer, c.extra)
		}
		// No answer: the zone's SOA says for how long.
		if len(answer) == 0 && !slices.Equal(ns, []uint16{dns.TypeSOA}) {
			t.Errorf("%s %s: authority %v, want the SOA", c.name, dns.TypeToString[c.qtype], ns)
		}
	}
}

// TestResolveFollowsChanges: answers follow the informers.
func TestResolveFollowsChanges(t *testing.T) {
	client := fake.NewClientset(headlessService("ml", "workers"))
	f := informers.NewSharedInformerFactory(client, 0)
	svcs, eps := f.Core().V1().Services().Informer(), f.Discovery().V1().EndpointSlices().Informer()
	if err := AddIndexers(svcs, eps); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); f.Shutdown() }()
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	s, err := New(Options{}, svcs, eps)
	if err != nil {
		t.Fatal(err)
	}
	if rcode, _, _, _ := ask(t, s, "workers.ml.svc.cluster.local.", dns.TypeA); rcode != "NXDOMAIN" {
		t.Fatalf("no endpoints: %s, want NXDOMAIN", rcode)
	}
	// Handlers are told after the cache has the object.
	added := make(chan struct{})
	once := sync.OnceFunc(func() { close(added) })
	if _, err := eps.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) { once() }}); err != nil {
		t.Fatal(err)
	}
	sl := slice("ml", "workers", "w", discoveryv1.AddressTypeIPv4, nil, ep{ip: "10.244.1.1", hostname: "w-0"})
	if _, err := client.DiscoveryV1().EndpointSlices("ml").Create(ctx, sl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-added:
	case <-time.After(time.Minute):
		t.Fatal("the informer never delivered the slice")
	}
	if _, answer, _, _ := ask(t, s, "w-0.workers.ml.svc.cluster.local.", dns.TypeA); len(answer) != 1 {
		t.Errorf("after the slice: %q, want one A record", answer)
	}
}

func TestNewRefusesBadInput(t *testing.T) {
	client := fake.NewClientset()
	f := informers.NewSharedInformerFactory(client, 0)
	svcs, eps := f.Core().V1().Services().Informer(), f.Discovery().V1().EndpointSlices().Informer()
	if _, err := New(Options{}, svcs, eps); err == nil || !strings.Contains(err.Error(), "AddIndexers") {
		t.Errorf("New without the indexes: %v", err)
	}
	if err := AddIndexers(svcs, eps); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{Zone: "bad..zone"}, svcs, eps); err == nil || !strings.Contains(err.Error(), "bad..zone") {
		t.Errorf("New with a bad zone: %v", err)
	}
}

// upstream is a resolver on loopback answering every A question with
// 192.0.2.<n> records, n records, over UDP and TCP.
func upstream(t *testing.T, n int) string {
	t.Helper()
	pc, l, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if r.Question[0].Name == "nxdomain.example." {
			m.Rcode = dns.RcodeNameError
		}
		for i := range n {
			if m.Rcode == dns.RcodeSuccess {
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
					A: netip.AddrFrom4([4]byte{192, 0, 2, byte(i + 1)}).AsSlice()})
			}
		}
		if _, ok := w.RemoteAddr().(*net.UDPAddr); ok {
			m.Truncate(dns.MinMsgSize)
		}
		_ = w.WriteMsg(m)
	})
	started := make(chan struct{}, 2)
	notify := func() { started <- struct{}{} }
	udp := &dns.Server{PacketConn: pc, Handler: h, NotifyStartedFunc: notify}
	tcp := &dns.Server{Listener: l, Handler: h, NotifyStartedFunc: notify}
	go func() { _ = udp.ActivateAndServe() }()
	go func() { _ = tcp.ActivateAndServe() }()
	<-started
	<-started
	t.Cleanup(func() { _ = udp.Shutdown(); _ = tcp.Shutdown() })
	return pc.LocalAddr().String()
}

// startServing starts s on loopback: its address, the function that
// stops it and Serve's outcome.
func startServing(t *testing.T, s *Server) (string, context.CancelFunc, <-chan error) {
	t.Helper()
	pc, l, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, pc, l) }()
	return pc.LocalAddr().String(), cancel, done
}

// serve starts s on loopback until the test's end and returns its address.
func serve(t *testing.T, s *Server) string {
	t.Helper()
	addr, cancel, done := startServing(t, s)
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return addr
}

func exchangeT(t *testing.T, network, server, name string, qtype uint16) *dns.Msg {
	t.Helper()
	q := new(dns.Msg)
	q.SetQuestion(name, qtype)
	c := &dns.Client{Net: network, Timeout: 10 * time.Second}
	m, _, err := c.Exchange(q, server)
	if err != nil {
		t.Fatalf("%s %s: %v", network, name, err)
	}
	return m
}

// TestServeForwardsAndTruncates: over UDP and TCP, the cluster's names
// are answered, others forwarded (over TCP when the upstream's UDP answer
// is truncated), ExternalName targets followed, and an unreachable
// upstream is SERVFAIL, never a hang.
func TestServeForwardsAndTruncates(t *testing.T) {
	ext := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "db.example.com"}}
	up := upstream(t, 40)
	s := newTestServer(t, Options{Upstreams: []string{up}, ReverseCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}},
		append(testObjects(), ext, externalName("shop", "gone", "nxdomain.example"))...)
	addr := serve(t, s)
	for _, network := range []string{"udp", "tcp"} {
		if m := exchangeT(t, network, addr, "kubernetes.default.svc.cluster.local.", dns.TypeA); m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 || !m.Authoritative {
			t.Errorf("%s: cluster name: %v", network, m)
		}
		// 40 answers do not fit 512 bytes: the upstream truncates over
		// UDP, the server asks again over TCP; its own UDP answer is then
		// truncated too, and TCP has it whole.
		m := exchangeT(t, network, addr, "big.example.", dns.TypeA)
		if network == "tcp" && len(m.Answer) != 40 {
			t.Errorf("tcp: forwarded answer has %d records, want 40", len(m.Answer))
		}
		m.Compress = true // as it came on the wire
		if network == "udp" && (!m.Truncated || m.Len() > dns.MinMsgSize) {
			t.Errorf("udp: forwarded answer of %d bytes, truncated %v", m.Len(), m.Truncated)
		}
		if m := exchangeT(t, network, addr, "nxdomain.example.", dns.TypeA); m.Rcode != dns.RcodeNameError {
			t.Errorf("%s: upstream's NXDOMAIN came back as %s", network, dns.RcodeToString[m.Rcode])
		}
		if m := exchangeT(t, network, addr, "9.0.0.10.in-addr.arpa.", dns.TypePTR); m.Rcode != dns.RcodeNameError {
			t.Errorf("%s: PTR of an unnamed service address: %s, want NXDOMAIN", network, dns.RcodeToString[m.Rcode])
		}
	}
	m := exchangeT(t, "tcp", addr, "db.shop.svc.cluster.local.", dns.TypeA)
	if len(m.Answer) != 41 || m.Answer[0].Header().Rrtype != dns.TypeCNAME {
		t.Errorf("ExternalName: %d records, want the CNAME and the target's 40: %v", len(m.Answer), m)
	}
	// A target that does not exist: the upstream's NXDOMAIN, after the
	// CNAME.
	m = exchangeT(t, "tcp", addr, "gone.shop.svc.cluster.local.", dns.TypeA)
	if m.Rcode != dns.RcodeNameError || len(m.Answer) != 1 {
		t.Errorf("ExternalName to a missing name: %v", m)
	}
	// EDNS0: the answer has an OPT record and is cut to what the client
	// takes, at most 1232 bytes over UDP.
	q := new(dns.Msg)
	q.SetQuestion("big.example.", dns.TypeA)
	q.SetEdns0(4096, false)
	m, _, err := (&dns.Client{Net: "udp", UDPSize: 4096}).Exchange(q, addr)
	if err != nil {
		t.Fatal(err)
	}
	m.Compress = true
	if m.Len() > maxUDPSize {
		t.Errorf("EDNS0 answer of %d bytes over UDP", m.Len())
	}
	q.SetQuestion("kubernetes.default.svc.cluster.local.", dns.TypeA)
	if m, _, err = (&dns.Client{Net: "udp"}).Exchange(q, addr); err != nil || m.IsEdns0() == nil {
		t.Errorf("EDNS0 question: no OPT in the answer (%v): %v", err, m)
	}
	q.IsEdns0().SetVersion(1)
	if m, _, err = (&dns.Client{Net: "udp"}).Exchange(q, addr); err != nil || m.Rcode != dns.RcodeBadVers {
		t.Errorf("EDNS version 1: %v %v, want BADVERS", err, m)
	}
	q = new(dns.Msg)
	q.SetQuestion("cluster.local.", dns.TypeAXFR)
	if m, _, err = (&dns.Client{Net: "tcp"}).Exchange(q, addr); err != nil || m.Rcode != dns.RcodeRefused {
		t.Errorf("AXFR: %v %v, want REFUSED", err, m)
	}
	// A reverse name in the cluster's ranges, other type: NODATA with the
	// reverse zone's SOA.
	m = exchangeT(t, "udp", addr, "1.0.0.10.in-addr.arpa.", dns.TypeA)
	if m.Rcode != dns.RcodeSuccess || len(m.Answer) != 0 || len(m.Ns) != 1 || m.Ns[0].Header().Name != "in-addr.arpa." {
		t.Errorf("A of a reverse name: %v", m)
	}

	// An upstream that does not answer: SERVFAIL within the timeout.
	dead, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	s2 := newTestServer(t, Options{Upstreams: []string{dead.LocalAddr().String()}, ForwardTimeout: 100 * time.Millisecond})
	if m := exchangeT(t, "udp", serve(t, s2), "example.com.", dns.TypeA); m.Rcode != dns.RcodeServerFailure {
		t.Errorf("dead upstream: %s, want SERVFAIL", dns.RcodeToString[m.Rcode])
	}
}

func TestUpstreamsFromResolvConf(t *testing.T) {
	path := t.TempDir() + "/resolv.conf"
	if err := writeFile(path, "search example.com\nnameserver 192.0.2.53\nnameserver fd00::53\noptions ndots:2\n"); err != nil {
		t.Fatal(err)
	}
	got, err := UpstreamsFromResolvConf(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"192.0.2.53:53", "[fd00::53]:53"}, got); diff != "" {
		t.Errorf("upstreams (-want +got):\n%s", diff)
	}
}

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o644) }

// TestDualStackHeadlessSRV: an endpoint in both families is one SRV
// target, both its addresses in the additional section.
func TestDualStackHeadlessSRV(t *testing.T) {
	ports := []discoveryv1.EndpointPort{namedPort("http", corev1.ProtocolTCP, 80)}
	s := newTestServer(t, Options{},
		headlessService("ml", "w"),
		slice("ml", "w", "w-4", discoveryv1.AddressTypeIPv4, ports, ep{ip: "10.244.0.5", hostname: "w-0"}),
		slice("ml", "w", "w-6", discoveryv1.AddressTypeIPv6, ports, ep{ip: "fd00::5", hostname: "w-0"}))
	_, answer, extra, _ := ask(t, s, "_http._tcp.w.ml.svc.cluster.local.", dns.TypeSRV)
	if want := []string{"_http._tcp.w.ml.svc.cluster.local. 5 IN SRV 0 100 80 w-0.w.ml.svc.cluster.local."}; !cmp.Equal(want, answer) {
		t.Errorf("SRV %q, want %q", answer, want)
	}
	if len(extra) != 2 {
		t.Errorf("additional %q, want the A and the AAAA", extra)
	}
	_, answer, _, _ = ask(t, s, "w-0.w.ml.svc.cluster.local.", dns.TypeAAAA)
	if want := []string{"w-0.w.ml.svc.cluster.local. 5 IN AAAA fd00::5"}; !cmp.Equal(want, answer) {
		t.Errorf("AAAA %q, want %q", answer, want)
	}
}

// TestServeStopsWithForwardsInFlight: a question forwarded to an upstream
// that never answers does not hold Serve's end.
func TestServeStopsWithForwardsInFlight(t *testing.T) {
	dead, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	s := newTestServer(t, Options{Upstreams: []string{dead.LocalAddr().String()}, ForwardTimeout: time.Hour})
	addr, cancel, done := startServing(t, s)
	asked := make(chan struct{})
	go func() {
		q := new(dns.Msg)
		q.SetQuestion("example.com.", dns.TypeA)
		close(asked)
		_, _, _ = (&dns.Client{Net: "udp", Timeout: time.Hour}).Exchange(q, addr)
	}()
	<-asked
	// The question reaches the dead upstream (its packet arrives).
	buf := make([]byte, 512)
	if _, _, err := dead.ReadFrom(buf); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Serve did not return with a forward in flight")
	}
}
