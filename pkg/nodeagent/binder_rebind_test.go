package nodeagent

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime/simulated"
	"jobkeeper.dev/jobkeeper/test/builder"
)

// TestBinderSkipsPodsAlreadyBound checks that a binding pass does not bind
// again a pod its informer still shows unscheduled but that it bound
// already (assumed) or that the agent already runs: the binder's watch sees
// a pod leave later than the binding returns, and each such second binding
// was a refused request (409), 6-8% of the bindings of a 10,000-pod Job.
func TestBinderSkipsPodsAlreadyBound(t *testing.T) {
	for name, known := range map[string]func(a *Agent, pod *corev1.Pod){
		"assumed": func(a *Agent, pod *corev1.Pod) {
			a.binder.assumed[pod.UID] = assumedPod{boundAt: a.clock.Now()}
		},
		"running": func(a *Agent, pod *corev1.Pod) {
			a.workers[pod.UID] = newWorker(a, pod)
		},
		"neither": nil,
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			client := fake.NewClientset()
			a, err := New(client, Options{MaxPods: 10, Runtime: simulated.Name, NodeName: testNode, DataDir: t.TempDir(), Clock: testingclock.NewFakeClock(t0)})
			if err != nil {
				t.Fatal(err)
			}
			pod := builder.MakePod("p", "ns").UID("u").Obj()
			if err := a.binder.factory.Core().V1().Pods().Informer().GetStore().Add(pod); err != nil {
				t.Fatal(err)
			}
			if known != nil {
				known(a, pod)
			}
			client.ClearActions()
			_ = a.binder.sync(ctx)
			bindings := 0
			for _, action := range client.Actions() {
				if action.GetVerb() == "create" && action.GetSubresource() == "binding" {
					bindings++
				}
			}
			want := 0
			if known == nil {
				want = 1
			}
			if bindings != want {
				t.Errorf("bindings sent = %d, want %d", bindings, want)
			}
		})
	}
}
