package nodeagent

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/internal/runtimetest"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/lifecycle"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
	"jobkeeper.dev/jobkeeper/test/builder"
)

// hookRuntime is a fake runtime whose handles can exec (with exec) and
// record the grace period of each stop.
type hookRuntime struct {
	*fakeRuntime
	// exec runs exec requests.
	exec *runtimetest.FakeExecer

	// mu guards graces.
	mu sync.Mutex
	// graces are the grace periods of the stops, in order.
	graces []time.Duration
}

// Start implements runtime.Runtime.
func (r *hookRuntime) Start(ctx context.Context, spec runtime.Spec) (runtime.Handle, error) {
	h, err := r.fakeRuntime.Start(ctx, spec)
	if err != nil {
		return nil, err
	}
	return &hookHandle{fakeHandle: h.(*fakeHandle), rt: r}, nil
}

// stopGraces returns the grace periods of the stops so far.
func (r *hookRuntime) stopGraces() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.graces...)
}

// hookHandle is an attempt of hookRuntime.
type hookHandle struct {
	*fakeHandle
	// rt is the runtime.
	rt *hookRuntime
}

// Exec implements runtime.Execer.
func (h *hookHandle) Exec(ctx context.Context, req runtime.ExecRequest) (int32, error) {
	return h.rt.exec.Exec(ctx, req)
}

// Stop implements runtime.Handle, recording the grace period.
func (h *hookHandle) Stop(grace time.Duration) {
	h.rt.mu.Lock()
	h.rt.graces = append(h.rt.graces, grace)
	h.rt.mu.Unlock()
	h.fakeHandle.Stop(grace)
}

// startAgentWithHooks runs an agent on a hookRuntime whose exec runs run.
func startAgentWithHooks(t *testing.T, run func(ctx context.Context, cmd []string, out *strings.Builder) (int32, error), objs ...kruntime.Object) (*testAgent, *hookRuntime) {
	t.Helper()
	var rt *hookRuntime
	ta := startAgentOn(t, Options{MaxPods: 10, Runtime: "simulated"}, func(clk *testingclock.FakeClock) runtime.Runtime {
		rt = &hookRuntime{fakeRuntime: newFakeRuntime(clk), exec: &runtimetest.FakeExecer{Run: run}}
		return rt
	}, objs...)
	return ta, rt
}

// deletePod does what the apiserver does on a graceful delete.
func (ta *testAgent) deletePod(t *testing.T, name string, grace int64) {
	t.Helper()
	p, err := ta.client.CoreV1().Pods("ns").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.DeletionTimestamp = ptr.To(metav1.NewTime(ta.clock.Now().Add(time.Duration(grace) * time.Second)))
	p.DeletionGracePeriodSeconds = ptr.To(grace)
	if err := ta.client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), p, "ns"); err != nil {
		t.Fatal(err)
	}
}

// withLifecycle sets the hooks of the pod's first container.
func withLifecycle(pod *corev1.Pod, postStart, preStop *corev1.LifecycleHandler) *corev1.Pod {
	pod.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PostStart: postStart, PreStop: preStop}
	return pod
}

func TestPostStartHookHoldsTheContainerUntilItReturns(t *testing.T) {
	release := make(chan struct{})
	agents := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		agents <- r.UserAgent() + " " + r.URL.String()
		<-release
	}))
	defer srv.Close()
	pod := withLifecycle(builder.MakePod("p", "ns").UID("u1").Obj(),
		&corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/hook?x=1", Port: intstr.FromInt32(serverPort(t, srv))}}, nil)
	pod.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(serverPort(t, srv))}}}
	ta, rt := startAgentWithHooks(t, nil, pod)
	rt.attempt(t, "main", 0)
	if got := <-agents; got != "kube-lifecycle/1.36 /hook?x=1" {
		t.Errorf("hook request = %q", got)
	}
	ta.waitEvent(t, "Started")
	got := ta.waitPod(t, "p", func(p *corev1.Pod) bool { return len(p.Status.ContainerStatuses) == 1 })
	if cs := got.Status.ContainerStatuses[0]; got.Status.Phase != corev1.PodPending || cs.State.Waiting == nil || cs.State.Waiting.Reason != lifecycle.ReasonContainerCreating || cs.ContainerID != "" {
		t.Errorf("during the hook: phase %s, state %+v, containerID %q; want Pending, waiting ContainerCreating, no ID", got.Status.Phase, cs.State, cs.ContainerID)
	}
	close(release)
	ta.waitPod(t, "p", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && p.Status.ContainerStatuses[0].State.Running != nil
	})
	// The readiness probe runs only once the hook returned.
	if got := <-agents; got != "kube-probe/1.36 /ready" {
		t.Errorf("request after the hook = %q, want the readiness probe", got)
	}
}

func TestFailedPostStartHookKillsTheContainer(t *testing.T) {
	run := func(_ context.Context, cmd []string, out *strings.Builder) (int32, error) {
		out.WriteString("no luck\n")
		return 3, nil
	}
	pod := withLifecycle(builder.MakePod("p", "ns").UID("u1").Obj(),
		&corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "exit 3"}}}, nil)
	ta, rt := startAgentWithHooks(t, run, pod)
	rt.attempt(t, "main", 0)
	got := ta.waitPod(t, "p", phaseIs(corev1.PodFailed))
	if term := got.Status.ContainerStatuses[0].State.Terminated; term == nil || term.ExitCode != 143 || term.Reason != "Error" {
		t.Errorf("state = %+v, want terminated 143 Error", got.Status.ContainerStatuses[0].State)
	}
	if ev := ta.waitEvent(t, lifecycle.ReasonFailedPostStartHook); ev.Type != corev1.EventTypeWarning || ev.Message != "PostStartHook failed" {
		t.Errorf("event = %s %q", ev.Type, ev.Message)
	}
	if ev := ta.waitEvent(t, "Killing"); ev.Message != lifecycle.ReasonFailedPostStartHook {
		t.Errorf("Killing message = %q", ev.Message)
	}
	if g := rt.stopGraces(); fmt.Sprint(g) != "[30s]" {
		t.Errorf("stop grace periods = %v, want [30s] (the pod's)", g)
	}
}

func TestFailedPostStartHookRestartsUnderOnFailure(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	run := func(_ context.Context, cmd []string, out *strings.Builder) (int32, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			return 1, nil
		}
		return 0, nil
	}
	pod := withLifecycle(builder.MakePod("p", "ns").UID("u1").RestartPolicy(corev1.RestartPolicyOnFailure).Obj(),
		&corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}, nil)
	ta, rt := startAgentWithHooks(t, run, pod)
	rt.attempt(t, "main", 1)
	got := ta.waitPod(t, "p", func(p *corev1.Pod) bool {
		cs := p.Status.ContainerStatuses
		return len(cs) == 1 && cs[0].State.Running != nil && cs[0].RestartCount == 1
	})
	if last := got.Status.ContainerStatuses[0].LastTerminationState.Terminated; last == nil || last.ExitCode != 143 {
		t.Errorf("last state = %+v, want terminated 143", last)
	}
}

func TestPostStartHookEndsWhenThePodIsDeleted(t *testing.T) {
	pod := withLifecycle(builder.MakePod("p", "ns").UID("u1").Obj(),
		&corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 3600}}, nil)
	ta, rt := startAgentWithHooks(t, nil, pod)
	rt.attempt(t, "main", 0)
	ta.waitEvent(t, "Started")
	ta.deletePod(t, "p", 30)
	ta.waitGone(t, "p")
	if g := rt.stopGraces(); fmt.Sprint(g) != "[30s]" {
		t.Errorf("stop grace periods = %v, want [30s]", g)
	}
}

func TestPreStopSleepHookTimeIsDeductedFromTheGracePeriod(t *testing.T) {
	pod := withLifecycle(builder.MakePod("p", "ns").UID("u1").Obj(), nil, &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 5}})
	ta, rt := startAgentWithHooks(t, nil, pod)
	rt.attempt(t, "main", 0)
	ta.waitPod(t, "p", phaseIs(corev1.PodRunning))
	ta.deletePod(t, "p", 30)
	ta.waitEvent(t, "Killing")
	if n := len(rt.stopOrder()); n != 0 {
		t.Fatal("stopped before the preStop hook ran")
	}
	// The sleep ends.
	ta.step(t, 5*time.Second)
	ta.waitGone(t, "p")
	if g := rt.stopGraces(); fmt.Sprint(g) != "[25s]" {
		t.Errorf("stop grace periods = %v, want [25s]", g)
	}
}

func TestPreStopHookIsAbandonedAtTheEndOfTheGracePeriod(t *testing.T) {
	pod := withLifecycle(builder.MakePod("p", "ns").UID("u1").Obj(), nil, &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 600}})
	ta, rt := startAgentWithHooks(t, nil, pod)
	rt.attempt(t, "main", 0)
	ta.waitPod(t, "p", phaseIs(corev1.PodRunning))
	ta.deletePod(t, "p", 10)
	ta.waitEvent(t, "Killing")
	// The grace period's timer fires while the hook sleeps.
	ta.step(t, 10*time.Second)
	ta.waitGone(t, "p")
	if g := rt.stopGraces(); fmt.Sprint(g) != "[2s]" {
		t.Errorf("stop grace periods = %v, want [2s], the minimum after the hook", g)
	}
}

func TestFailedPreStopHookStillStops(t *testing.T) {
	run := func(_ context.Context, cmd []string, out *strings.Builder) (int32, error) { return 1, nil }
	pod := withLifecycle(builder.MakePod("p", "ns").UID("u1").Obj(), nil, &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"false"}}})
	ta, rt := startAgentWithHooks(t, run, pod)
	rt.attempt(t, "main", 0)
	ta.waitPod(t, "p", phaseIs(corev1.PodRunning))
	ta.deletePod(t, "p", 30)
	if ev := ta.waitEvent(t, lifecycle.ReasonFailedPreStopHook); ev.Type != corev1.EventTypeWarning || ev.Message != "PreStopHook failed" {
		t.Errorf("event = %s %q", ev.Type, ev.Message)
	}
	ta.waitGone(t, "p")
	if g := rt.stopGraces(); fmt.Sprint(g) != "[30s]" {
		t.Errorf("stop grace periods = %v, want [30s]", g)
	}
}

func TestExecHookNeedsARuntimeThatExecs(t *testing.T) {
	pod := withLifecycle(builder.MakePod("p", "ns").UID("u1").Obj(), &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}, nil)
	ta, _ := startAgentWithFake(t, pod)
	ev := ta.waitEvent(t, lifecycle.ReasonHookNotSupported)
	if ev.Type != corev1.EventTypeWarning || ev.Message != "PostStart hook of container main not run: this runtime cannot run commands in containers" {
		t.Errorf("event = %s %q", ev.Type, ev.Message)
	}
	ta.waitPod(t, "p", phaseIs(corev1.PodRunning))
}
