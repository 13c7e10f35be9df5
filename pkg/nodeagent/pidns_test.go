package nodeagent

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/lifecycle"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
	"jobkeeper.dev/jobkeeper/test/builder"
)

func TestPIDNamespaceOf(t *testing.T) {
	running := &fakeHandle{pid: 7}
	targets := func(name string) runtime.Handle {
		if name == "main" {
			return running
		}
		return nil
	}
	hostPID := &corev1.Pod{Spec: corev1.PodSpec{HostPID: true, ShareProcessNamespace: ptr.To(false), Containers: []corev1.Container{{Name: "main"}}}}
	pod := func(share bool, target string) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{
			Containers:          []corev1.Container{{Name: "main"}, {Name: "idle"}},
			EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "dbg"}, TargetContainerName: target}},
		}}
		if share {
			p.Spec.ShareProcessNamespace = ptr.To(true)
		}
		return p
	}
	main := &container{spec: &corev1.Container{Name: "main"}, info: lifecycle.ContainerInfo{Kind: lifecycle.KindMain}}
	dbg := &container{spec: &corev1.Container{Name: "dbg"}, info: lifecycle.ContainerInfo{Kind: lifecycle.KindEphemeral}}
	cases := map[string]struct {
		pod        *corev1.Pod
		c          *container
		wantMode   runtime.PIDNamespaceMode
		wantTarget runtime.Handle
		wantErr    bool
	}{
		"container of its own":            {pod: pod(false, ""), c: main, wantMode: runtime.PIDNamespaceContainer},
		"hostPID":                         {pod: hostPID, c: main, wantMode: runtime.PIDNamespaceHost},
		"shared by the pod":               {pod: pod(true, ""), c: main, wantMode: runtime.PIDNamespacePod},
		"ephemeral without target":        {pod: pod(false, ""), c: dbg, wantMode: runtime.PIDNamespaceContainer},
		"ephemeral with a running target": {pod: pod(false, "main"), c: dbg, wantMode: runtime.PIDNamespaceTarget, wantTarget: running},
		"ephemeral whose target is idle":  {pod: pod(false, "idle"), c: dbg, wantErr: true},
		"ephemeral in a shared pod":       {pod: pod(true, "main"), c: dbg, wantMode: runtime.PIDNamespacePod},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			mode, target, err := pidNamespaceOf(tc.pod, tc.c, targets)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v", err, tc.wantErr)
			}
			if mode != tc.wantMode || target != tc.wantTarget {
				t.Errorf("got %q %v, want %q %v", mode, target, tc.wantMode, tc.wantTarget)
			}
		})
	}
}

// pidFakeRuntime is a fake runtime with PID namespaces, shared ones or not.
type pidFakeRuntime struct {
	*fakeRuntime
	shared bool
}

func (r *pidFakeRuntime) PIDNamespaces() (bool, string) { return true, "" }

func (r *pidFakeRuntime) SharedPIDNamespaces() (bool, string) {
	return r.shared, "not as this user"
}

// TestSharedPIDNamespaceWhereNoneCanBeShared: a pod that shares its process
// namespace runs, where the runtime cannot share one, in the host's, with
// a Warning event saying so; where it can, in the pod's.
func TestSharedPIDNamespaceWhereNoneCanBeShared(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(map[bool]string{false: "not shared", true: "shared"}[shared], func(t *testing.T) {
			pod := builder.MakePod("p", "ns").UID("u1").Obj()
			pod.Spec.ShareProcessNamespace = ptr.To(true)
			var rt *fakeRuntime
			ta := startAgentOn(t, Options{MaxPods: 10, Runtime: "simulated"}, func(clk *testingclock.FakeClock) runtime.Runtime {
				rt = newFakeRuntime(clk)
				return &pidFakeRuntime{fakeRuntime: rt, shared: shared}
			}, pod)
			h := rt.attempt(t, "main", 0)
			want := runtime.PIDNamespacePod
			if !shared {
				want = runtime.PIDNamespaceHost
				ta.waitEventAt(t, ReasonPIDNamespaceNotShared, "spec.containers{main}")
			}
			if h.spec.PIDNamespace != want {
				t.Errorf("PID namespace %q, want %q", h.spec.PIDNamespace, want)
			}
		})
	}
}
