package nodeagent

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestCheckHostModeUser: in host mode a container runs as the user the
// sandbox gives it (the agent's, or root of a user namespace mapping it);
// a pod asking for another user, or for a non-root user when that is root,
// is not run as something else: its container waits with the error.
func TestCheckHostModeUser(t *testing.T) {
	pod := func(psc *corev1.PodSecurityContext, sc *corev1.SecurityContext) (*corev1.Pod, *corev1.Container) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Spec: corev1.PodSpec{SecurityContext: psc, Containers: []corev1.Container{{Name: "c", SecurityContext: sc}}}}
		return p, &p.Spec.Containers[0]
	}
	for _, tc := range []struct {
		name     string
		psc      *corev1.PodSecurityContext
		sc       *corev1.SecurityContext
		uid, gid int64
		wantIn   string
	}{
		{name: "nothing asked", uid: 0, gid: 0},
		{name: "runAsNonRoot as another user", sc: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true)}, uid: 1000, gid: 1000},
		{name: "runAsNonRoot as root", sc: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true)}, uid: 0, gid: 0,
			wantIn: "container has runAsNonRoot and image will run as root"},
		{name: "pod's runAsNonRoot as root", psc: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)}, uid: 0,
			wantIn: "container has runAsNonRoot and image will run as root"},
		{name: "container overrides the pod's runAsNonRoot", psc: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)}, sc: &corev1.SecurityContext{RunAsNonRoot: ptr.To(false)}, uid: 0},
		{name: "runAsUser the one it runs as", sc: &corev1.SecurityContext{RunAsUser: ptr.To[int64](1000)}, uid: 1000, gid: 1000},
		{name: "runAsUser another", psc: &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000)}, uid: 0,
			wantIn: "runAsUser 1000"},
		{name: "runAsUser 0 with runAsNonRoot", sc: &corev1.SecurityContext{RunAsUser: ptr.To[int64](0), RunAsNonRoot: ptr.To(true)}, uid: 0,
			wantIn: "container's runAsUser breaks non-root policy"},
		{name: "runAsGroup another", sc: &corev1.SecurityContext{RunAsGroup: ptr.To[int64](5)}, uid: 0, gid: 0,
			wantIn: "runAsGroup 5"},
		{name: "runAsGroup the one it runs as", sc: &corev1.SecurityContext{RunAsGroup: ptr.To[int64](5)}, uid: 1000, gid: 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, c := pod(tc.psc, tc.sc)
			err := checkHostModeUser(p, c, tc.uid, tc.gid)
			switch {
			case tc.wantIn == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tc.wantIn != "" && (err == nil || !strings.Contains(err.Error(), tc.wantIn)):
				t.Errorf("error %v, want one containing %q", err, tc.wantIn)
			}
		})
	}
}
