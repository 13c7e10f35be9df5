package podconfig

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestParseResolvConf(t *testing.T) {
	got := ParseResolvConf([]byte(`# generated
domain example.org
nameserver 10.0.0.2
search old.example
nameserver 10.0.0.3 # second
search corp.example. . lab.example
options ndots:1 timeout:2
options ndots:3 rotate
`))
	want := DNSConfig{
		servers:  []string{"10.0.0.2", "10.0.0.3"},
		searches: []string{"corp.example", "lab.example"},
		options:  []string{"ndots:3", "rotate", "timeout:2"},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(DNSConfig{})); diff != "" {
		t.Errorf("parsed (-want +got):\n%s", diff)
	}
}

func TestPodDNS(t *testing.T) {
	host := DNSConfig{servers: []string{"10.0.0.2"}, searches: []string{"corp.example"}, options: []string{"ndots:1", "timeout:2"}}
	pod := func(policy corev1.DNSPolicy, dc *corev1.PodDNSConfig) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{DNSPolicy: policy, DNSConfig: dc}}
	}
	extra := &corev1.PodDNSConfig{
		Nameservers: []string{"1.1.1.1", "10.0.0.2"},
		Searches:    []string{"ns.svc.example", "corp.example"},
		Options:     []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("5")}, {Name: "edns0"}, {Name: "attempts", Value: ptr.To("")}},
	}
	many := &corev1.PodDNSConfig{Nameservers: []string{"1.1.1.1", "1.0.0.1", "8.8.8.8"}, Searches: []string{strings.Repeat("a", 254), "ok.example"}}
	for _, tc := range []struct {
		name     string
		pod      *corev1.Pod
		want     string
		warnings []string
	}{
		{name: "ClusterFirst falls back to the host's", pod: pod(corev1.DNSClusterFirst, nil),
			want: "search corp.example\nnameserver 10.0.0.2\noptions ndots:1 timeout:2\n"},
		{name: "Default", pod: pod(corev1.DNSDefault, nil),
			want: "search corp.example\nnameserver 10.0.0.2\noptions ndots:1 timeout:2\n"},
		{name: "None starts empty", pod: pod(corev1.DNSNone, &corev1.PodDNSConfig{Nameservers: []string{"1.1.1.1"}}),
			want: "nameserver 1.1.1.1\n"},
		{name: "dnsConfig merged over the host's", pod: pod(corev1.DNSClusterFirst, extra),
			want: "search corp.example ns.svc.example\nnameserver 10.0.0.2\nnameserver 1.1.1.1\noptions attempts edns0 ndots:5 timeout:2\n"},
		{name: "limits", pod: pod(corev1.DNSDefault, many),
			want: "search corp.example ok.example\nnameserver 10.0.0.2\nnameserver 1.1.1.1\nnameserver 1.0.0.1\noptions ndots:1 timeout:2\n",
			warnings: []string{
				"Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: 10.0.0.2 1.1.1.1 1.0.0.1",
				"Search Line limits were exceeded, some search paths have been omitted, the applied search line is: corp.example ok.example",
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, warnings := PodDNS(tc.pod, host, nil)
			if diff := cmp.Diff(tc.want, string(c.ResolvConf())); diff != "" {
				t.Errorf("resolv.conf (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.warnings, warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
	if len(host.servers) != 1 || len(host.searches) != 1 || len(host.options) != 2 {
		t.Errorf("the host's configuration was changed: %+v", host)
	}
}

func TestPodDNSWithClusterDNS(t *testing.T) {
	host := DNSConfig{servers: []string{"10.0.0.2"}, searches: []string{"corp.example"}, options: []string{"ndots:1"}}
	cluster := []string{"10.244.0.1"}
	pod := func(policy corev1.DNSPolicy, hostNetwork bool, dc *corev1.PodDNSConfig) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a"}, Spec: corev1.PodSpec{DNSPolicy: policy, HostNetwork: hostNetwork, DNSConfig: dc}}
	}
	clusterConf := "search team-a.svc.cluster.local svc.cluster.local cluster.local corp.example\nnameserver 10.244.0.1\noptions ndots:5\n"
	hostConf := "search corp.example\nnameserver 10.0.0.2\noptions ndots:1\n"
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{"ClusterFirst", pod(corev1.DNSClusterFirst, false, nil), clusterConf},
		{"no policy is ClusterFirst", pod("", false, nil), clusterConf},
		{"ClusterFirst with hostNetwork is Default", pod(corev1.DNSClusterFirst, true, nil), hostConf},
		{"ClusterFirstWithHostNet", pod(corev1.DNSClusterFirstWithHostNet, true, nil), clusterConf},
		{"Default", pod(corev1.DNSDefault, false, nil), hostConf},
		{"dnsConfig over the cluster's", pod(corev1.DNSClusterFirst, false, &corev1.PodDNSConfig{Searches: []string{"svc.cluster.local", "x.example"}, Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("2")}}}),
			"search team-a.svc.cluster.local svc.cluster.local cluster.local corp.example x.example\nnameserver 10.244.0.1\noptions ndots:2\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := PodDNS(tc.pod, host, cluster)
			if diff := cmp.Diff(tc.want, string(c.ResolvConf())); diff != "" {
				t.Errorf("resolv.conf (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPodDNSSearchLineLength(t *testing.T) {
	var searches []string
	for i := range 30 {
		searches = append(searches, strings.Repeat(string(rune('a'+i%26)), 99))
	}
	c, warnings := PodDNS(&corev1.Pod{Spec: corev1.PodSpec{DNSPolicy: corev1.DNSNone, DNSConfig: &corev1.PodDNSConfig{Searches: searches}}}, DNSConfig{}, nil)
	if n := len(strings.Join(c.searches, " ")); n > maxDNSSearchListChars || len(c.searches) != 20 || len(warnings) != 1 {
		t.Errorf("search line of %d characters, %d domains, warnings %q; want at most %d characters (20 domains) and one warning", n, len(c.searches), warnings, maxDNSSearchListChars)
	}
}

func TestPodUTSName(t *testing.T) {
	pod := func(name, subdomain string, fqdn bool) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Spec: corev1.PodSpec{Subdomain: subdomain, SetHostnameAsFQDN: ptr.To(fqdn)}}
	}
	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		want    string
		wantErr string
	}{
		{name: "hostname", pod: pod("web-0", "web", false), want: "web-0"},
		{name: "FQDN", pod: pod("web-0", "web", true), want: "web-0.web.ns.svc.cluster.local"},
		{name: "FQDN without subdomain", pod: pod("web-0", "", true), want: "web-0"},
		{name: "FQDN too long", pod: pod(strings.Repeat("a", 40), "web", true), wantErr: "setHostnameAsFQDN: failed to construct FQDN from pod hostname and cluster domain, FQDN " + strings.Repeat("a", 40) + ".web.ns.svc.cluster.local is too long (64 characters is the max, 65 characters requested)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PodUTSName(tc.pod)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("podUTSName = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
