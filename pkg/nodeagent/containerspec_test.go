package nodeagent

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/lifecycle"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/podconfig"
	"jobkeeper.dev/jobkeeper/test/builder"
)

func TestEphemeralRefusal(t *testing.T) {
	// As another user: as root a privileged container runs (warned).
	a := &Agent{runtime: isolatingRuntime{ok: true}, euid: 1000}
	priv := &container{spec: &corev1.Container{Name: "debug", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}, info: lifecycle.ContainerInfo{Kind: lifecycle.KindEphemeral}}
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
	if reason, msg := a.ephemeralRefusal(pod, priv); reason != podconfig.ReasonPodFeatureUnsupported || !strings.Contains(msg, `ephemeral container "debug": securityContext.privileged`) {
		t.Errorf("privileged ephemeral container: %q, %q", reason, msg)
	}
	plain := &container{spec: &corev1.Container{Name: "debug"}, info: lifecycle.ContainerInfo{Kind: lifecycle.KindEphemeral}}
	if reason, _ := a.ephemeralRefusal(pod, plain); reason != "" {
		t.Errorf("plain ephemeral container refused: %q", reason)
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
