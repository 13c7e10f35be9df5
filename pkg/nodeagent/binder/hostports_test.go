package binder

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"jobkeeper.dev/jobkeeper/test/builder"
)

func TestHostPortConflicts(t *testing.T) {
	p := func(ip string, proto corev1.Protocol, port int32) hostPort {
		return hostPort{ip: ip, protocol: proto, port: port}
	}
	for _, tc := range []struct {
		want, held hostPort
		conflict   bool
	}{
		{p("0.0.0.0", "TCP", 80), p("0.0.0.0", "TCP", 80), true},
		{p("10.0.0.1", "TCP", 80), p("0.0.0.0", "TCP", 80), true},
		{p("0.0.0.0", "TCP", 80), p("10.0.0.1", "TCP", 80), true},
		{p("10.0.0.1", "TCP", 80), p("10.0.0.2", "TCP", 80), false},
		{p("0.0.0.0", "UDP", 80), p("0.0.0.0", "TCP", 80), false},
		{p("0.0.0.0", "TCP", 81), p("0.0.0.0", "TCP", 80), false},
	} {
		if got := conflicts(tc.want, tc.held); got != tc.conflict {
			t.Errorf("conflicts(%+v, %+v) = %v, want %v", tc.want, tc.held, got, tc.conflict)
		}
	}
}

// TestBinderWaitsForAHostPort: a pod whose hostPort a running pod holds,
// or one placed before it in the same pass, is not bound, and is marked
// unschedulable with the scheduler's NodePorts message; once the holder
// finished it is bound.
func TestBinderWaitsForAHostPort(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset()
	bound := newIndexer()
	var events []string
	cfg := testConfig(client, bound, Requests{}, 1, func(types.UID) bool { return false })
	cfg.Event = func(_ *corev1.Pod, _, reason, msg string) { events = append(events, reason+": "+msg) }
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	withPort := func(name string, port int32) *corev1.Pod {
		pod := builder.MakePod(name, "ns").UID(name).Obj()
		pod.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080, HostPort: port}}
		return pod
	}
	holder := withPort("holder", 8080)
	holder.Spec.NodeName, holder.Status.Phase = testNode, corev1.PodRunning
	if err := bound.Add(holder); err != nil {
		t.Fatal(err)
	}
	for _, pod := range []*corev1.Pod{withPort("same-port", 8080), withPort("other-a", 9090), withPort("other-b", 9090)} {
		if _, err := client.CoreV1().Pods("ns").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := b.factory.Core().V1().Pods().Informer().GetStore().Add(pod); err != nil {
			t.Fatal(err)
		}
	}
	bindings := func() []string {
		var out []string
		for _, action := range client.Actions() {
			if action.GetVerb() == "create" && action.GetSubresource() == "binding" {
				out = append(out, action.(clienttesting.CreateAction).GetObject().(*corev1.Binding).Name)
			}
		}
		return out
	}
	_ = b.sync(ctx)
	if got := bindings(); len(got) != 1 || got[0] != "other-a" {
		t.Errorf("bound %v, want other-a alone (same-port's port is held, other-b's taken by other-a)", got)
	}
	if len(events) == 0 || events[0] != "FailedScheduling: "+hostPortsTaken {
		t.Errorf("events %q, want FailedScheduling with the NodePorts message", events)
	}

	// The holder finished: its port is free.
	holder = holder.DeepCopy()
	holder.Status.Phase = corev1.PodSucceeded
	if err := bound.Update(holder); err != nil {
		t.Fatal(err)
	}
	client.ClearActions()
	_ = b.sync(ctx)
	found := false
	for _, name := range bindings() {
		found = found || name == "same-port"
	}
	if !found {
		t.Errorf("same-port was not bound once its port was free: %v", bindings())
	}
}

// TestBinderFollowsNodeLabels: a pod whose nodeSelector names a label the
// node lacks waits; once a user labels the node (as kubectl label node
// does), it is bound.
func TestBinderFollowsNodeLabels(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, Labels: NodeLabels(testNode)}}
	client := fake.NewClientset(node)
	b, err := New(testConfig(client, newIndexer(), Requests{}, 0, func(types.UID) bool { return false }))
	if err != nil {
		t.Fatal(err)
	}
	pod := builder.MakePod("blue", "ns").UID("blue").Obj()
	pod.Spec.NodeSelector = map[string]string{"color": "blue"}
	if _, err := client.CoreV1().Pods("ns").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.factory.Core().V1().Pods().Informer().GetStore().Add(pod); err != nil {
		t.Fatal(err)
	}
	nodes := b.nodeFactory.Core().V1().Nodes().Informer().GetStore()
	if err := nodes.Add(node); err != nil {
		t.Fatal(err)
	}
	bound := func() bool {
		for _, action := range client.Actions() {
			if action.GetVerb() == "create" && action.GetSubresource() == "binding" {
				return true
			}
		}
		return false
	}
	_ = b.sync(ctx)
	if bound() {
		t.Fatal("a pod selecting a label the node lacks was bound")
	}
	labelled := node.DeepCopy()
	labelled.Labels["color"] = "blue"
	if err := nodes.Update(labelled); err != nil {
		t.Fatal(err)
	}
	_ = b.sync(ctx)
	if !bound() {
		t.Error("the pod was not bound once the node had its label")
	}
}
