package clusterdns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Options configures a Server.
type Options struct {
	// Zone is the cluster domain. Default "cluster.local".
	Zone string
	// TTL is the time to live of the cluster's records, in seconds.
	// Default 5 (CoreDNS's kubernetes plugin's): pods come and go fast in
	// batch work.
	TTL uint32
	// Upstreams are the resolvers (host:port) questions outside the
	// cluster are forwarded to, tried in order; none answers SERVFAIL.
	Upstreams []string
	// ReverseCIDRs are the cluster's address ranges (Service and pod
	// CIDRs): a PTR question for an address in one with no name is
	// NXDOMAIN, not forwarded.
	ReverseCIDRs []netip.Prefix
	// ForwardTimeout bounds each try of an upstream. Default 2s.
	ForwardTimeout time.Duration
}

// Server answers DNS questions for the cluster (package doc).
type Server struct {
	zone      zoneView
	upstreams []string
	timeout   time.Duration
	// ctx is cancelled when Serve stops: forwards in flight end.
	ctx    context.Context
	cancel context.CancelFunc
	// forwards bounds the questions being forwarded at once.
	forwards chan struct{}
}

// maxForwards bounds the questions forwarded at once (CoreDNS's forward
// plugin's max_concurrent is 1000); more are SERVFAIL at once, never
// queued behind a slow upstream.
const maxForwards = 1000

// maxUDPSize caps the UDP answers' size whatever the client advertises:
// the DNS flag day 2020 size, which avoids IP fragmentation.
const maxUDPSize = 1232

// maxChase bounds the CNAMEs followed (ExternalName to ExternalName).
const maxChase = 8

// New returns a Server reading the Service and EndpointSlice informers,
// which must have AddIndexers' indexes.
func New(opts Options, services, slices cache.SharedIndexInformer) (*Server, error) {
	if opts.Zone == "" {
		opts.Zone = "cluster.local"
	}
	if opts.TTL == 0 {
		opts.TTL = 5
	}
	if opts.ForwardTimeout <= 0 {
		opts.ForwardTimeout = 2 * time.Second
	}
	zone := strings.ToLower(dns.Fqdn(opts.Zone))
	if _, ok := dns.IsDomainName(zone); !ok || zone == "." {
		return nil, fmt.Errorf("cluster domain %q is not a domain name", opts.Zone)
	}
	for _, idx := range []struct {
		inf  cache.SharedIndexInformer
		name string
	}{{services, byClusterIP}, {slices, byService}, {slices, byAddress}} {
		if _, ok := idx.inf.GetIndexer().GetIndexers()[idx.name]; !ok {
			return nil, fmt.Errorf("informer lacks the %s index: call AddIndexers before it starts", idx.name)
		}
	}
	cidrs := opts.ReverseCIDRs
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{
		ctx: ctx, cancel: cancel, forwards: make(chan struct{}, maxForwards),
		zone: zoneView{zone: zone, ttl: opts.TTL, recs: records{services: services.GetIndexer(), slices: slices.GetIndexer()},
			reverse: func(ip netip.Addr) bool {
				for _, p := range cidrs {
					if p.Contains(ip) {
						return true
					}
				}
				return false
			}},
		upstreams: opts.Upstreams,
		timeout:   opts.ForwardTimeout,
	}, nil
}

// UpstreamsFromResolvConf returns the name servers of a resolv.conf file
// (the host's: /etc/resolv.conf), as host:port.
func UpstreamsFromResolvConf(path string) ([]string, error) {
	cfg, err := dns.ClientConfigFromFile(path)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range cfg.Servers {
		out = append(out, net.JoinHostPort(s, cfg.Port))
	}
	return out, nil
}

// ServeDNS answers one request.
func (s *Server) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	_, udp := w.RemoteAddr().(*net.UDPAddr)
	m := s.answer(s.ctx, r, !udp)
	if udp {
		size := dns.MinMsgSize
		if opt := r.IsEdns0(); opt != nil {
			size = min(max(int(opt.UDPSize()), dns.MinMsgSize), maxUDPSize)
		}
		m.Truncate(size)
	} else {
		m.Truncate(dns.MaxMsgSize)
	}
	if err := w.WriteMsg(m); err != nil {
		klog.V(4).InfoS("Writing a DNS answer failed", "err", err)
	}
}

// answer builds the response to r.
func (s *Server) answer(ctx context.Context, r *dns.Msg, tcp bool) *dns.Msg {
	m := new(dns.Msg)
	switch {
	case r.Opcode != dns.OpcodeQuery:
		return m.SetRcode(r, dns.RcodeNotImplemented)
	case len(r.Question) != 1:
		return m.SetRcodeFormatError(r)
	}
	opt := r.IsEdns0()
	if opt != nil && opt.Version() != 0 {
		m.SetRcode(r, dns.RcodeBadVers)
		m.SetEdns0(maxUDPSize, false)
		return m
	}
	q := r.Question[0]
	switch {
	case q.Qtype == dns.TypeAXFR || q.Qtype == dns.TypeIXFR:
		return m.SetRcode(r, dns.RcodeRefused)
	case q.Qclass != dns.ClassINET && q.Qclass != dns.ClassANY:
		return m.SetRcode(r, dns.RcodeRefused)
	}
	d := s.zone.resolve(q)
	if d.forward {
		out, err := s.forward(ctx, r, tcp)
		if err != nil {
			klog.V(2).InfoS("Forwarding a DNS question failed", "name", q.Name, "err", err)
			return m.SetRcode(r, dns.RcodeServerFailure)
		}
		out.Id = r.Id
		return out
	}
	m.SetReply(r)
	m.Authoritative = true
	m.RecursionAvailable = true
	m.Rcode = d.rcode
	m.Answer, m.Extra = d.answer, d.extra
	m.Ns = nil
	seen := map[string]bool{strings.ToLower(dns.Fqdn(q.Name)): true}
	for range maxChase {
		if d.chase == "" || seen[d.chase] {
			break
		}
		seen[d.chase] = true
		if dns.IsSubDomain(s.zone.zone, d.chase) {
			d = s.zone.resolve(dns.Question{Name: d.chase, Qtype: q.Qtype, Qclass: dns.ClassINET})
			m.Answer = append(m.Answer, d.answer...)
			m.Rcode = d.rcode
			continue
		}
		c := new(dns.Msg)
		c.SetQuestion(d.chase, q.Qtype)
		out, err := s.forward(ctx, c, tcp)
		if err != nil {
			klog.V(2).InfoS("Following an ExternalName failed", "target", d.chase, "err", err)
			m.Rcode = dns.RcodeServerFailure
			break
		}
		m.Answer = append(m.Answer, out.Answer...)
		m.Rcode = out.Rcode
		if len(out.Answer) == 0 {
			m.Ns = out.Ns
		}
		d = reply{}
	}
	if len(m.Answer) == 0 && m.Ns == nil {
		m.Ns = []dns.RR{s.zone.soa(d.soaZone)}
	}
	if opt != nil {
		m.SetEdns0(maxUDPSize, false)
	}
	m.Compress = true
	return m
}

// forward asks the upstreams r, over TCP if tcp or if a UDP answer was
// truncated (the truncated one is the answer if TCP fails), within one
// time budget for the whole question.
func (s *Server) forward(ctx context.Context, r *dns.Msg, tcp bool) (*dns.Msg, error) {
	if len(s.upstreams) == 0 {
		return nil, errors.New("no upstream resolver")
	}
	select {
	case s.forwards <- struct{}{}:
		defer func() { <-s.forwards }()
	default:
		return nil, fmt.Errorf("%d questions are being forwarded already", maxForwards)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*s.timeout)
	defer cancel()
	var errs []error
	for _, up := range s.upstreams {
		var truncated *dns.Msg
		for _, network := range []string{"udp", "tcp"} {
			if tcp && network == "udp" {
				continue
			}
			out, err := exchange(ctx, &dns.Client{Net: network, Timeout: s.timeout}, r, up)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s %s: %w", network, up, err))
				if truncated != nil {
					return truncated, nil
				}
				break
			}
			if out.Truncated && network == "udp" {
				truncated = out
				continue
			}
			return out, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// exchange asks up r with c; ctx's end (not only its deadline, which is
// all the client heeds) ends the wait.
func exchange(ctx context.Context, c *dns.Client, r *dns.Msg, up string) (*dns.Msg, error) {
	conn, err := c.DialContext(ctx, up)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	out, _, err := c.ExchangeWithConnContext(ctx, r, conn)
	if err != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return out, err
}

// Listen opens the UDP socket and the TCP listener the server serves on,
// both on addr's port (addr's port 0: a free one, the same for both).
func Listen(addr string) (net.PacketConn, net.Listener, error) {
	var lastErr error
	for range 10 {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, nil, err
		}
		l, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, l, nil
		}
		_ = pc.Close()
		lastErr = err
		if _, port, _ := net.SplitHostPort(addr); port != "0" {
			break
		}
	}
	return nil, nil, fmt.Errorf("listening on %s: %w", addr, lastErr)
}

// Serve answers on pc and l until ctx is done, then closes them.
func (s *Server) Serve(ctx context.Context, pc net.PacketConn, l net.Listener) error {
	started := make(chan struct{}, 2)
	notify := func() { started <- struct{}{} }
	udp := &dns.Server{PacketConn: pc, Handler: s, NotifyStartedFunc: notify}
	tcp := &dns.Server{Listener: l, Handler: s, NotifyStartedFunc: notify}
	errc := make(chan error, 2)
	go func() { errc <- udp.ActivateAndServe() }()
	go func() { errc <- tcp.ActivateAndServe() }()
	// Both started (so that Shutdown has something to stop), or one failed.
	for range 2 {
		select {
		case <-started:
		case err := <-errc:
			_ = pc.Close()
			_ = l.Close()
			return err
		}
	}
	select {
	case <-ctx.Done():
	case err := <-errc:
		s.cancel()
		_ = udp.Shutdown()
		_ = tcp.Shutdown()
		return err
	}
	// Forwards in flight end now: shutting down waits for their handlers.
	s.cancel()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return errors.Join(udp.ShutdownContext(sctx), tcp.ShutdownContext(sctx))
}
