package podconfig

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestSeccompChoice(t *testing.T) {
	profile := func(typ corev1.SeccompProfileType, name string) *corev1.SeccompProfile {
		p := &corev1.SeccompProfile{Type: typ}
		if name != "" {
			p.LocalhostProfile = ptr.To(name)
		}
		return p
	}
	for name, tc := range map[string]struct {
		pod, container *corev1.SeccompProfile
		nodeDefault    bool
		want           corev1.SeccompProfileType
		wantName       string
	}{
		"nothing: Unconfined, the kubelet's default": {want: corev1.SeccompProfileTypeUnconfined},
		"nothing, --seccomp-default: RuntimeDefault": {nodeDefault: true, want: corev1.SeccompProfileTypeRuntimeDefault},
		"the pod's":            {pod: profile(corev1.SeccompProfileTypeRuntimeDefault, ""), want: corev1.SeccompProfileTypeRuntimeDefault},
		"the container's wins": {pod: profile(corev1.SeccompProfileTypeRuntimeDefault, ""), container: profile(corev1.SeccompProfileTypeLocalhost, "p/x.json"), want: corev1.SeccompProfileTypeLocalhost, wantName: "p/x.json"},
		"Unconfined named wins over --seccomp-default": {container: profile(corev1.SeccompProfileTypeUnconfined, ""), nodeDefault: true, want: corev1.SeccompProfileTypeUnconfined},
		"the pod's Localhost":                          {pod: profile(corev1.SeccompProfileTypeLocalhost, "y.json"), want: corev1.SeccompProfileTypeLocalhost, wantName: "y.json"},
	} {
		t.Run(name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{SeccompProfile: tc.pod}}}
			c := &corev1.Container{Name: "c"}
			if tc.container != nil {
				c.SecurityContext = &corev1.SecurityContext{SeccompProfile: tc.container}
			}
			typ, n := SeccompChoice(pod, c, tc.nodeDefault)
			if typ != tc.want || n != tc.wantName {
				t.Errorf("seccompChoice = %s %q, want %s %q", typ, n, tc.want, tc.wantName)
			}
		})
	}
}
