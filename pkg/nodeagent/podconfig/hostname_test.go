package podconfig

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPodHostname(t *testing.T) {
	long := strings.Repeat("a", 62) + "-b" + strings.Repeat("c", 10)
	cases := map[string]struct {
		name, hostname, override string
		want                     string
	}{
		"the pod's name":               {name: "job-abc12", want: "job-abc12"},
		"spec.hostname":                {name: "job-0-abc12", hostname: "job-0", want: "job-0"},
		"63 characters are kept":       {name: strings.Repeat("a", 63), want: strings.Repeat("a", 63)},
		"a long name is truncated":     {name: strings.Repeat("a", 70), want: strings.Repeat("a", 63)},
		"without a trailing dash":      {name: long, want: strings.Repeat("a", 62)},
		"without trailing dots":        {name: strings.Repeat("a", 61) + "..xyz", want: strings.Repeat("a", 61)},
		"a long spec.hostname as well": {name: "p", hostname: strings.Repeat("h", 64), want: strings.Repeat("h", 63)},
		"hostnameOverride over both":   {name: "job-0-abc12", hostname: "job-0", override: "worker.example", want: "worker.example"},
		"a long hostnameOverride":      {name: "p", override: strings.Repeat("o", 62) + ".xy", want: strings.Repeat("o", 62)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: tc.name}, Spec: corev1.PodSpec{Hostname: tc.hostname}}
			if tc.override != "" {
				pod.Spec.HostnameOverride = &tc.override
			}
			if got := PodHostname(pod); got != tc.want {
				t.Errorf("podHostname() = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestHostsFileHostnameOverride: with hostnameOverride the pod has no
// domain, so /etc/hosts names it by the override alone, subdomain or not.
func TestHostsFileHostnameOverride(t *testing.T) {
	override := "worker.example"
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "ns"},
		Spec: corev1.PodSpec{Subdomain: "web", HostnameOverride: &override}}
	hosts := string(HostsFile(pod, PodHostname(pod), NodeIP))
	if !strings.HasSuffix(hosts, "127.0.0.1\tworker.example\n") || strings.Contains(hosts, "svc.cluster.local") {
		t.Errorf("hosts file:\n%s\nwant its last line 127.0.0.1<TAB>worker.example and no FQDN", hosts)
	}
	pod.Spec.SetHostnameAsFQDN = &[]bool{true}[0]
	if got, err := PodUTSName(pod); err != nil || got != override {
		t.Errorf("PodUTSName = %q, %v; want %q (no domain to qualify it with)", got, err, override)
	}
}

// TestHostNetworkHostsFile: a hostNetwork pod gets the node's hosts file
// under the kubelet's host network header, then its hostAliases.
func TestHostNetworkHostsFile(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{HostNetwork: true,
		HostAliases: []corev1.HostAlias{{IP: "10.0.0.9", Hostnames: []string{"db", "db.local"}}}}}
	node := "127.0.0.1\tlocalhost\n192.168.1.5\tmachine\n"
	got := string(HostNetworkHostsFile(pod, []byte(node)))
	want := "# Kubernetes-managed hosts file (host network).\n" + node +
		"\n# Entries added by HostAliases.\n10.0.0.9\tdb\tdb.local\n"
	if got != want {
		t.Errorf("hosts file:\n%q\nwant\n%q", got, want)
	}
}
