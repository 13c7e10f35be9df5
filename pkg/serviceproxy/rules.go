// Package serviceproxy routes Services' cluster IPs on a single node, as
// kube-proxy's nftables mode does: connections to a ClusterIP Service's
// address and port are sent (DNAT) to one of its ready endpoints, chosen at
// random per connection; a pod that reaches itself through its Service is
// masqueraded (hairpin); a Service port without endpoints refuses at once
// (TCP reset, ICMP port unreachable) instead of timing out.
//
// The decision (Compute) is pure: Services and EndpointSlices in, rules
// out. Apply writes them as one nftables table, replaced whole in one
// transaction, so no connection sees half a change; Proxy keeps the table
// in step with informers.
//
// ClientIP session affinity is kept in one nftables set per endpoint of
// the Service port (the clients it served last, each with the Service's
// timeout), which outlives the table's rewrites.
//
// A NodePort or LoadBalancer Service's node ports are served on every
// address of the node's but the loopback ones, as kube-proxy's nftables
// mode serves them: a connection to one goes to the same endpoints as
// one to the cluster IP, under the same affinity, and is masqueraded, so
// that its replies come back through the node; a node port without
// endpoints refuses.
//
// Not done: externalIPs and LoadBalancer addresses, IPv6, and traffic
// policies (on a single node every endpoint is local; a Local external
// policy is served as Cluster, its clients' addresses not kept).
package serviceproxy

import (
	"cmp"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Rule is one Service port: what reaches Address on Protocol goes to one
// of Endpoints; none refuses.
type Rule struct {
	// Service is "namespace/name:port name", for logs.
	Service  string
	Address  netip.AddrPort
	Protocol corev1.Protocol
	// Endpoints are the ready endpoints' addresses and target ports,
	// sorted.
	Endpoints []netip.AddrPort
	// Affinity, when not zero, is the Service's ClientIP session affinity:
	// a client's connections go to the endpoint its last one went to,
	// until it has made none for this long.
	Affinity time.Duration
	// NodePort, when not zero, is the Service port's node port: what
	// reaches it on Protocol at an address of the node's goes to
	// Endpoints as what reaches Address does.
	NodePort uint16
}

// DefaultAffinityTimeout is how long a ClientIP session affinity lasts
// when the Service does not say (the API's default, 3 hours).
const DefaultAffinityTimeout = 10800 * time.Second

// Compute returns the rules of services given their EndpointSlices,
// sorted by address, port and protocol. Services skip reports true for are
// left out (the node routes them itself), as are those without an IPv4
// cluster IP (headless, ExternalName) and ports of protocols other than
// TCP and UDP. A NodePort or LoadBalancer Service's port carries its node
// port in its one rule.
//
// An endpoint serves when its slice's port of the same name and protocol
// has a number, and it is ready; where none is, those serving and
// terminating do, as kube-proxy falls back to them.
func Compute(services []*corev1.Service, endpointSlices []*discoveryv1.EndpointSlice, skip func(*corev1.Service) bool) []Rule {
	byService := map[[2]string][]*discoveryv1.EndpointSlice{}
	for _, s := range endpointSlices {
		name := s.Labels[discoveryv1.LabelServiceName]
		if name == "" || s.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		key := [2]string{s.Namespace, name}
		byService[key] = append(byService[key], s)
	}
	var rules []Rule
	for _, svc := range services {
		if skip != nil && skip(svc) {
			continue
		}
		vip, ok := clusterIPv4(svc)
		if !ok {
			continue
		}
		for _, p := range svc.Spec.Ports {
			proto := p.Protocol
			if proto == "" {
				proto = corev1.ProtocolTCP
			}
			if proto != corev1.ProtocolTCP && proto != corev1.ProtocolUDP {
				continue
			}
			if p.Port <= 0 || p.Port > 65535 {
				continue
			}
			rules = append(rules, Rule{
				Service:   svc.Namespace + "/" + svc.Name + ":" + p.Name,
				Address:   netip.AddrPortFrom(vip, uint16(p.Port)),
				Protocol:  proto,
				Endpoints: endpointsOf(byService[[2]string{svc.Namespace, svc.Name}], p.Name, proto),
				Affinity:  affinity(svc),
				NodePort:  nodePort(svc, p),
			})
		}
	}
	slices.SortFunc(rules, func(a, b Rule) int {
		return cmp.Or(a.Address.Compare(b.Address), cmp.Compare(a.Protocol, b.Protocol))
	})
	return rules
}

// affinity is the Service's ClientIP session affinity timeout, or 0.
func affinity(svc *corev1.Service) time.Duration {
	if svc.Spec.SessionAffinity != corev1.ServiceAffinityClientIP {
		return 0
	}
	if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil && *c.ClientIP.TimeoutSeconds > 0 {
		return time.Duration(*c.ClientIP.TimeoutSeconds) * time.Second
	}
	return DefaultAffinityTimeout
}

// nodePort is the node port of the Service's port p, or 0: only NodePort
// and LoadBalancer Services have them, and a LoadBalancer Service need
// not (allocateLoadBalancerNodePorts false).
func nodePort(svc *corev1.Service, p corev1.ServicePort) uint16 {
	if svc.Spec.Type != corev1.ServiceTypeNodePort && svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return 0
	}
	if p.NodePort <= 0 || p.NodePort > 65535 {
		return 0
	}
	return uint16(p.NodePort)
}

// clusterIPv4 is the Service's IPv4 cluster IP, if it has one.
func clusterIPv4(svc *corev1.Service) (netip.Addr, bool) {
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return netip.Addr{}, false
	}
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	for _, s := range ips {
		if ip, err := netip.ParseAddr(s); err == nil && ip.Is4() {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// endpointsOf returns the serving endpoints of a Service port (portName,
// proto) in its slices, deduplicated and sorted.
func endpointsOf(sliceList []*discoveryv1.EndpointSlice, portName string, proto corev1.Protocol) []netip.AddrPort {
	var ready, fallback []netip.AddrPort
	for _, s := range sliceList {
		port, ok := slicePort(s, portName, proto)
		if !ok {
			continue
		}
		for _, e := range s.Endpoints {
			c := e.Conditions
			isReady := c.Ready == nil || *c.Ready
			serving := c.Serving != nil && *c.Serving
			terminating := c.Terminating != nil && *c.Terminating
			// As kube-proxy: an endpoint's first address (the others are
			// the same pod's, and not used).
			for _, a := range e.Addresses[:min(1, len(e.Addresses))] {
				ip, err := netip.ParseAddr(a)
				if err != nil || !ip.Is4() {
					continue
				}
				ap := netip.AddrPortFrom(ip, port)
				switch {
				case isReady:
					ready = append(ready, ap)
				case serving && terminating:
					fallback = append(fallback, ap)
				}
			}
		}
	}
	if len(ready) == 0 {
		ready = fallback
	}
	slices.SortFunc(ready, func(a, b netip.AddrPort) int { return a.Compare(b) })
	return slices.Compact(ready)
}

// slicePort is the number of the slice's port named portName with
// protocol proto.
func slicePort(s *discoveryv1.EndpointSlice, portName string, proto corev1.Protocol) (uint16, bool) {
	for _, p := range s.Ports {
		name := ""
		if p.Name != nil {
			name = *p.Name
		}
		pp := corev1.ProtocolTCP
		if p.Protocol != nil {
			pp = *p.Protocol
		}
		if name == portName && pp == proto && p.Port != nil && *p.Port > 0 && *p.Port <= 65535 {
			return uint16(*p.Port), true
		}
	}
	return 0, false
}
