package nodeagent

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/allocation"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/binder"
	"jobkeeper.dev/jobkeeper/test/builder"
)

// guaranteed are requests and limits of cpu and mem.
func guaranteed(cpu, mem string) corev1.ResourceRequirements {
	l := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
	return corev1.ResourceRequirements{Requests: l, Limits: l.DeepCopy()}
}

// resizablePod is a running-forever pod whose container main has r.
func resizablePod(r corev1.ResourceRequirements, policy ...corev1.ContainerResizePolicy) *corev1.Pod {
	pod := builder.MakePod("p", "ns").UID("u1").RestartPolicy(corev1.RestartPolicyNever).Obj()
	pod.Generation = 1
	pod.Spec.Containers[0].Resources = r
	pod.Spec.Containers[0].ResizePolicy = policy
	return pod
}

// resizePod changes the resources of container main as the pod's resize
// subresource does: a new generation of the spec.
func (ta *testAgent) resizePod(t *testing.T, name string, r corev1.ResourceRequirements) int64 {
	t.Helper()
	ctx := context.Background()
	pod, err := ta.client.CoreV1().Pods("ns").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Spec.Containers[0].Resources = r
	pod.Generation++
	if _, err := ta.client.CoreV1().Pods("ns").Update(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return pod.Generation
}

// resizeCondition returns the pod's condition of type ct, nil if none.
func resizeCondition(p *corev1.Pod, ct corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == ct {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// resized reports whether the pod's status shows generation gen
// actuated: observed, no resize condition left, main's resources r.
func resized(gen int64, r corev1.ResourceRequirements) func(*corev1.Pod) bool {
	return func(p *corev1.Pod) bool {
		s := mainStatus(p)
		return p.Status.ObservedGeneration == gen && s.Resources != nil && allocation.SameResources(*s.Resources, r) &&
			resizeCondition(p, corev1.PodResizePending) == nil && resizeCondition(p, corev1.PodResizeInProgress) == nil
	}
}

// TestResizeInPlace: a resize that fits is allocated and actuated without
// a restart (no resizePolicy: NotRequired); the status reports the new
// resources, allocated and actual, the generation observed, and no resize
// condition; ResizeStarted and ResizeCompleted events say so.
func TestResizeInPlace(t *testing.T) {
	ta, rt := startAgentWithFake(t, resizablePod(guaranteed("100m", "64Mi")))
	rt.attempt(t, "main", 0)
	ta.waitPod(t, "p", func(p *corev1.Pod) bool {
		s := mainStatus(p)
		return s.State.Running != nil && s.Resources != nil && allocation.SameResources(*s.Resources, guaranteed("100m", "64Mi"))
	})

	want := guaranteed("200m", "128Mi")
	gen := ta.resizePod(t, "p", want)
	got := ta.waitPod(t, "p", resized(gen, want))
	if s := mainStatus(got); !allocation.SameResources(corev1.ResourceRequirements{Requests: s.AllocatedResources}, corev1.ResourceRequirements{Requests: want.Requests}) {
		t.Errorf("allocatedResources %v, want %v", s.AllocatedResources, want.Requests)
	}
	if n := rt.count("main"); n != 1 || mainStatus(got).RestartCount != 0 {
		t.Errorf("container started %d times (restartCount %d) for a resize without a restart policy", n, mainStatus(got).RestartCount)
	}
	if ev := ta.waitEvent(t, "ResizeStarted"); !strings.HasPrefix(ev.Message, "Pod resize started: ") || !strings.Contains(ev.Message, `"generation":2`) {
		t.Errorf("ResizeStarted message %q", ev.Message)
	}
	if ev := ta.waitEvent(t, "ResizeCompleted"); !strings.HasPrefix(ev.Message, "Pod resize completed: ") {
		t.Errorf("ResizeCompleted message %q", ev.Message)
	}
}

// TestResizeDeferred: a resize the node has no room for waits with
// PodResizePending (Deferred, the kubelet's message) and a ResizeDeferred
// event, the container keeping what it had; asking for what it has again
// clears the condition.
func TestResizeDeferred(t *testing.T) {
	before := guaranteed("100m", "64Mi")
	ta, rt := startAgentWithFake(t, resizablePod(before))
	rt.attempt(t, "main", 0)
	ta.waitPod(t, "p", func(p *corev1.Pod) bool { return mainStatus(p).State.Running != nil })

	gen := ta.resizePod(t, "p", guaranteed("100000", "64Mi"))
	got := ta.waitPod(t, "p", func(p *corev1.Pod) bool {
		return p.Status.ObservedGeneration == gen && resizeCondition(p, corev1.PodResizePending) != nil
	})
	c := resizeCondition(got, corev1.PodResizePending)
	if c.Reason != corev1.PodReasonDeferred || !strings.HasPrefix(c.Message, "Node didn't have enough resource: cpu, requested: 100000000, used: 0, capacity: ") || c.ObservedGeneration != gen {
		t.Errorf("PodResizePending %+v", c)
	}
	if s := mainStatus(got); !allocation.SameResources(*s.Resources, before) || s.AllocatedResources.Cpu().MilliValue() != 100 {
		t.Errorf("a deferred resize changed the status: resources %v allocated %v", s.Resources, s.AllocatedResources)
	}
	if ev := ta.waitEvent(t, "ResizeDeferred"); ev.Type != corev1.EventTypeWarning || !strings.HasPrefix(ev.Message, "Pod resize Deferred: ") {
		t.Errorf("ResizeDeferred event %s %q", ev.Type, ev.Message)
	}
	// The binder keeps the room the resize waits for, as the scheduler
	// counts a bound pod; a resize is admitted against what is allocated.
	placed := func() (reserved binder.Requests) {
		ta.agent.withWorkers(func(r binder.Requests, _ int, _ func(types.UID) bool) { reserved = r })
		return reserved
	}
	ta.agent.mu.Lock()
	allocated := ta.agent.activeRequests
	ta.agent.mu.Unlock()
	if r := placed(); r.CPUMilli != 100000000 || allocated.CPUMilli != 100 {
		t.Errorf("deferred resize: the binder counts %dm of cpu (want the asked 100000000m), admission %dm (want the allocated 100m)", r.CPUMilli, allocated.CPUMilli)
	}

	gen = ta.resizePod(t, "p", before)
	ta.waitPod(t, "p", resized(gen, before))
	if r := placed(); r.CPUMilli != 100 {
		t.Errorf("the binder counts %dm of cpu once the resize is withdrawn, want 100m", r.CPUMilli)
	}
	if n := rt.count("main"); n != 1 {
		t.Errorf("container started %d times", n)
	}
}

// TestResizeRestartContainer: a resize of a resource whose resizePolicy is
// RestartContainer restarts the container at once, even in a pod whose
// restartPolicy is Never, with its new resources, and counts the restart.
func TestResizeRestartContainer(t *testing.T) {
	ta, rt := startAgentWithFake(t, resizablePod(guaranteed("100m", "64Mi"),
		corev1.ContainerResizePolicy{ResourceName: corev1.ResourceMemory, RestartPolicy: corev1.RestartContainer}))
	rt.attempt(t, "main", 0)
	ta.waitPod(t, "p", func(p *corev1.Pod) bool { return mainStatus(p).State.Running != nil })

	want := guaranteed("100m", "128Mi")
	gen := ta.resizePod(t, "p", want)
	rt.attempt(t, "main", 1)
	got := ta.waitPod(t, "p", func(p *corev1.Pod) bool {
		return resized(gen, want)(p) && mainStatus(p).RestartCount == 1 && mainStatus(p).State.Running != nil
	})
	if got.Status.Phase != corev1.PodRunning {
		t.Errorf("phase %s after a restart for a resize, want Running", got.Status.Phase)
	}
	if ev := ta.waitEvent(t, "Killing"); ev.Message != "Container main resize requires restart" {
		t.Errorf("Killing event %q", ev.Message)
	}
}

// TestResizeInProgressUntilTheRestartedContainerRuns: a resize whose
// container must restart is not complete while the new attempt cannot
// start (restartPolicy Always: it is tried again, backing off); it
// completes once it runs.
func TestResizeInProgressUntilTheRestartedContainerRuns(t *testing.T) {
	pod := resizablePod(guaranteed("100m", "64Mi"),
		corev1.ContainerResizePolicy{ResourceName: corev1.ResourceCPU, RestartPolicy: corev1.RestartContainer})
	pod.Spec.RestartPolicy = corev1.RestartPolicyAlways
	ta, rt := startAgentWithFake(t, pod)
	rt.attempt(t, "main", 0)
	ta.waitPod(t, "p", func(p *corev1.Pod) bool { return mainStatus(p).State.Running != nil })
	rt.mu.Lock()
	rt.failures["main"] = errors.New("no start for now")
	rt.mu.Unlock()

	want := guaranteed("200m", "64Mi")
	gen := ta.resizePod(t, "p", want)
	got := ta.waitPod(t, "p", func(p *corev1.Pod) bool {
		return p.Status.ObservedGeneration == gen && mainStatus(p).State.Running == nil
	})
	if c := resizeCondition(got, corev1.PodResizeInProgress); c == nil || c.ObservedGeneration != gen {
		t.Fatalf("PodResizeInProgress %+v while the restarted container cannot start", c)
	}
	if msgs := ta.eventMessages(t, "ResizeCompleted"); len(msgs) != 0 {
		t.Errorf("ResizeCompleted before the restarted container ran: %q", msgs)
	}
	rt.mu.Lock()
	delete(rt.failures, "main")
	rt.mu.Unlock()
	ta.stepUntil(t, 10*time.Second, func() bool {
		p, err := ta.getPod("p")
		return err == nil && resized(gen, want)(p) && mainStatus(p).State.Running != nil
	})
	ta.waitEvent(t, "ResizeCompleted")
}

// TestResizePodLevelRestartsSidecarAndMain: a resize of pod-level limits
// that containers without limits of their own inherit restarts both a
// sidecar and a main container whose resizePolicy asks for it; both run
// again and the resize completes.
func TestResizePodLevelRestartsSidecarAndMain(t *testing.T) {
	restart := []corev1.ContainerResizePolicy{{ResourceName: corev1.ResourceCPU, RestartPolicy: corev1.RestartContainer},
		{ResourceName: corev1.ResourceMemory, RestartPolicy: corev1.RestartContainer}}
	pod := resizablePod(corev1.ResourceRequirements{}, restart...)
	always := corev1.ContainerRestartPolicyAlways
	pod.Spec.InitContainers = []corev1.Container{{Name: "side", Image: "busybox", Command: []string{"sleep", "1d"}, RestartPolicy: &always, ResizePolicy: restart}}
	r := guaranteed("200m", "128Mi")
	pod.Spec.Resources = &r
	ta, rt := startAgentWithFake(t, pod)
	rt.attempt(t, "side", 0)
	rt.attempt(t, "main", 0)
	ta.waitPod(t, "p", func(p *corev1.Pod) bool { return mainStatus(p).State.Running != nil })

	ctx := context.Background()
	got, err := ta.client.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bigger := guaranteed("300m", "256Mi")
	got.Spec.Resources = &bigger
	got.Generation++
	if _, err := ta.client.CoreV1().Pods("ns").Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rt.attempt(t, "side", 1)
	rt.attempt(t, "main", 1)
	ta.waitPod(t, "p", func(p *corev1.Pod) bool {
		s, _ := initStatus(p, "side")
		return p.Status.ObservedGeneration == got.Generation && resizeCondition(p, corev1.PodResizeInProgress) == nil &&
			mainStatus(p).State.Running != nil && mainStatus(p).RestartCount == 1 && s.State.Running != nil && s.RestartCount == 1
	})
}
