package podconfig

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// service is a Service with a ClusterIP and ports.
func service(ns, name, ip string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.ServiceSpec{ClusterIP: ip, Ports: ports},
	}
}

// masterService is the kubernetes Service as the apiserver creates it.
var masterService = service("default", "kubernetes", "10.0.0.1", corev1.ServicePort{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP})

// masterEnvAt is what a pod gets for the kubernetes Service at host:port.
func masterEnvAt(host, port string) []string {
	return []string{
		"KUBERNETES_SERVICE_HOST=" + host,
		"KUBERNETES_SERVICE_PORT=" + port,
		"KUBERNETES_SERVICE_PORT_HTTPS=" + port,
		"KUBERNETES_PORT=tcp://" + host + ":" + port,
		"KUBERNETES_PORT_" + port + "_TCP=tcp://" + host + ":" + port,
		"KUBERNETES_PORT_" + port + "_TCP_PROTO=tcp",
		"KUBERNETES_PORT_" + port + "_TCP_PORT=" + port,
		"KUBERNETES_PORT_" + port + "_TCP_ADDR=" + host,
	}
}

func TestServiceEnv(t *testing.T) {
	web := service("ns", "web-api", "10.0.0.20",
		corev1.ServicePort{Port: 80},
		corev1.ServicePort{Name: "metrics-http", Port: 9090, Protocol: corev1.ProtocolTCP},
		corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP})
	headless := service("ns", "headless", corev1.ClusterIPNone, corev1.ServicePort{Port: 80})
	external := service("ns", "external", "", corev1.ServicePort{Port: 80})
	other := service("other", "elsewhere", "10.0.0.30", corev1.ServicePort{Port: 80})
	webEnv := []string{
		"WEB_API_SERVICE_HOST=10.0.0.20",
		"WEB_API_SERVICE_PORT=80",
		"WEB_API_SERVICE_PORT_METRICS_HTTP=9090",
		"WEB_API_SERVICE_PORT_DNS=53",
		"WEB_API_PORT=tcp://10.0.0.20:80",
		"WEB_API_PORT_80_TCP=tcp://10.0.0.20:80",
		"WEB_API_PORT_80_TCP_PROTO=tcp",
		"WEB_API_PORT_80_TCP_PORT=80",
		"WEB_API_PORT_80_TCP_ADDR=10.0.0.20",
		"WEB_API_PORT_9090_TCP=tcp://10.0.0.20:9090",
		"WEB_API_PORT_9090_TCP_PROTO=tcp",
		"WEB_API_PORT_9090_TCP_PORT=9090",
		"WEB_API_PORT_9090_TCP_ADDR=10.0.0.20",
		"WEB_API_PORT_53_UDP=udp://10.0.0.20:53",
		"WEB_API_PORT_53_UDP_PROTO=udp",
		"WEB_API_PORT_53_UDP_PORT=53",
		"WEB_API_PORT_53_UDP_ADDR=10.0.0.20",
	}
	local := &APIServerEndpoint{host: "127.0.0.1", port: 6443}
	cases := map[string]struct {
		// services are the cluster's Services.
		services []*corev1.Service
		// ns and links are the pod's namespace and enableServiceLinks.
		ns    string
		links bool
		// apiserver is the agent's Options.APIServer, parsed.
		apiserver *APIServerEndpoint
		want      []string
	}{
		"kubelet: the master Service's ClusterIP": {
			services: []*corev1.Service{masterService},
			ns:       "ns", links: true,
			want: masterEnvAt("10.0.0.1", "443"),
		},
		"up: the apiserver where pods reach it": {
			services: []*corev1.Service{masterService},
			ns:       "ns", links: true, apiserver: local,
			want: masterEnvAt("127.0.0.1", "6443"),
		},
		"up: the apiserver before its Service is seen": {
			ns: "ns", apiserver: local,
			want: masterEnvAt("127.0.0.1", "6443"),
		},
		"no master Service, no endpoint": {
			services: []*corev1.Service{web},
			ns:       "ns", links: true,
			want: webEnv,
		},
		"links: the namespace's Services with a ClusterIP, sorted": {
			services: []*corev1.Service{web, headless, external, other, masterService},
			ns:       "ns", links: true, apiserver: local,
			want: append(masterEnvAt("127.0.0.1", "6443"), webEnv...),
		},
		"no links: the master Service only": {
			services: []*corev1.Service{web, masterService},
			ns:       "ns", links: false, apiserver: local,
			want: masterEnvAt("127.0.0.1", "6443"),
		},
		"a pod in default keeps the endpoint": {
			services: []*corev1.Service{masterService},
			ns:       "default", links: true, apiserver: local,
			want: masterEnvAt("127.0.0.1", "6443"),
		},
		"a Service named kubernetes in the pod's namespace wins with links": {
			services: []*corev1.Service{masterService, service("ns", "kubernetes", "10.0.0.9", corev1.ServicePort{Port: 8080})},
			ns:       "ns", links: true, apiserver: local,
			want: []string{
				"KUBERNETES_SERVICE_HOST=10.0.0.9",
				"KUBERNETES_SERVICE_PORT=8080",
				"KUBERNETES_PORT=tcp://10.0.0.9:8080",
				"KUBERNETES_PORT_8080_TCP=tcp://10.0.0.9:8080",
				"KUBERNETES_PORT_8080_TCP_PROTO=tcp",
				"KUBERNETES_PORT_8080_TCP_PORT=8080",
				"KUBERNETES_PORT_8080_TCP_ADDR=10.0.0.9",
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := ServiceEnv(PodServices(tc.services, tc.ns, tc.links, tc.apiserver)).Pairs()
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
		})
	}
}

// TestResolveEnvWithServices checks how service variables meet the
// container's own, as in the kubelet: the container's win, and its values
// may refer to the service variables.
func TestResolveEnvWithServices(t *testing.T) {
	services := ServiceEnv(PodServices([]*corev1.Service{masterService}, "ns", true, &APIServerEndpoint{host: "127.0.0.1", port: 6443}))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
	c := &corev1.Container{Env: []corev1.EnvVar{
		{Name: "API", Value: "https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"},
		{Name: "KUBERNETES_SERVICE_PORT", Value: "1234"},
		{Name: "AFTER", Value: "$(KUBERNETES_SERVICE_PORT)"},
	}}
	env, err := ResolveEnv(context.Background(), pod, c, nil, services, fakeSources{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"API=https://127.0.0.1:6443",
		"KUBERNETES_SERVICE_PORT=1234",
		"AFTER=1234",
		"KUBERNETES_SERVICE_HOST=127.0.0.1",
		"KUBERNETES_SERVICE_PORT_HTTPS=6443",
		"KUBERNETES_PORT=tcp://127.0.0.1:6443",
		"KUBERNETES_PORT_6443_TCP=tcp://127.0.0.1:6443",
		"KUBERNETES_PORT_6443_TCP_PROTO=tcp",
		"KUBERNETES_PORT_6443_TCP_PORT=6443",
		"KUBERNETES_PORT_6443_TCP_ADDR=127.0.0.1",
	}
	if diff := cmp.Diff(want, env.Pairs()); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
}

func TestParseAPIServer(t *testing.T) {
	cases := map[string]struct {
		addr    string
		want    *APIServerEndpoint
		wantErr bool
	}{
		"empty":        {addr: ""},
		"IPv4":         {addr: "127.0.0.1:6443", want: &APIServerEndpoint{host: "127.0.0.1", port: 6443}},
		"IPv6":         {addr: "[::1]:6443", want: &APIServerEndpoint{host: "::1", port: 6443}},
		"no port":      {addr: "127.0.0.1", wantErr: true},
		"a host name":  {addr: "localhost:6443", wantErr: true},
		"port 0":       {addr: "127.0.0.1:0", wantErr: true},
		"port too big": {addr: "127.0.0.1:70000", wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseAPIServer(tc.addr)
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseAPIServer(%q) error %v, wantErr %v", tc.addr, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(APIServerEndpoint{})); diff != "" {
				t.Errorf("parseAPIServer(%q) (-want +got):\n%s", tc.addr, diff)
			}
		})
	}
}
