package nodeagent

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/lifecycle"
)

// restartAllPod is upstream's e2e "should restart all containers on regular
// container exit" pod: an init container, a sidecar, a source container
// (restartPolicy Never of its own, RestartAllContainers on exit code 42)
// and a regular container, in a pod whose restartPolicy is Never.
func restartAllPod() *corev1.Pod {
	rule := corev1.ContainerRestartRule{Action: corev1.ContainerRestartRuleActionRestartAllContainers,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			InitContainers: []corev1.Container{
				{Name: "init", Image: "busybox"},
				{Name: "sidecar", Image: "busybox", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)},
			},
			Containers: []corev1.Container{
				{Name: "source", Image: "busybox", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyNever), RestartPolicyRules: []corev1.ContainerRestartRule{rule}},
				{Name: "regular", Image: "busybox"},
			},
		},
	}
}

func allStatuses(p *corev1.Pod) []corev1.ContainerStatus {
	return append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
}

func condition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// TestRestartAllContainers: a container exiting with a RestartAllContainers
// rule restarts every container of its pod in place, as the kubelet: the
// running ones killed at once with the minimum grace, init containers run
// again from the first, sidecars before the containers after them, no
// back-off, each restart counted once, the last termination
// RestartingAllContainers/137; the pod keeps running and shows the
// AllContainersRestarting condition, False once done.
func TestRestartAllContainers(t *testing.T) {
	ta, rt := startAgentWithFake(t, restartAllPod())
	rt.attempt(t, "init", 0).exit(0)
	rt.attempt(t, "sidecar", 0)
	source, regular := rt.attempt(t, "source", 0), rt.attempt(t, "regular", 0)
	got := ta.waitPod(t, "p", phaseIs(corev1.PodRunning))
	if c := condition(got, corev1.AllContainersRestarting); c == nil || c.Status != corev1.ConditionFalse || c.Reason != "" {
		t.Errorf("AllContainersRestarting = %+v, want False with no reason before any restart", c)
	}

	source.exit(42)
	// Main containers first, then init containers, each killed with the
	// minimum grace and no preStop hook.
	init1 := rt.attempt(t, "init", 1)
	if got, want := rt.stopOrder(), []string{"regular", "sidecar"}; !slices.Equal(got, want) {
		t.Errorf("stopped %v, want %v", got, want)
	}
	rt.mu.Lock()
	graces := slices.Clone(rt.graces)
	rt.mu.Unlock()
	for _, g := range graces {
		if g != lifecycle.MinStopGrace {
			t.Errorf("stopped with grace %s, want %s", g, lifecycle.MinStopGrace)
		}
	}
	if n := rt.count("sidecar") + rt.count("source") + rt.count("regular"); n != 3 {
		t.Errorf("%d attempts of the other containers before the init container finished, want none new", n-3)
	}
	if !regular.stopped() {
		t.Error("the regular container still runs")
	}
	// While the init container runs again, the others wait as the
	// kubelet shows them.
	got = ta.waitPod(t, "p", func(p *corev1.Pod) bool {
		s := p.Status.ContainerStatuses
		return len(s) == 2 && s[1].State.Waiting != nil && s[1].State.Waiting.Reason == lifecycle.ReasonRestartingAllContainers
	})
	for _, s := range got.Status.ContainerStatuses {
		last := s.LastTerminationState.Terminated
		if s.RestartCount != 1 || last == nil || last.Reason != lifecycle.ReasonRestartingAllContainers || last.ExitCode != 137 || last.Message != lifecycle.MessageRestartingAllContainers {
			t.Errorf("%s: restartCount %d, lastState %+v; want 1 and RestartingAllContainers/137", s.Name, s.RestartCount, last)
		}
	}
	if got.Status.Phase != corev1.PodPending {
		t.Errorf("phase %s while the init container runs again, want Pending", got.Status.Phase)
	}
	if c := condition(got, corev1.PodInitialized); c == nil || c.Status != corev1.ConditionTrue {
		t.Errorf("Initialized = %+v, want True still", c)
	}

	init1.exit(0)
	rt.attempt(t, "sidecar", 1)
	rt.attempt(t, "source", 1)
	rt.attempt(t, "regular", 1)
	got = ta.waitPod(t, "p", func(p *corev1.Pod) bool {
		for _, s := range allStatuses(p) {
			if s.Name != "init" && s.State.Running == nil {
				return false
			}
		}
		return p.Status.Phase == corev1.PodRunning
	})
	for _, s := range allStatuses(got) {
		if s.RestartCount != 1 {
			t.Errorf("%s: restartCount %d after one restart in place, want 1", s.Name, s.RestartCount)
		}
		if last := s.LastTerminationState.Terminated; s.Name != "init" && (last == nil || last.Reason != lifecycle.ReasonRestartingAllContainers) {
			t.Errorf("%s: lastState %+v, want RestartingAllContainers", s.Name, last)
		}
	}
	if c := condition(got, corev1.AllContainersRestarting); c == nil || c.Status != corev1.ConditionFalse {
		t.Errorf("AllContainersRestarting = %+v, want False once restarted", c)
	}
	if !ta.eventWith(t, "Killing", "killing") {
		t.Error("no Killing event for the containers stopped")
	}

	// Exit codes no rule matches follow the container's own policy: the
	// pod ends when the source container exits 0 under Never and the
	// regular one is done.
	rt.attempt(t, "source", 1).exit(0)
	rt.attempt(t, "regular", 1).exit(0)
	got = ta.waitPod(t, "p", phaseIs(corev1.PodSucceeded))
	if c := condition(got, corev1.AllContainersRestarting); c == nil || c.Status != corev1.ConditionFalse || c.Reason != "PodCompleted" {
		t.Errorf("AllContainersRestarting = %+v, want False PodCompleted", c)
	}
}

// TestRestartAllContainersBacksOff: a container that asks for a restart in
// place every time it runs restarts its pod at the crash-loop back-off's
// pace (the first restart at once, the next after BackoffInitial), not in
// a tight loop.
func TestRestartAllContainersBacksOff(t *testing.T) {
	pod := restartAllPod()
	pod.Spec.InitContainers = pod.Spec.InitContainers[:1]
	ta, rt := startAgentWithFake(t, pod)
	rt.attempt(t, "init", 0).exit(0)
	rt.attempt(t, "source", 0).exit(42)
	rt.attempt(t, "init", 1).exit(0)
	rt.attempt(t, "source", 1).exit(42)
	// The third run waits out the back-off: nothing starts before it.
	got := ta.waitPod(t, "p", func(p *corev1.Pod) bool {
		c := condition(p, corev1.AllContainersRestarting)
		return c != nil && c.Status == corev1.ConditionTrue && len(p.Status.ContainerStatuses) == 2 && p.Status.ContainerStatuses[0].RestartCount == 2
	})
	if n := rt.count("init"); n != 2 {
		t.Errorf("init ran %d times before the back-off passed, want 2", n)
	}
	if got.Status.Phase != corev1.PodRunning {
		t.Errorf("phase %s while backing off, want Running", got.Status.Phase)
	}
	ta.step(t, lifecycle.BackoffInitial)
	rt.attempt(t, "init", 2).exit(0)
	rt.attempt(t, "source", 2)
	ta.waitPod(t, "p", func(p *corev1.Pod) bool {
		c := condition(p, corev1.AllContainersRestarting)
		return c != nil && c.Status == corev1.ConditionFalse && len(p.Status.ContainerStatuses) == 2 && p.Status.ContainerStatuses[0].State.Running != nil
	})
}

// TestRestartAllContainersAcrossAnAgentRestart: an agent that restarts
// while the pod restarts in place goes on from the API's status: the
// containers shown waiting RestartingAllContainers start again with the
// restart counted once, the pod keeps running (not Failed under Never).
func TestRestartAllContainersAcrossAnAgentRestart(t *testing.T) {
	pod := restartAllPod()
	pod.Spec.NodeName = testNode
	reset := func(name string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, RestartCount: 1,
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: lifecycle.ReasonRestartingAllContainers, Message: lifecycle.MessageRestartingAllContainers}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: lifecycle.ReasonRestartingAllContainers, Message: lifecycle.MessageRestartingAllContainers}}}
	}
	for _, cond := range []corev1.ConditionStatus{corev1.ConditionTrue, corev1.ConditionFalse} {
		t.Run(string(cond), func(t *testing.T) {
			p := pod.DeepCopy()
			p.Status = corev1.PodStatus{
				Phase:                 corev1.PodRunning,
				StartTime:             ptr.To(metav1.NewTime(t0.Add(-time.Minute))),
				Conditions:            []corev1.PodCondition{{Type: corev1.AllContainersRestarting, Status: cond}},
				InitContainerStatuses: []corev1.ContainerStatus{reset("init"), reset("sidecar")},
				ContainerStatuses:     []corev1.ContainerStatus{reset("source"), reset("regular")},
			}
			ta, rt := startAgentWithFake(t, p)
			rt.attempt(t, "init", 0).exit(0)
			rt.attempt(t, "sidecar", 0)
			rt.attempt(t, "source", 0)
			rt.attempt(t, "regular", 0)
			got := ta.waitPod(t, "p", func(p *corev1.Pod) bool {
				for _, s := range allStatuses(p) {
					if s.Name != "init" && s.State.Running == nil {
						return false
					}
				}
				return len(allStatuses(p)) == 4
			})
			if got.Status.Phase != corev1.PodRunning {
				t.Errorf("phase %s, want Running", got.Status.Phase)
			}
			for _, s := range allStatuses(got) {
				if s.RestartCount != 1 {
					t.Errorf("%s: restartCount %d, want 1: the restart counted once", s.Name, s.RestartCount)
				}
			}
			if c := condition(got, corev1.AllContainersRestarting); c == nil || c.Status != corev1.ConditionFalse {
				t.Errorf("AllContainersRestarting = %+v, want False", c)
			}
		})
	}
}
