package clusterdns

import (
	"net/netip"
	"strconv"
	"strings"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
)

// SchemaVersion is the version of the DNS specification's schema served,
// the dns-version record's text.
const SchemaVersion = "1.1.0"

// reply is the server's decision for one question.
type reply struct {
	// rcode is the response code (dns.RcodeSuccess or dns.RcodeNameError).
	rcode int
	// answer and extra are the answer and additional sections.
	answer, extra []dns.RR
	// forward says the question is not the cluster's: the host's
	// resolvers answer it.
	forward bool
	// chase is an ExternalName's target, whose records of the question's
	// type follow the CNAME (the server looks them up: in the zone, or
	// forwarded).
	chase string
	// soaZone, when set, is the zone whose SOA a reply without answers
	// carries (a reverse zone's); else the cluster zone's.
	soaZone string
}

// zoneView is what resolve needs: the zone, the TTL and the records.
type zoneView struct {
	// zone is the cluster domain, lower case and fully qualified.
	zone string
	ttl  uint32
	recs records
	// reverse says whether PTR questions for addresses the cluster has no
	// name for are answered NXDOMAIN (true) or forwarded.
	reverse func(netip.Addr) bool
}

// resolve decides the answer to q. Names compare in lower case; the
// answers' owner is the question's name as it was spelt.
func (z zoneView) resolve(q dns.Question) reply {
	owner := dns.Fqdn(q.Name)
	name := strings.ToLower(owner)
	if ip, ok := reverseIP(name); ok {
		switch {
		case q.Qtype == dns.TypePTR:
			return z.ptr(owner, ip)
		case z.reverse != nil && z.reverse(ip):
			return reply{soaZone: reverseZone(ip)}
		}
		return reply{forward: true}
	}
	if !dns.IsSubDomain(z.zone, name) {
		return reply{forward: true}
	}
	labels := dns.SplitDomainName(strings.TrimSuffix(name, z.zone))
	switch {
	case len(labels) == 0:
		return z.apex(q)
	case len(labels) == 1 && labels[0] == "dns-version":
		if q.Qtype == dns.TypeTXT {
			return reply{answer: []dns.RR{&dns.TXT{Hdr: z.hdr(owner, dns.TypeTXT), Txt: []string{SchemaVersion}}}}
		}
		return reply{}
	case labels[len(labels)-1] == "svc":
		return z.service(q, owner, labels[:len(labels)-1])
	case labels[len(labels)-1] == "pod":
		return z.pod(q, owner, labels[:len(labels)-1])
	}
	return reply{rcode: dns.RcodeNameError}
}

// reverseZone is the reverse zone ip's name is in.
func reverseZone(ip netip.Addr) string {
	if ip.Is4() {
		return "in-addr.arpa."
	}
	return "ip6.arpa."
}

// hdr is the header of a record of name and type t.
func (z zoneView) hdr(name string, t uint16) dns.RR_Header {
	return dns.RR_Header{Name: name, Rrtype: t, Class: dns.ClassINET, Ttl: z.ttl}
}

// soa is the SOA record of zone (the cluster zone if "").
func (z zoneView) soa(zone string) dns.RR {
	if zone == "" {
		zone = z.zone
	}
	return &dns.SOA{Hdr: z.hdr(zone, dns.TypeSOA), Ns: "ns.dns." + z.zone, Mbox: "hostmaster." + z.zone,
		Serial: 1, Refresh: 7200, Retry: 1800, Expire: 86400, Minttl: z.ttl}
}

// apex answers for the zone itself: its SOA and name server.
func (z zoneView) apex(q dns.Question) reply {
	switch q.Qtype {
	case dns.TypeSOA:
		return reply{answer: []dns.RR{z.soa("")}}
	case dns.TypeNS:
		return reply{answer: []dns.RR{&dns.NS{Hdr: z.hdr(z.zone, dns.TypeNS), Ns: "ns.dns." + z.zone}}}
	}
	return reply{}
}

// service answers for names under svc.<zone>; labels are the ones before
// "svc", outermost last.
func (z zoneView) service(q dns.Question, name string, labels []string) reply {
	switch len(labels) {
	case 0:
		return reply{}
	case 1:
		if z.recs.namespaceHasServices(labels[0]) {
			return reply{}
		}
		return reply{rcode: dns.RcodeNameError}
	}
	ns, svcName := labels[len(labels)-1], labels[len(labels)-2]
	svc := z.recs.service(ns, svcName)
	if svc == nil {
		return reply{rcode: dns.RcodeNameError}
	}
	rest := labels[:len(labels)-2]
	switch {
	case len(rest) == 0:
		return z.serviceName(q, name, svc)
	case len(rest) == 1 && headless(svc):
		return z.endpointName(q, name, svc, rest[0])
	case len(rest) == 2 && strings.HasPrefix(rest[0], "_") && strings.HasPrefix(rest[1], "_"):
		return z.srv(q, name, svc, rest[0][1:], rest[1][1:])
	case len(rest) == 1 && strings.HasPrefix(rest[0], "_"):
		// _<proto>.<svc>...: a name with no records of its own, that
		// exists if an SRV record is under it.
		for _, p := range z.namedPorts(svc) {
			if p.protocol == rest[0][1:] {
				return reply{}
			}
		}
	}
	return reply{rcode: dns.RcodeNameError}
}

// serviceName answers for <svc>.<ns>.svc.<zone>.
func (z zoneView) serviceName(q dns.Question, name string, svc *corev1.Service) reply {
	switch {
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		target := strings.ToLower(dns.Fqdn(svc.Spec.ExternalName))
		r := reply{answer: []dns.RR{&dns.CNAME{Hdr: z.hdr(name, dns.TypeCNAME), Target: target}}}
		if q.Qtype != dns.TypeCNAME {
			r.chase = target
		}
		return r
	case headless(svc):
		eps := z.recs.endpoints(svc.Namespace, svc.Name)
		if len(eps) == 0 {
			return reply{rcode: dns.RcodeNameError}
		}
		var r reply
		for _, e := range eps {
			if rr := z.address(name, q.Qtype, e.ip); rr != nil {
				r.answer = append(r.answer, rr)
			}
		}
		return r
	}
	var r reply
	for _, ip := range clusterIPs(svc) {
		if rr := z.address(name, q.Qtype, ip); rr != nil {
			r.answer = append(r.answer, rr)
		}
	}
	return r
}

// endpointName answers for <hostname>.<svc>.<ns>.svc.<zone> of a headless
// Service.
func (z zoneView) endpointName(q dns.Question, name string, svc *corev1.Service, host string) reply {
	found := false
	var r reply
	for _, e := range z.recs.endpoints(svc.Namespace, svc.Name) {
		if e.hostname != host {
			continue
		}
		found = true
		if rr := z.address(name, q.Qtype, e.ip); rr != nil {
			r.answer = append(r.answer, rr)
		}
	}
	if !found {
		return reply{rcode: dns.RcodeNameError}
	}
	return r
}

// namedPorts are the named ports SRV records are made of: a headless
// Service's endpoints', or the Service's.
func (z zoneView) namedPorts(svc *corev1.Service) []port {
	if !headless(svc) {
		return servicePorts(svc)
	}
	var out []port
	for _, e := range z.recs.endpoints(svc.Namespace, svc.Name) {
		out = append(out, e.ports...)
	}
	return out
}

// srv answers for _<port>._<proto>.<svc>.<ns>.svc.<zone>: one record per
// target host and port (an endpoint in two address families is one
// target), their addresses in the additional section.
func (z zoneView) srv(q dns.Question, name string, svc *corev1.Service, portName, proto string) reply {
	svcName := strings.ToLower(svc.Name) + "." + svc.Namespace + ".svc." + z.zone
	type target struct {
		host string
		port uint16
	}
	var targets []target
	addrs := map[target][]netip.Addr{}
	add := func(t target, ips ...netip.Addr) {
		if _, ok := addrs[t]; !ok {
			targets = append(targets, t)
		}
		addrs[t] = append(addrs[t], ips...)
	}
	if headless(svc) {
		for _, e := range z.recs.endpoints(svc.Namespace, svc.Name) {
			for _, p := range e.ports {
				if p.name == portName && p.protocol == proto {
					add(target{e.hostname + "." + svcName, p.number}, e.ip)
				}
			}
		}
	} else if hasClusterIP(svc) {
		for _, p := range servicePorts(svc) {
			if p.name == portName && p.protocol == proto {
				add(target{svcName, p.number}, clusterIPs(svc)...)
			}
		}
	}
	if len(targets) == 0 {
		return reply{rcode: dns.RcodeNameError}
	}
	var r reply
	if q.Qtype != dns.TypeSRV && q.Qtype != dns.TypeANY {
		return r
	}
	weight := uint16(max(100/len(targets), 1))
	for _, t := range targets {
		r.answer = append(r.answer, &dns.SRV{Hdr: z.hdr(name, dns.TypeSRV), Priority: 0, Weight: weight, Port: t.port, Target: t.host})
		for _, ip := range addrs[t] {
			r.extra = append(r.extra, z.address(t.host, dns.TypeANY, ip))
		}
	}
	return r
}

// pod answers for <a>-<b>-<c>-<d>.<ns>.pod.<zone>.
func (z zoneView) pod(q dns.Question, name string, labels []string) reply {
	switch len(labels) {
	case 0, 1:
		return reply{}
	case 2:
		if ip, ok := undashed(labels[0]); ok {
			var r reply
			if rr := z.address(name, q.Qtype, ip); rr != nil {
				r.answer = append(r.answer, rr)
			}
			return r
		}
	}
	return reply{rcode: dns.RcodeNameError}
}

// address is the A or AAAA record of name for ip if qtype asks for its
// family (or ANY), else nil.
func (z zoneView) address(name string, qtype uint16, ip netip.Addr) dns.RR {
	switch {
	case ip.Is4() && (qtype == dns.TypeA || qtype == dns.TypeANY):
		return &dns.A{Hdr: z.hdr(name, dns.TypeA), A: ip.AsSlice()}
	case ip.Is6() && (qtype == dns.TypeAAAA || qtype == dns.TypeANY):
		return &dns.AAAA{Hdr: z.hdr(name, dns.TypeAAAA), AAAA: ip.AsSlice()}
	}
	return nil
}

// ptr answers a reverse question for ip.
func (z zoneView) ptr(name string, ip netip.Addr) reply {
	var targets []string
	for _, svc := range z.recs.servicesWithIP(ip) {
		targets = append(targets, strings.ToLower(svc.Name)+"."+svc.Namespace+".svc."+z.zone)
	}
	for _, n := range z.recs.endpointNames(ip) {
		targets = append(targets, n+".svc."+z.zone)
	}
	if len(targets) == 0 {
		if z.reverse != nil && z.reverse(ip) {
			return reply{rcode: dns.RcodeNameError, soaZone: reverseZone(ip)}
		}
		return reply{forward: true}
	}
	var r reply
	for _, t := range targets {
		r.answer = append(r.answer, &dns.PTR{Hdr: z.hdr(name, dns.TypePTR), Ptr: t})
	}
	return r
}

// reverseIP parses a complete in-addr.arpa or ip6.arpa name.
func reverseIP(name string) (netip.Addr, bool) {
	switch {
	case strings.HasSuffix(name, ".in-addr.arpa."):
		parts := strings.Split(strings.TrimSuffix(name, ".in-addr.arpa."), ".")
		if len(parts) != 4 {
			return netip.Addr{}, false
		}
		var b [4]byte
		for i, p := range parts {
			n, err := strconv.ParseUint(p, 10, 8)
			if err != nil || (len(p) > 1 && p[0] == '0') {
				return netip.Addr{}, false
			}
			b[3-i] = byte(n)
		}
		return netip.AddrFrom4(b), true
	case strings.HasSuffix(name, ".ip6.arpa."):
		parts := strings.Split(strings.TrimSuffix(name, ".ip6.arpa."), ".")
		if len(parts) != 32 {
			return netip.Addr{}, false
		}
		var b [16]byte
		for i, p := range parts {
			n, err := strconv.ParseUint(p, 16, 4)
			if err != nil || len(p) != 1 {
				return netip.Addr{}, false
			}
			nibble := 31 - i
			b[nibble/2] |= byte(n) << (4 * (1 - nibble%2))
		}
		return netip.AddrFrom16(b), true
	}
	return netip.Addr{}, false
}
