package clusterdns

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"
)

// The indexes the server adds to its informers.
const (
	// byClusterIP indexes Services by each of their cluster IPs.
	byClusterIP = "clusterdns.clusterIP"
	// byService indexes EndpointSlices by <ns>/<service>.
	byService = "clusterdns.service"
	// byAddress indexes EndpointSlices by each of their endpoints'
	// addresses.
	byAddress = "clusterdns.address"
)

// AddIndexers adds the indexes the server reads to the Service and
// EndpointSlice informers; call it before they start.
func AddIndexers(services, slices cache.SharedIndexInformer) error {
	if err := services.AddIndexers(cache.Indexers{byClusterIP: serviceClusterIPs}); err != nil {
		return fmt.Errorf("indexing Services: %w", err)
	}
	if err := slices.AddIndexers(cache.Indexers{byService: sliceService, byAddress: sliceAddresses}); err != nil {
		return fmt.Errorf("indexing EndpointSlices: %w", err)
	}
	return nil
}

func serviceClusterIPs(obj any) ([]string, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok || !hasClusterIP(svc) {
		return nil, nil
	}
	var ips []string
	for _, ip := range clusterIPs(svc) {
		ips = append(ips, ip.String())
	}
	return ips, nil
}

func sliceService(obj any) ([]string, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || s.Labels[discoveryv1.LabelServiceName] == "" {
		return nil, nil
	}
	return []string{s.Namespace + "/" + s.Labels[discoveryv1.LabelServiceName]}, nil
}

func sliceAddresses(obj any) ([]string, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || s.AddressType == discoveryv1.AddressTypeFQDN {
		return nil, nil
	}
	var out []string
	for _, e := range s.Endpoints {
		for _, a := range e.Addresses {
			if ip, err := netip.ParseAddr(a); err == nil {
				out = append(out, ip.String())
			}
		}
	}
	return out, nil
}

// hasClusterIP says whether svc is routed by cluster IP (not headless, not
// ExternalName).
func hasClusterIP(svc *corev1.Service) bool {
	return svc.Spec.Type != corev1.ServiceTypeExternalName && svc.Spec.ClusterIP != "" && svc.Spec.ClusterIP != corev1.ClusterIPNone
}

// headless says whether svc is a headless Service.
func headless(svc *corev1.Service) bool {
	return svc.Spec.Type != corev1.ServiceTypeExternalName && svc.Spec.ClusterIP == corev1.ClusterIPNone
}

// clusterIPs returns svc's cluster IPs (spec.clusterIPs, or clusterIP on a
// Service written before dual-stack), the ones that parse.
func clusterIPs(svc *corev1.Service) []netip.Addr {
	src := svc.Spec.ClusterIPs
	if len(src) == 0 {
		src = []string{svc.Spec.ClusterIP}
	}
	var out []netip.Addr
	for _, s := range src {
		if ip, err := netip.ParseAddr(s); err == nil {
			out = append(out, ip)
		}
	}
	return out
}

// endpoint is one address of a ready endpoint of a Service.
type endpoint struct {
	// hostname is its DNS label: the endpoint's hostname, or its address
	// with dashes.
	hostname string
	ip       netip.Addr
	// ports are its slice's named ports.
	ports []port
}

// port is a named port.
type port struct {
	name     string
	protocol string
	number   uint16
}

// records reads the informers' caches.
type records struct {
	services cache.Indexer
	slices   cache.Indexer
}

// service returns the Service ns/name.
func (r records) service(ns, name string) *corev1.Service {
	obj, ok, err := r.services.GetByKey(ns + "/" + name)
	if err != nil || !ok {
		return nil
	}
	svc, _ := obj.(*corev1.Service)
	return svc
}

// namespaceHasServices says whether ns has any Service: <ns>.svc.<zone>
// then exists (as a name with no records).
func (r records) namespaceHasServices(ns string) bool {
	keys, err := r.services.IndexKeys(cache.NamespaceIndex, ns)
	return err == nil && len(keys) > 0
}

// endpoints returns the ready endpoints of Service ns/name, one per
// address, in a stable order.
func (r records) endpoints(ns, name string) []endpoint {
	objs, err := r.slices.ByIndex(byService, ns+"/"+name)
	if err != nil {
		return nil
	}
	seen := map[netip.Addr]bool{}
	var out []endpoint
	for _, obj := range objs {
		s, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok || s.AddressType == discoveryv1.AddressTypeFQDN {
			continue
		}
		ports := slicePorts(s)
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			for _, a := range e.Addresses {
				ip, err := netip.ParseAddr(a)
				if err != nil || seen[ip] {
					continue
				}
				seen[ip] = true
				host := dashed(ip)
				if e.Hostname != nil && *e.Hostname != "" {
					host = strings.ToLower(*e.Hostname)
				}
				out = append(out, endpoint{hostname: host, ip: ip, ports: ports})
			}
		}
	}
	slices.SortFunc(out, func(a, b endpoint) int { return a.ip.Compare(b.ip) })
	return out
}

// slicePorts returns s's named ports.
func slicePorts(s *discoveryv1.EndpointSlice) []port {
	var out []port
	for _, p := range s.Ports {
		if p.Name == nil || *p.Name == "" || p.Port == nil {
			continue
		}
		proto := corev1.ProtocolTCP
		if p.Protocol != nil {
			proto = *p.Protocol
		}
		out = append(out, port{name: strings.ToLower(*p.Name), protocol: strings.ToLower(string(proto)), number: uint16(*p.Port)})
	}
	return out
}

// servicePorts returns svc's named ports.
func servicePorts(svc *corev1.Service) []port {
	var out []port
	for _, p := range svc.Spec.Ports {
		if p.Name == "" {
			continue
		}
		proto := p.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		out = append(out, port{name: strings.ToLower(p.Name), protocol: strings.ToLower(string(proto)), number: uint16(p.Port)})
	}
	return out
}

// servicesWithIP returns the Services with cluster IP ip.
func (r records) servicesWithIP(ip netip.Addr) []*corev1.Service {
	objs, err := r.services.ByIndex(byClusterIP, ip.String())
	if err != nil {
		return nil
	}
	var out []*corev1.Service
	for _, obj := range objs {
		if svc, ok := obj.(*corev1.Service); ok {
			out = append(out, svc)
		}
	}
	return out
}

// endpointNames returns the names (<hostname>.<svc>.<ns>) of the ready
// endpoints of headless Services with address ip.
func (r records) endpointNames(ip netip.Addr) []string {
	objs, err := r.slices.ByIndex(byAddress, ip.String())
	if err != nil {
		return nil
	}
	var out []string
	for _, obj := range objs {
		s, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			continue
		}
		name := s.Labels[discoveryv1.LabelServiceName]
		if svc := r.service(s.Namespace, name); svc == nil || !headless(svc) {
			continue
		}
		for _, e := range r.endpoints(s.Namespace, name) {
			if e.ip == ip {
				out = append(out, e.hostname+"."+strings.ToLower(name)+"."+s.Namespace)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// dashed is ip's DNS label form: 10-1-2-3, or fd00--1 for IPv6.
func dashed(ip netip.Addr) string {
	if ip.Is4() {
		return strings.ReplaceAll(ip.String(), ".", "-")
	}
	return strings.ReplaceAll(ip.String(), ":", "-")
}

// undashed parses a dashed label (dashed's form) as an address.
func undashed(label string) (netip.Addr, bool) {
	if ip, err := netip.ParseAddr(strings.ReplaceAll(label, "-", ".")); err == nil && ip.Is4() {
		return ip, true
	}
	if ip, err := netip.ParseAddr(strings.ReplaceAll(label, "-", ":")); err == nil && ip.Is6() {
		return ip, true
	}
	return netip.Addr{}, false
}
