package podconfig

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
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
			err := CheckHostModeUser(p, c, tc.uid, tc.gid)
			switch {
			case tc.wantIn == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tc.wantIn != "" && (err == nil || !strings.Contains(err.Error(), tc.wantIn)):
				t.Errorf("error %v, want one containing %q", err, tc.wantIn)
			}
		})
	}
}

// TestHostModeUser: as root a host mode container gets the pod's
// supplementalGroups and fsGroup with the agent's user and group; otherwise
// it keeps the agent's user and groups.
func TestHostModeUser(t *testing.T) {
	withPSC := func(psc *corev1.PodSecurityContext) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{SecurityContext: psc}}
	}
	for _, tc := range []struct {
		name       string
		pod        *corev1.Pod
		root       bool
		wantGroups []int64
		wantStrict bool
		wantNil    bool
	}{
		{name: "no security context", pod: withPSC(nil), root: true, wantNil: true},
		{name: "no groups", pod: withPSC(&corev1.PodSecurityContext{RunAsNonRoot: ptr.To(false)}), root: true, wantNil: true},
		{name: "supplementalGroups as root", pod: withPSC(&corev1.PodSecurityContext{SupplementalGroups: []int64{10, 11}}), root: true, wantGroups: []int64{10, 11}},
		{name: "fsGroup as root", pod: withPSC(&corev1.PodSecurityContext{FSGroup: ptr.To[int64](3000)}), root: true, wantGroups: []int64{3000}},
		{name: "both as root", pod: withPSC(&corev1.PodSecurityContext{SupplementalGroups: []int64{10}, FSGroup: ptr.To[int64](3000)}), root: true, wantGroups: []int64{10, 3000}},
		{name: "not root: the agent's groups (warned)", pod: withPSC(&corev1.PodSecurityContext{SupplementalGroups: []int64{10}}), wantNil: true},
		{name: "strict alone as root", pod: withPSC(&corev1.PodSecurityContext{SupplementalGroupsPolicy: ptr.To(corev1.SupplementalGroupsPolicyStrict)}), root: true, wantStrict: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := HostModeUser(tc.pod, 0, 5, tc.root)
			if tc.wantNil {
				if u != nil {
					t.Fatalf("user %+v, want nil", u)
				}
				return
			}
			if u == nil || u.RunAsUser == nil || *u.RunAsUser != 0 || u.RunAsGroup == nil || *u.RunAsGroup != 5 || u.Image != "" {
				t.Fatalf("user %+v, want the agent's uid 0 and gid 5", u)
			}
			if diff := cmp.Diff(tc.wantGroups, u.SupplementalGroups); diff != "" {
				t.Errorf("groups (-want +got):\n%s", diff)
			}
			if u.StrictGroups != tc.wantStrict {
				t.Errorf("StrictGroups %v, want %v", u.StrictGroups, tc.wantStrict)
			}
		})
	}
	psc := &corev1.PodSecurityContext{SupplementalGroups: []int64{10}, FSGroup: ptr.To[int64](3000)}
	HostModeUser(withPSC(psc), 0, 0, true)
	if diff := cmp.Diff([]int64{10}, psc.SupplementalGroups); diff != "" {
		t.Errorf("the pod's supplementalGroups changed (-want +got):\n%s", diff)
	}
}

func TestContainerUserGroupsPolicy(t *testing.T) {
	for _, tc := range []struct {
		policy *corev1.SupplementalGroupsPolicy
		strict bool
	}{
		{policy: nil},
		{policy: ptr.To(corev1.SupplementalGroupsPolicyMerge)},
		{policy: ptr.To(corev1.SupplementalGroupsPolicyStrict), strict: true},
	} {
		pod := &corev1.Pod{Spec: corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{
			SupplementalGroups: []int64{60000}, SupplementalGroupsPolicy: tc.policy}}}
		u, err := ContainerUser(pod, &corev1.Container{Name: "c"}, "1000")
		if err != nil {
			t.Fatal(err)
		}
		if u.StrictGroups != tc.strict || !slices.Equal(u.SupplementalGroups, []int64{60000}) {
			t.Errorf("policy %v: user %+v, want StrictGroups %v and groups [60000]", ptr.Deref(tc.policy, ""), u, tc.strict)
		}
	}
}
