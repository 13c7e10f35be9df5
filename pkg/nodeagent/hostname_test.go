package nodeagent

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/podconfig"
	"jobkeeper.dev/jobkeeper/test/builder"
)

func TestPodHostname(t *testing.T) {
	long := strings.Repeat("a", 62) + "-b" + strings.Repeat("c", 10)
	cases := map[string]struct {
		name, hostname string
		want           string
	}{
		"the pod's name":               {name: "job-abc12", want: "job-abc12"},
		"spec.hostname":                {name: "job-0-abc12", hostname: "job-0", want: "job-0"},
		"63 characters are kept":       {name: strings.Repeat("a", 63), want: strings.Repeat("a", 63)},
		"a long name is truncated":     {name: strings.Repeat("a", 70), want: strings.Repeat("a", 63)},
		"without a trailing dash":      {name: long, want: strings.Repeat("a", 62)},
		"without trailing dots":        {name: strings.Repeat("a", 61) + "..xyz", want: strings.Repeat("a", 61)},
		"a long spec.hostname as well": {name: "p", hostname: strings.Repeat("h", 64), want: strings.Repeat("h", 63)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: tc.name}, Spec: corev1.PodSpec{Hostname: tc.hostname}}
			if got := podconfig.PodHostname(pod); got != tc.want {
				t.Errorf("podHostname() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestContainersGetThePodsHostname(t *testing.T) {
	pod := builder.MakePod("p", "ns").UID("u1").Command("sleep", "1").Obj()
	pod.Spec.Hostname = "web-0"
	_, rt := startAgentWithFake(t, pod)
	h := rt.attempt(t, "main", 0)
	if h.spec.Hostname != "web-0" {
		t.Errorf("Spec.Hostname = %q, want the pod's spec.hostname web-0", h.spec.Hostname)
	}
	if !slices.Contains(h.spec.Env, "HOSTNAME=web-0") {
		t.Errorf("env %q lacks HOSTNAME=web-0", h.spec.Env)
	}
}
