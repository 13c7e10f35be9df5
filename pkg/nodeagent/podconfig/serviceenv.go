package podconfig

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// masterServiceName is the Service in the default namespace that fronts
// the apiserver; the kubelet gives its variables to every pod.
const masterServiceName = "kubernetes"

// APIServerEndpoint is where pods on this node reach the apiserver, when
// that is not the kubernetes Service's ClusterIP (Options.APIServer).
type APIServerEndpoint struct {
	// host is an IP address, e.g. 127.0.0.1.
	host string
	// port is the apiserver's secure port.
	port int32
}

// ParseAPIServer parses Options.APIServer ("host:port", host an IP
// address); nil for "".
func ParseAPIServer(addr string) (*APIServerEndpoint, error) {
	if addr == "" {
		return nil, nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("APIServer %q: %w", addr, err)
	}
	if net.ParseIP(host) == nil {
		return nil, fmt.Errorf("APIServer %q: host %q is not an IP address", addr, host)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return nil, fmt.Errorf("APIServer %q: bad port %q", addr, port)
	}
	return &APIServerEndpoint{host: host, port: int32(p)}, nil
}

// service returns the kubernetes Service as pods here should see it: at
// the endpoint's address and port, under the Service's own port name and
// protocol (https, TCP).
func (e *APIServerEndpoint) service(svc *corev1.Service) *corev1.Service {
	port := corev1.ServicePort{Name: "https", Protocol: corev1.ProtocolTCP}
	if svc != nil && len(svc.Spec.Ports) > 0 {
		port.Name, port.Protocol = svc.Spec.Ports[0].Name, svc.Spec.Ports[0].Protocol
	}
	port.Port = e.port
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: masterServiceName, Namespace: metav1.NamespaceDefault},
		Spec:       corev1.ServiceSpec{ClusterIP: e.host, Ports: []corev1.ServicePort{port}},
	}
}

// PodServices picks the Services whose variables a pod in namespace ns
// gets, as the kubelet does: the kubernetes Service of the default
// namespace always, and, with enableServiceLinks, every Service of ns;
// Services without a ClusterIP (headless, ExternalName) give none. A
// Service of ns named kubernetes replaces the master one. With an
// apiserver endpoint, the master Service is the endpoint (present even
// when the Service is not). Sorted by name.
func PodServices(all []*corev1.Service, ns string, enableServiceLinks bool, apiserver *APIServerEndpoint) []*corev1.Service {
	byName := map[string]*corev1.Service{}
	var master *corev1.Service
	for _, svc := range all {
		if svc.Namespace == metav1.NamespaceDefault && svc.Name == masterServiceName {
			master = svc
		}
	}
	if apiserver != nil {
		master = apiserver.service(master)
	}
	if master != nil && hasClusterIP(master) {
		byName[masterServiceName] = master
	}
	if enableServiceLinks {
		for _, svc := range all {
			if svc.Namespace != ns || !hasClusterIP(svc) {
				continue
			}
			if svc.Namespace == metav1.NamespaceDefault && svc.Name == masterServiceName {
				// Already there, replaced by the endpoint when one is set.
				continue
			}
			byName[svc.Name] = svc
		}
	}
	out := make([]*corev1.Service, 0, len(byName))
	for _, svc := range byName {
		out = append(out, svc)
	}
	slices.SortFunc(out, func(a, b *corev1.Service) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// hasClusterIP reports a Service with a ClusterIP and a port to name.
func hasClusterIP(svc *corev1.Service) bool {
	ip := svc.Spec.ClusterIP
	return ip != "" && ip != corev1.ClusterIPNone && len(svc.Spec.Ports) > 0
}

// ServiceEnv returns the variables the kubelet derives from services:
// per Service <NAME>_SERVICE_HOST, <NAME>_SERVICE_PORT (first port),
// <NAME>_SERVICE_PORT_<PORTNAME> for named ports, and the Docker link
// variables <NAME>_PORT, <NAME>_PORT_<port>_<PROTO>{,_PROTO,_PORT,_ADDR}.
// NAME is the Service's name upper-cased with '-' as '_'.
func ServiceEnv(services []*corev1.Service) *EnvList {
	env := &EnvList{}
	for _, svc := range services {
		prefix := envName(svc.Name)
		host := svc.Spec.ClusterIP
		env.Set(prefix+"_SERVICE_HOST", host)
		env.Set(prefix+"_SERVICE_PORT", strconv.Itoa(int(svc.Spec.Ports[0].Port)))
		for _, sp := range svc.Spec.Ports {
			if sp.Name != "" {
				env.Set(prefix+"_SERVICE_PORT_"+envName(sp.Name), strconv.Itoa(int(sp.Port)))
			}
		}
		for i, sp := range svc.Spec.Ports {
			proto := string(sp.Protocol)
			if proto == "" {
				proto = string(corev1.ProtocolTCP)
			}
			port := strconv.Itoa(int(sp.Port))
			url := strings.ToLower(proto) + "://" + net.JoinHostPort(host, port)
			if i == 0 {
				env.Set(prefix+"_PORT", url)
			}
			link := prefix + "_PORT_" + port + "_" + strings.ToUpper(proto)
			env.Set(link, url)
			env.Set(link+"_PROTO", strings.ToLower(proto))
			env.Set(link+"_PORT", port)
			env.Set(link+"_ADDR", host)
		}
	}
	return env
}

// envName turns a Service or port name into a variable name part.
func envName(s string) string {
	return strings.ToUpper(strings.ReplaceAll(s, "-", "_"))
}
