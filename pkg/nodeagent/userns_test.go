package nodeagent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// TestIDRanges: pods get the lowest free range of 65536 from 65536 on,
// recorded in their directory before use; a restarted agent gives each
// pod its recorded range and no other pod's; a released range is reused;
// a record that is not one the agent writes fails the pod.
func TestIDRanges(t *testing.T) {
	pods := t.TempDir()
	dir := func(uid string) string { return filepath.Join(pods, uid) }
	r := newIDRanges()
	a, err := r.forPod("a", dir("a"))
	if err != nil || *a != (runtime.IDRange{HostID: 65536, Length: 65536}) {
		t.Fatalf("first pod: %+v, %v", a, err)
	}
	b, err := r.forPod("b", dir("b"))
	if err != nil || b.HostID != 2*65536 {
		t.Fatalf("second pod: %+v, %v", b, err)
	}
	if again, _ := r.forPod("a", dir("a")); *again != *a {
		t.Errorf("the same pod got %+v, then %+v", a, again)
	}
	rec, err := os.ReadFile(filepath.Join(dir("b"), "userns"))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"uidMappings":[{"hostId":131072,"containerId":0,"length":65536}],"gidMappings":[{"hostId":131072,"containerId":0,"length":65536}]}`; string(rec) != want {
		t.Errorf("record = %s, want the kubelet's %s", rec, want)
	}

	// A restarted agent: the records decide, before any pod asks.
	r = newIDRanges()
	r.recover(pods)
	if c, err := r.forPod("c", dir("c")); err != nil || c.HostID != 3*65536 {
		t.Errorf("a new pod after a restart: %+v, %v (ranges 1 and 2 are taken)", c, err)
	}
	if got, err := r.forPod("b", dir("b")); err != nil || got.HostID != 2*65536 {
		t.Errorf("pod b after a restart: %+v, %v", got, err)
	}
	// Pod a's directory is removed with the pod: its range is free.
	if err := os.RemoveAll(dir("a")); err != nil {
		t.Fatal(err)
	}
	r.release("a")
	if d, err := r.forPod("d", dir("d")); err != nil || d.HostID != 65536 {
		t.Errorf("after a release: %+v, %v", d, err)
	}

	for name, content := range map[string]string{
		"not JSON":                "{",
		"two ranges":              `{"uidMappings":[{"hostId":65536,"containerId":0,"length":65536},{"hostId":131072,"containerId":0,"length":65536}],"gidMappings":[{"hostId":65536,"containerId":0,"length":65536}]}`,
		"not on a multiple":       `{"uidMappings":[{"hostId":65537,"containerId":0,"length":65536}],"gidMappings":[{"hostId":65537,"containerId":0,"length":65536}]}`,
		"the host's own ids":      `{"uidMappings":[{"hostId":0,"containerId":0,"length":65536}],"gidMappings":[{"hostId":0,"containerId":0,"length":65536}]}`,
		"users other than groups": `{"uidMappings":[{"hostId":65536,"containerId":0,"length":65536}],"gidMappings":[{"hostId":131072,"containerId":0,"length":65536}]}`,
		"another pod's range":     `{"uidMappings":[{"hostId":131072,"containerId":0,"length":65536}],"gidMappings":[{"hostId":131072,"containerId":0,"length":65536}]}`,
	} {
		uid := types.UID(strings.ReplaceAll(name, " ", "-"))
		if err := os.MkdirAll(dir(string(uid)), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir(string(uid)), "userns"), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := r.forPod(uid, dir(string(uid))); err == nil {
			t.Errorf("%s: got %+v, want an error", name, got)
		}
	}
}

// usernsRuntime is the fake runtime, with user namespaces.
type usernsRuntime struct{ *fakeRuntime }

// UserNamespaces implements runtime.UserNamespacer.
func (usernsRuntime) UserNamespaces() (bool, string) { return true, "" }

// TestHostUsersFalseGetsTheirRange: as root with a runtime that has user
// namespaces, a pod with hostUsers: false runs with its range, every
// container with the same; other pods run without one.
func TestHostUsersFalseGetsTheirRange(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the agent gives user namespaces as root only")
	}
	pod := func(name string, hostUsers *bool) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
			Spec: corev1.PodSpec{HostUsers: hostUsers, RestartPolicy: corev1.RestartPolicyNever,
				InitContainers: []corev1.Container{{Name: name + "-init", Image: "busybox"}},
				Containers:     []corev1.Container{{Name: name + "-main", Image: "busybox"}}},
		}
	}
	var rt *fakeRuntime
	ta := startAgentOn(t, Options{MaxPods: 10, Runtime: "simulated"}, func(clk *testingclock.FakeClock) runtime.Runtime {
		rt = newFakeRuntime(clk)
		return usernsRuntime{rt}
	}, pod("userns", ptr.To(false)), pod("host", nil))
	init := rt.podAttempt(t, "userns", "userns-init", 0)
	want := runtime.IDRange{HostID: 65536, Length: 65536}
	if got := init.spec.UserNamespace; got == nil || *got != want {
		t.Errorf("init container's user namespace = %+v, want %+v", got, want)
	}
	init.exit(0)
	if got := rt.podAttempt(t, "userns", "userns-main", 0).spec.UserNamespace; got == nil || *got != want {
		t.Errorf("main container's user namespace = %+v, want %+v", got, want)
	}
	if got := rt.podAttempt(t, "host", "host-init", 0).spec.UserNamespace; got != nil {
		t.Errorf("a pod with the host's users got %+v", got)
	}
	if _, err := os.Stat(filepath.Join(ta.agent.podDir("uid-userns"), "userns")); err != nil {
		t.Errorf("the range is not recorded in the pod's directory: %v", err)
	}
}
