package nodeagent

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/lifecycle"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/simulated"
	"jobkeeper.dev/jobkeeper/test/builder"
)

const testNode = "node-1"

// testAgent is an agent on a fake clientset with a fake clock.
type testAgent struct {
	agent  *Agent
	client *fake.Clientset
	clock  *testingclock.FakeClock
	// timers is clock as the agent sees it: it knows the armed timers.
	timers *armedClock
	cancel context.CancelFunc
	done   chan error
	// stopped makes stop idempotent (a test may stop the agent itself).
	stopped sync.Once
}

// startAgent runs an agent with the simulated runtime over the given objects.
func startAgent(t *testing.T, maxPods int, objs ...kruntime.Object) *testAgent {
	return startAgentWith(t, Options{MaxPods: maxPods, Runtime: simulated.Name}, objs...)
}

// startAgentWith runs an agent with opts (node name, data dir and clock are set here).
func startAgentWith(t *testing.T, opts Options, objs ...kruntime.Object) *testAgent {
	t.Helper()
	return startAgentOn(t, opts, nil, objs...)
}

// startAgentOn runs an agent with opts; a non-nil rt replaces the runtime
// opts.Runtime names.
func startAgentOn(t *testing.T, opts Options, rt func(*testingclock.FakeClock) runtime.Runtime, objs ...kruntime.Object) *testAgent {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	client := fake.NewClientset(objs...)
	// The fake clientset does not implement pods/binding: set spec.nodeName.
	client.PrependReactor("create", "pods", func(action clienttesting.Action) (bool, kruntime.Object, error) {
		if action.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b := action.(clienttesting.CreateAction).GetObject().(*corev1.Binding)
		obj, err := client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), b.Namespace, b.Name)
		if err != nil {
			return true, nil, err
		}
		pod := obj.(*corev1.Pod).DeepCopy()
		if pod.Spec.NodeName != "" {
			return true, nil, apierrors.NewConflict(corev1.Resource("pods/binding"), b.Name, fmt.Errorf("already bound"))
		}
		pod.Spec.NodeName = b.Target.Name
		return true, nil, client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), pod, b.Namespace)
	})
	clk := testingclock.NewFakeClock(t0)
	timers := newArmedClock(clk)
	opts.NodeName, opts.Clock = testNode, timers
	if opts.DataDir == "" {
		opts.DataDir = t.TempDir()
	}
	a, err := New(client, opts)
	if err != nil {
		t.Fatal(err)
	}
	if rt != nil {
		a.runtime = rt(clk)
	}
	ta := &testAgent{agent: a, client: client, clock: clk, timers: timers, cancel: cancel, done: make(chan error, 1)}
	go func() { ta.done <- a.Run(ctx) }()
	t.Cleanup(ta.stop)
	return ta
}

// stop stops the agent and waits for Run to return.
func (ta *testAgent) stop() {
	ta.stopped.Do(func() {
		ta.cancel()
		<-ta.done
	})
}

// waitPod polls until the pod satisfies cond.
func (ta *testAgent) waitPod(t *testing.T, name string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := ta.client.CoreV1().Pods("ns").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		return cond(p), nil
	})
	if err != nil {
		t.Fatalf("pod %s never reached the expected state; last seen: %+v", name, last)
	}
	return last
}

// waitGone polls until the pod is deleted.
func (ta *testAgent) waitGone(t *testing.T, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := ta.client.CoreV1().Pods("ns").Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("pod %s was not deleted", name)
	}
}

func phaseIs(p corev1.PodPhase) func(*corev1.Pod) bool {
	return func(pod *corev1.Pod) bool { return pod.Status.Phase == p }
}

// statusWrites counts status patches of a pod.
func statusWrites(client *fake.Clientset, name string) int {
	n := 0
	for _, a := range client.Actions() {
		if p, ok := a.(clienttesting.PatchAction); ok && p.GetSubresource() == "status" && p.GetName() == name {
			n++
		}
	}
	return n
}

func TestNodeAndLease(t *testing.T) {
	ta := startAgent(t, 7)
	var node *corev1.Node
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := ta.client.CoreV1().Nodes().Get(ctx, testNode, metav1.GetOptions{})
		if err != nil || len(n.Status.Conditions) == 0 {
			return false, nil
		}
		node = n
		_, err = ta.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, testNode, metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatal("node or lease never registered")
	}
	if got := node.Status.Allocatable.Pods().Value(); got != 7 {
		t.Errorf("allocatable pods = %d, want 7", got)
	}
	if want := []string{"InPlacePodLevelResourcesVerticalScaling", "InPlacePodVerticalScalingInitContainers", "RestartAllContainersOnContainerExits"}; !slices.Equal(node.Status.DeclaredFeatures, want) {
		t.Errorf("declared features %v, want %v", node.Status.DeclaredFeatures, want)
	}
	if node.Status.Allocatable.Cpu().IsZero() {
		t.Error("allocatable cpu is zero")
	}
	ready := node.Status.Conditions[len(node.Status.Conditions)-1]
	if ready.Type != corev1.NodeReady || ready.Status != corev1.ConditionTrue {
		t.Errorf("last condition = %+v, want Ready=True", ready)
	}
	wantAddrs := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}, {Type: corev1.NodeHostName, Address: testNode}}
	if diff := cmp.Diff(wantAddrs, node.Status.Addresses); diff != "" {
		t.Errorf("addresses (-want +got):\n%s", diff)
	}
}

func TestPodSucceedsInOneStatusWrite(t *testing.T) {
	pod := builder.MakePod("p", "ns").UID("u1").Obj()
	ta := startAgent(t, 10, pod)
	got := ta.waitPod(t, "p", phaseIs(corev1.PodSucceeded))
	if got.Spec.NodeName != testNode {
		t.Errorf("nodeName = %q, want %q", got.Spec.NodeName, testNode)
	}
	term := got.Status.ContainerStatuses[0].State.Terminated
	if term == nil || term.ExitCode != 0 || term.Reason != "Completed" {
		t.Errorf("container state = %+v, want terminated Completed", got.Status.ContainerStatuses[0].State)
	}
	if got.Status.StartTime == nil {
		t.Error("startTime not set")
	}
	if n := statusWrites(ta.client, "p"); n != 1 {
		t.Errorf("status writes = %d, want 1", n)
	}
}

func TestRestartPolicies(t *testing.T) {
	cases := map[string]struct {
		policy       corev1.RestartPolicy
		exitCode     string
		wantPhase    corev1.PodPhase
		wantRestarts int32
	}{
		"never fails":             {policy: corev1.RestartPolicyNever, exitCode: "1", wantPhase: corev1.PodFailed},
		"on failure crash loops":  {policy: corev1.RestartPolicyOnFailure, exitCode: "1", wantPhase: corev1.PodRunning, wantRestarts: 1},
		"on failure, success":     {policy: corev1.RestartPolicyOnFailure, exitCode: "0", wantPhase: corev1.PodSucceeded},
		"always restarts success": {policy: corev1.RestartPolicyAlways, exitCode: "0", wantPhase: corev1.PodRunning, wantRestarts: 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := builder.MakePod("p", "ns").UID("u1").RestartPolicy(tc.policy).Annotation(simulated.ExitCodeAnnotation, tc.exitCode).Obj()
			ta := startAgent(t, 10, pod)
			got := ta.waitPod(t, "p", func(p *corev1.Pod) bool {
				if tc.wantRestarts == 0 {
					return p.Status.Phase == tc.wantPhase
				}
				cs := p.Status.ContainerStatuses
				return len(cs) == 1 && cs[0].State.Waiting != nil && cs[0].State.Waiting.Reason == lifecycle.ReasonCrashLoopBackOff
			})
			if got.Status.Phase != tc.wantPhase {
				t.Errorf("phase = %s, want %s", got.Status.Phase, tc.wantPhase)
			}
			cs := got.Status.ContainerStatuses[0]
			if cs.RestartCount != tc.wantRestarts {
				t.Errorf("restartCount = %d, want %d", cs.RestartCount, tc.wantRestarts)
			}
			if tc.wantRestarts > 0 {
				if cs.LastTerminationState.Terminated == nil {
					t.Error("lastState.terminated not set in back-off")
				}
				// The back-off is 10s: after it the third attempt runs. The
				// clock moves a second at a time until it has: the status
				// above can be seen before the worker has set its back-off
				// timer, and one 10s step taken before that would be lost.
				ta.stepUntil(t, time.Second, func() bool {
					p, err := ta.client.CoreV1().Pods("ns").Get(context.Background(), "p", metav1.GetOptions{})
					if err != nil {
						return false
					}
					cs := p.Status.ContainerStatuses
					return len(cs) == 1 && cs[0].RestartCount >= 2 && cs[0].State.Waiting != nil
				})
			}
		})
	}
}

func TestInitContainersRunInOrder(t *testing.T) {
	pod := builder.MakePod("p", "ns").UID("u1").InitContainer("init1", "true").InitContainer("init2", "true").
		Annotation(simulated.DurationAnnotation, "5s").Obj()
	ta := startAgent(t, 10, pod)
	got := ta.waitPod(t, "p", func(p *corev1.Pod) bool { return len(p.Status.InitContainerStatuses) == 2 })
	if got.Status.InitContainerStatuses[0].State.Running == nil || got.Status.InitContainerStatuses[1].State.Waiting == nil {
		t.Errorf("init states = %+v, want init1 running, init2 waiting", got.Status.InitContainerStatuses)
	}
	if w := got.Status.ContainerStatuses[0].State.Waiting; w == nil || w.Reason != lifecycle.ReasonPodInitializing {
		t.Errorf("main state = %+v, want waiting %s", got.Status.ContainerStatuses[0].State, lifecycle.ReasonPodInitializing)
	}
	if got.Status.Phase != corev1.PodPending {
		t.Errorf("phase = %s, want Pending", got.Status.Phase)
	}
	ta.step(t, 5*time.Second)
	ta.waitPod(t, "p", func(p *corev1.Pod) bool {
		return len(p.Status.InitContainerStatuses) == 2 && p.Status.InitContainerStatuses[1].State.Running != nil
	})
	ta.step(t, 5*time.Second)
	ta.waitPod(t, "p", phaseIs(corev1.PodRunning))
	ta.step(t, 5*time.Second)
	got = ta.waitPod(t, "p", phaseIs(corev1.PodSucceeded))
	for _, c := range getCondition(got, corev1.PodInitialized) {
		if c.Status != corev1.ConditionTrue {
			t.Errorf("Initialized = %s, want True", c.Status)
		}
	}
}

func getCondition(p *corev1.Pod, t corev1.PodConditionType) []corev1.PodCondition {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return []corev1.PodCondition{c}
		}
	}
	return nil
}

func TestActiveDeadline(t *testing.T) {
	pod := builder.MakePod("p", "ns").UID("u1").ActiveDeadlineSeconds(30).Annotation(simulated.DurationAnnotation, "1h").Obj()
	ta := startAgent(t, 10, pod)
	ta.waitPod(t, "p", phaseIs(corev1.PodRunning))
	ta.step(t, 30*time.Second)
	got := ta.waitPod(t, "p", phaseIs(corev1.PodFailed))
	if got.Status.Reason != lifecycle.ReasonDeadlineExceeded || got.Status.Message != lifecycle.MessageDeadlineExceeded {
		t.Errorf("reason, message = %q, %q", got.Status.Reason, got.Status.Message)
	}
	if term := got.Status.ContainerStatuses[0].State.Terminated; term == nil || term.ExitCode != 143 {
		t.Errorf("container state = %+v, want terminated 143", got.Status.ContainerStatuses[0].State)
	}
}

func TestGracefulDeletion(t *testing.T) {
	pod := builder.MakePod("p", "ns").UID("u1").Annotation(simulated.DurationAnnotation, "1h").Obj()
	ta := startAgent(t, 10, pod)
	running := ta.waitPod(t, "p", phaseIs(corev1.PodRunning))
	// What the apiserver does on a graceful delete.
	running.DeletionTimestamp = ptr.To(metav1.NewTime(t0.Add(30 * time.Second)))
	running.DeletionGracePeriodSeconds = ptr.To[int64](30)
	if err := ta.client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), running, "ns"); err != nil {
		t.Fatal(err)
	}
	ta.waitGone(t, "p")
	var sawFailed, sawDelete bool
	for _, a := range ta.client.Actions() {
		if p, ok := a.(clienttesting.PatchAction); ok && p.GetSubresource() == "status" && !sawDelete {
			sawFailed = sawFailed || contains(string(p.GetPatch()), `"phase":"Failed"`)
		}
		if d, ok := a.(clienttesting.DeleteAction); ok && d.GetName() == "p" {
			sawDelete = true
			if d.GetDeleteOptions().GracePeriodSeconds == nil || *d.GetDeleteOptions().GracePeriodSeconds != 0 {
				t.Errorf("final delete grace = %v, want 0", d.GetDeleteOptions().GracePeriodSeconds)
			}
		}
	}
	if !sawFailed || !sawDelete {
		t.Errorf("want a Failed status write before the final delete; failed=%v delete=%v", sawFailed, sawDelete)
	}
}

func contains(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && (s[:len(sub)] == sub || contains(s[1:], sub)))
}

func TestMaxPodsAndUnschedulable(t *testing.T) {
	var objs []kruntime.Object
	for i := range 3 {
		objs = append(objs, builder.MakePod(fmt.Sprintf("p%d", i), "ns").UID(fmt.Sprintf("u%d", i)).
			CreationTimestamp(metav1.NewTime(t0.Add(time.Duration(i)*time.Second))).
			Annotation(simulated.DurationAnnotation, "1h").Obj())
	}
	objs = append(objs, builder.MakePod("huge", "ns").UID("uh").RequestCPU("100000").Obj())
	ta := startAgent(t, 2, objs...)
	ta.waitPod(t, "p0", phaseIs(corev1.PodRunning))
	ta.waitPod(t, "p1", phaseIs(corev1.PodRunning))
	huge := ta.waitPod(t, "huge", func(p *corev1.Pod) bool { return len(getCondition(p, corev1.PodScheduled)) == 1 })
	c := getCondition(huge, corev1.PodScheduled)[0]
	if c.Status != corev1.ConditionFalse || c.Reason != corev1.PodReasonUnschedulable || c.Message != "0/1 nodes are available: 1 Insufficient cpu." {
		t.Errorf("PodScheduled = %+v", c)
	}
	p2, _ := ta.client.CoreV1().Pods("ns").Get(context.Background(), "p2", metav1.GetOptions{})
	if p2.Spec.NodeName != "" {
		t.Fatal("the third pod was bound to a full node")
	}
	// p0 ends: room for the youngest pod.
	ta.step(t, time.Hour)
	ta.waitPod(t, "p2", func(p *corev1.Pod) bool { return p.Spec.NodeName == testNode })
}

func TestAgentRestartActsLikeANodeReboot(t *testing.T) {
	runningStatus := corev1.PodStatus{
		Phase:     corev1.PodRunning,
		StartTime: ptr.To(metav1.NewTime(t0.Add(-time.Minute))),
		ContainerStatuses: []corev1.ContainerStatus{{
			Name:  "main",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(t0.Add(-time.Minute))}},
		}},
	}
	never := builder.MakePod("never", "ns").UID("u1").NodeName(testNode).Obj()
	never.Status = runningStatus
	onFailure := builder.MakePod("onfailure", "ns").UID("u2").NodeName(testNode).RestartPolicy(corev1.RestartPolicyOnFailure).Obj()
	onFailure.Status = runningStatus
	ta := startAgent(t, 10, never, onFailure)

	got := ta.waitPod(t, "never", phaseIs(corev1.PodFailed))
	term := got.Status.ContainerStatuses[0].State.Terminated
	if term == nil || term.Reason != lifecycle.ReasonContainerStatusUnknown || term.ExitCode != 137 {
		t.Errorf("never: container state = %+v, want terminated ContainerStatusUnknown 137", got.Status.ContainerStatuses[0].State)
	}
	got = ta.waitPod(t, "onfailure", phaseIs(corev1.PodSucceeded))
	if cs := got.Status.ContainerStatuses[0]; cs.RestartCount != 1 || cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.Reason != lifecycle.ReasonContainerStatusUnknown {
		t.Errorf("onfailure: container status = %+v, want restartCount 1 after a lost container", cs)
	}
}

// TestManyPods checks the simulated runtime and the status manager keep up.
func TestManyPods(t *testing.T) {
	const n = 500
	var objs []kruntime.Object
	for i := range n {
		objs = append(objs, builder.MakePod(fmt.Sprintf("p%d", i), "ns").UID(fmt.Sprintf("u%d", i)).Obj())
	}
	ta := startAgent(t, 100, objs...)
	var mu sync.Mutex
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		pods, err := ta.client.CoreV1().Pods("ns").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodSucceeded {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatal("not all pods succeeded")
	}
}

// TestNodeReadinessTaintsLifted: the not-ready and unreachable taints the
// apiserver or a past outage left on the Node go once the agent reports
// Ready; other taints stay.
func TestNodeReadinessTaintsLifted(t *testing.T) {
	custom := corev1.Taint{Key: "example.com/dedicated", Value: "batch", Effect: corev1.TaintEffectNoSchedule}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: testNode},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule},
			custom,
			{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute},
		}},
	}
	ta := startAgent(t, 7, node)
	var last *corev1.Node
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := ta.client.CoreV1().Nodes().Get(ctx, testNode, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = n
		return len(n.Status.Conditions) > 0 && len(n.Spec.Taints) == 1, nil
	}); err != nil {
		t.Fatalf("taints never lifted: %+v", last.Spec.Taints)
	}
	if diff := cmp.Diff([]corev1.Taint{custom}, last.Spec.Taints); diff != "" {
		t.Errorf("taints (-want +got):\n%s", diff)
	}
}

var t0 = time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
