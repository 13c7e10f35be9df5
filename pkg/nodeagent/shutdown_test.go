package nodeagent

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/status"
	"jobkeeper.dev/jobkeeper/test/builder"
)

func TestShutdownGrace(t *testing.T) {
	pod := builder.MakePod("p", "ns").Obj()
	if got := shutdownGrace(pod, 5*time.Second); got != 5*time.Second {
		t.Errorf("default grace 30s capped to 5s: %v", got)
	}
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](2)
	if got := shutdownGrace(pod, 5*time.Second); got != 2*time.Second {
		t.Errorf("a shorter grace period of its own is kept: %v", got)
	}
}

// TestCleanStopIsAGracefulNodeShutdown: when the agent stops, a running
// pod is stopped with its grace period capped to the shutdown's, and ends
// Failed with the kubelet's reason, message and DisruptionTarget condition.
func TestCleanStopIsAGracefulNodeShutdown(t *testing.T) {
	ta, rt := startAgentWithFake(t, builder.MakePod("p", "ns").UID("u1").NodeName(testNode).Obj())
	ta.waitPod(t, "p", phaseIs(corev1.PodRunning))
	ta.stop()
	got, err := ta.client.CoreV1().Pods("ns").Get(context.Background(), "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != corev1.PodFailed || got.Status.Reason != "Terminated" || got.Status.Message != "Pod was terminated in response to imminent node shutdown." {
		t.Errorf("status = %s %q %q, want Failed, Terminated and the kubelet's message", got.Status.Phase, got.Status.Reason, got.Status.Message)
	}
	c := getCondition(got, corev1.DisruptionTarget)
	if len(c) != 1 || c[0].Status != corev1.ConditionTrue || c[0].Reason != corev1.PodReasonTerminationByKubelet || c[0].Message != status.MessageNodeShutdown {
		t.Errorf("DisruptionTarget = %+v", c)
	}
	if term := got.Status.ContainerStatuses[0].State.Terminated; term == nil || term.ExitCode != 143 {
		t.Errorf("container = %+v, want stopped with SIGTERM", got.Status.ContainerStatuses[0].State)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if len(rt.graces) != 1 || rt.graces[0] != DefaultShutdownGracePeriod {
		t.Errorf("grace periods %v, want the pod's 30s capped to %v", rt.graces, DefaultShutdownGracePeriod)
	}
}

// TestKeepRunningOnStop: with KeepRunningOnStop the agent's stop leaves the
// pod's container running and its status untouched.
func TestKeepRunningOnStop(t *testing.T) {
	var rt *fakeRuntime
	ta := startAgentOn(t, Options{MaxPods: 10, Runtime: "simulated", KeepRunningOnStop: true}, func(clk *testingclock.FakeClock) runtime.Runtime {
		rt = newFakeRuntime(clk)
		return rt
	}, builder.MakePod("p", "ns").UID("u1").NodeName(testNode).Obj())
	ta.waitPod(t, "p", phaseIs(corev1.PodRunning))
	ta.stop()
	got, err := ta.client.CoreV1().Pods("ns").Get(context.Background(), "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != corev1.PodRunning || len(getCondition(got, corev1.DisruptionTarget)) != 0 {
		t.Errorf("status = %+v, want Running as before the stop", got.Status)
	}
	if s := rt.stopOrder(); len(s) != 0 {
		t.Errorf("containers stopped: %v", s)
	}
}
