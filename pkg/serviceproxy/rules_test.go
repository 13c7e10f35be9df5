package serviceproxy

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func service(name, ip string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec:       corev1.ServiceSpec{ClusterIP: ip, ClusterIPs: []string{ip}, Ports: ports},
	}
}

func endpoint(ip string, ready, serving, terminating bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating}}
}

func slice(svc, name string, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       ports,
		Endpoints:   eps,
	}
}

func slicePortOf(name string, proto corev1.Protocol, port int32) discoveryv1.EndpointPort {
	return discoveryv1.EndpointPort{Name: &name, Protocol: &proto, Port: &port}
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func TestCompute(t *testing.T) {
	web := service("web", "10.0.0.20",
		corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP},
		corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
		corev1.ServicePort{Name: "sctp", Port: 9, Protocol: corev1.ProtocolSCTP})
	webPorts := []discoveryv1.EndpointPort{slicePortOf("http", corev1.ProtocolTCP, 8080), slicePortOf("dns", corev1.ProtocolUDP, 5353)}
	headless := service("headless", corev1.ClusterIPNone, corev1.ServicePort{Name: "p", Port: 1})
	external := service("ext", "", corev1.ServicePort{Port: 80})
	external.Spec.Type = corev1.ServiceTypeExternalName
	empty := service("empty", "10.0.0.5", corev1.ServicePort{Port: 80})
	draining := service("draining", "10.0.0.30", corev1.ServicePort{Name: "p", Port: 81})
	kubernetes := service("kubernetes", "10.0.0.1", corev1.ServicePort{Name: "https", Port: 443})

	slices := []*discoveryv1.EndpointSlice{
		slice("web", "web-a", webPorts,
			endpoint("10.244.0.3", true, true, false),
			endpoint("10.244.0.2", true, true, false),
			endpoint("10.244.0.9", false, false, false), // not ready
			endpoint("10.244.0.8", false, true, true)),  // terminating: only when none is ready
		slice("web", "web-b", webPorts, endpoint("10.244.0.2", true, true, false)), // in two slices
		slice("draining", "draining-a", []discoveryv1.EndpointPort{slicePortOf("p", corev1.ProtocolTCP, 9000)},
			endpoint("10.244.0.7", false, true, true), endpoint("10.244.0.6", false, false, true)),
		// Another namespace's slice of the same name, and one of no Service.
		{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "web-x", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
			AddressType: discoveryv1.AddressTypeIPv4, Ports: webPorts, Endpoints: []discoveryv1.Endpoint{endpoint("10.244.0.99", true, true, false)}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "orphan"}, AddressType: discoveryv1.AddressTypeIPv4},
	}
	skip := func(s *corev1.Service) bool { return s.Name == "kubernetes" }
	got := Compute([]*corev1.Service{web, headless, external, empty, draining, kubernetes}, slices, skip)
	want := []Rule{
		{Service: "ns/empty:", Address: ap("10.0.0.5:80"), Protocol: corev1.ProtocolTCP},
		{Service: "ns/web:dns", Address: ap("10.0.0.20:53"), Protocol: corev1.ProtocolUDP, Endpoints: []netip.AddrPort{ap("10.244.0.2:5353"), ap("10.244.0.3:5353")}},
		{Service: "ns/web:http", Address: ap("10.0.0.20:80"), Protocol: corev1.ProtocolTCP, Endpoints: []netip.AddrPort{ap("10.244.0.2:8080"), ap("10.244.0.3:8080")}},
		{Service: "ns/draining:p", Address: ap("10.0.0.30:81"), Protocol: corev1.ProtocolTCP, Endpoints: []netip.AddrPort{ap("10.244.0.7:9000")}},
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
		t.Errorf("rules (-want +got):\n%s", diff)
	}
}

func TestComputePortsByName(t *testing.T) {
	// The slice's port is found by the Service port's name and protocol:
	// a same-named port of another protocol, or one without a number,
	// gives no endpoint.
	svc := service("s", "10.0.0.40", corev1.ServicePort{Name: "a", Port: 80})
	s := slice("s", "s-1", []discoveryv1.EndpointPort{slicePortOf("a", corev1.ProtocolUDP, 8080), {Name: ptr.To("a")}},
		endpoint("10.244.0.2", true, true, false))
	got := Compute([]*corev1.Service{svc}, []*discoveryv1.EndpointSlice{s}, nil)
	if len(got) != 1 || len(got[0].Endpoints) != 0 {
		t.Errorf("rules %+v, want one without endpoints", got)
	}
}

func TestComputeAffinity(t *testing.T) {
	sticky := service("sticky", "10.0.0.41", corev1.ServicePort{Port: 80})
	sticky.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	timed := service("timed", "10.0.0.42", corev1.ServicePort{Port: 80})
	timed.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	timed.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](60)}}
	none := service("none", "10.0.0.43", corev1.ServicePort{Port: 80})
	none.Spec.SessionAffinity = corev1.ServiceAffinityNone
	got := map[string]time.Duration{}
	for _, r := range Compute([]*corev1.Service{sticky, timed, none}, nil, nil) {
		got[r.Service] = r.Affinity
	}
	want := map[string]time.Duration{"ns/sticky:": 3 * time.Hour, "ns/timed:": time.Minute, "ns/none:": 0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("affinity (-want +got):\n%s", diff)
	}
}

func TestComputeNodePort(t *testing.T) {
	ports := func() []corev1.ServicePort {
		return []corev1.ServicePort{
			{Name: "http", Port: 80, NodePort: 30080},
			{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, NodePort: 30053},
			{Name: "none", Port: 81}, // no node port allocated
		}
	}
	nodePort := service("np", "10.0.0.70", ports()...)
	nodePort.Spec.Type = corev1.ServiceTypeNodePort
	lb := service("lb", "10.0.0.71", ports()...)
	lb.Spec.Type = corev1.ServiceTypeLoadBalancer
	// A ClusterIP Service's stale nodePort fields (type changed back)
	// open nothing.
	clusterIP := service("cip", "10.0.0.72", ports()...)
	clusterIP.Spec.Type = corev1.ServiceTypeClusterIP
	got := map[string]uint16{}
	for _, r := range Compute([]*corev1.Service{nodePort, lb, clusterIP}, nil, nil) {
		got[r.Service] = r.NodePort
	}
	want := map[string]uint16{
		"ns/np:http": 30080, "ns/np:dns": 30053, "ns/np:none": 0,
		"ns/lb:http": 30080, "ns/lb:dns": 30053, "ns/lb:none": 0,
		"ns/cip:http": 0, "ns/cip:dns": 0, "ns/cip:none": 0,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("node ports (-want +got):\n%s", diff)
	}
}
