package nodeagent

import (
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/lifecycle"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/status"
	"jobkeeper.dev/jobkeeper/test/builder"
)

// exitCodesRule is a restart rule with action Restart on exit codes.
func exitCodesRule(op corev1.ContainerRestartRuleOnExitCodesOperator, values ...int32) corev1.ContainerRestartRule {
	return corev1.ContainerRestartRule{
		Action:    corev1.ContainerRestartRuleActionRestart,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: op, Values: values},
	}
}

func TestShouldRestart(t *testing.T) {
	var (
		always    = ptr.To(corev1.ContainerRestartPolicyAlways)
		onFailure = ptr.To(corev1.ContainerRestartPolicyOnFailure)
		never     = ptr.To(corev1.ContainerRestartPolicyNever)
		in        = corev1.ContainerRestartRuleOnExitCodesOpIn
		notIn     = corev1.ContainerRestartRuleOnExitCodesOpNotIn
	)
	cases := map[string]struct {
		// the container
		pod       corev1.RestartPolicy
		container *corev1.ContainerRestartPolicy
		rules     []corev1.ContainerRestartRule
		kind      lifecycle.ContainerKind
		// the exit
		code int32
		want bool
	}{
		// The pod's policy alone.
		"pod always, success":            {pod: corev1.RestartPolicyAlways, kind: lifecycle.KindMain, code: 0, want: true},
		"pod always, failure":            {pod: corev1.RestartPolicyAlways, kind: lifecycle.KindMain, code: 1, want: true},
		"pod unset means always":         {kind: lifecycle.KindMain, code: 0, want: true},
		"pod always, init success":       {pod: corev1.RestartPolicyAlways, kind: lifecycle.KindInit, code: 0, want: false},
		"pod always, init failure":       {pod: corev1.RestartPolicyAlways, kind: lifecycle.KindInit, code: 2, want: true},
		"pod on failure, success":        {pod: corev1.RestartPolicyOnFailure, kind: lifecycle.KindMain, code: 0, want: false},
		"pod on failure, failure":        {pod: corev1.RestartPolicyOnFailure, kind: lifecycle.KindMain, code: 137, want: true},
		"pod never, failure":             {pod: corev1.RestartPolicyNever, kind: lifecycle.KindMain, code: 1, want: false},
		"pod never, init failure":        {pod: corev1.RestartPolicyNever, kind: lifecycle.KindInit, code: 1, want: false},
		"pod never, sidecar success":     {pod: corev1.RestartPolicyNever, kind: lifecycle.KindSidecar, code: 0, want: true},
		"pod never, sidecar failure":     {pod: corev1.RestartPolicyNever, kind: lifecycle.KindSidecar, code: 1, want: true},
		"pod on failure, sidecar exit 0": {pod: corev1.RestartPolicyOnFailure, kind: lifecycle.KindSidecar, code: 0, want: true},

		// The container's policy overrides the pod's.
		"container on failure in never pod, failure": {pod: corev1.RestartPolicyNever, container: onFailure, kind: lifecycle.KindMain, code: 1, want: true},
		"container on failure in never pod, success": {pod: corev1.RestartPolicyNever, container: onFailure, kind: lifecycle.KindMain, code: 0, want: false},
		"container always in never pod, success":     {pod: corev1.RestartPolicyNever, container: always, kind: lifecycle.KindMain, code: 0, want: true},
		"container never in always pod, failure":     {pod: corev1.RestartPolicyAlways, container: never, kind: lifecycle.KindMain, code: 1, want: false},
		"container never in always pod, success":     {pod: corev1.RestartPolicyAlways, container: never, kind: lifecycle.KindMain, code: 0, want: false},
		"init on failure in never pod, failure":      {pod: corev1.RestartPolicyNever, container: onFailure, kind: lifecycle.KindInit, code: 3, want: true},
		"init never in on failure pod, failure":      {pod: corev1.RestartPolicyOnFailure, container: never, kind: lifecycle.KindInit, code: 3, want: false},
		"init always-by-rule never restarts on 0":    {pod: corev1.RestartPolicyNever, container: never, rules: []corev1.ContainerRestartRule{exitCodesRule(notIn, 1)}, kind: lifecycle.KindInit, code: 0, want: false},

		// Rules, in order, the first match deciding.
		"rule In matches":                  {pod: corev1.RestartPolicyNever, container: never, rules: []corev1.ContainerRestartRule{exitCodesRule(in, 42)}, kind: lifecycle.KindMain, code: 42, want: true},
		"rule In misses, container policy": {pod: corev1.RestartPolicyNever, container: never, rules: []corev1.ContainerRestartRule{exitCodesRule(in, 42)}, kind: lifecycle.KindMain, code: 1, want: false},
		"rule In misses, always policy":    {pod: corev1.RestartPolicyNever, container: always, rules: []corev1.ContainerRestartRule{exitCodesRule(in, 42)}, kind: lifecycle.KindMain, code: 1, want: true},
		"rule NotIn matches":               {pod: corev1.RestartPolicyNever, container: never, rules: []corev1.ContainerRestartRule{exitCodesRule(notIn, 0, 2)}, kind: lifecycle.KindMain, code: 1, want: true},
		"rule NotIn misses":                {pod: corev1.RestartPolicyNever, container: never, rules: []corev1.ContainerRestartRule{exitCodesRule(notIn, 0, 2)}, kind: lifecycle.KindMain, code: 2, want: false},
		"rule on success code":             {pod: corev1.RestartPolicyNever, container: never, rules: []corev1.ContainerRestartRule{exitCodesRule(in, 0)}, kind: lifecycle.KindMain, code: 0, want: true},
		"second rule matches":              {pod: corev1.RestartPolicyNever, container: never, rules: []corev1.ContainerRestartRule{exitCodesRule(in, 1), exitCodesRule(in, 2)}, kind: lifecycle.KindMain, code: 2, want: true},
		"a RestartAllContainers rule restarts it too, with its pod": {
			pod: corev1.RestartPolicyNever, container: never, kind: lifecycle.KindMain, code: 42, want: true,
			rules: []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestartAllContainers, ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: in, Values: []int32{42}}}},
		},
		"rule without exit codes never matches": {
			pod: corev1.RestartPolicyNever, container: never, kind: lifecycle.KindMain, code: 1, want: false,
			rules: []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestart}},
		},
		"rules without a container policy are ignored": {pod: corev1.RestartPolicyNever, rules: []corev1.ContainerRestartRule{exitCodesRule(in, 42)}, kind: lifecycle.KindMain, code: 42, want: false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := lifecycle.RestartPolicy{Pod: tc.pod, Container: tc.container, Rules: tc.rules}
			if got := lifecycle.ShouldRestart(p, tc.kind, tc.code); got != tc.want {
				t.Errorf("shouldRestart() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRestartsAfterKill(t *testing.T) {
	cases := map[string]struct {
		pod       corev1.RestartPolicy
		container *corev1.ContainerRestartPolicy
		kind      lifecycle.ContainerKind
		want      bool
	}{
		"pod never":                       {pod: corev1.RestartPolicyNever, kind: lifecycle.KindMain, want: false},
		"pod on failure":                  {pod: corev1.RestartPolicyOnFailure, kind: lifecycle.KindMain, want: true},
		"pod always":                      {pod: corev1.RestartPolicyAlways, kind: lifecycle.KindMain, want: true},
		"container on failure, pod never": {pod: corev1.RestartPolicyNever, container: ptr.To(corev1.ContainerRestartPolicyOnFailure), kind: lifecycle.KindMain, want: true},
		"container never, pod always":     {pod: corev1.RestartPolicyAlways, container: ptr.To(corev1.ContainerRestartPolicyNever), kind: lifecycle.KindMain, want: false},
		"sidecar":                         {pod: corev1.RestartPolicyNever, container: ptr.To(corev1.ContainerRestartPolicyAlways), kind: lifecycle.KindSidecar, want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := lifecycle.RestartPolicy{Pod: tc.pod, Container: tc.container}
			if got := p.RestartsAfterKill(tc.kind); got != tc.want {
				t.Errorf("restartsAfterKill() = %v, want %v", got, tc.want)
			}
		})
	}
}

// phasesWritten returns the pod phases the agent wrote, in order.
func phasesWritten(ta *testAgent, name string) []corev1.PodPhase {
	var out []corev1.PodPhase
	for _, a := range ta.client.Actions() {
		p, ok := a.(clienttesting.PatchAction)
		if !ok || p.GetSubresource() != "status" || p.GetName() != name {
			continue
		}
		var patch struct {
			Status struct {
				Phase corev1.PodPhase `json:"phase"`
			} `json:"status"`
		}
		if err := json.Unmarshal(p.GetPatch(), &patch); err == nil && patch.Status.Phase != "" {
			out = append(out, patch.Status.Phase)
		}
	}
	return out
}

// mainStatus returns the status of the pod's first main container.
func mainStatus(p *corev1.Pod) corev1.ContainerStatus {
	if len(p.Status.ContainerStatuses) == 0 {
		return corev1.ContainerStatus{}
	}
	return p.Status.ContainerStatuses[0]
}

// TestContainerRestartPolicyInANeverPod is the pod of upstream's e2e spec
// "containers restarted by container restart policy should not trigger
// PodFailurePolicy": a Job pod with restartPolicy Never whose container has
// restartPolicy OnFailure fails once, is restarted in place and succeeds;
// the pod is never Failed, so the Job's podFailurePolicy never sees it.
func TestContainerRestartPolicyInANeverPod(t *testing.T) {
	pod := builder.MakePod("p", "ns").UID("u1").RestartPolicy(corev1.RestartPolicyNever).
		ContainerRestartPolicy(corev1.ContainerRestartPolicyOnFailure).Obj()
	ta, rt := startAgentWithFake(t, pod)
	rt.attempt(t, "main", 0).exit(1)
	second := rt.attempt(t, "main", 1)
	got := ta.waitPod(t, "p", func(p *corev1.Pod) bool { return mainStatus(p).RestartCount == 1 && mainStatus(p).State.Running != nil })
	if got.Status.Phase != corev1.PodRunning {
		t.Errorf("phase = %s while the container restarts, want Running", got.Status.Phase)
	}
	if last := mainStatus(got).LastTerminationState.Terminated; last == nil || last.ExitCode != 1 {
		t.Errorf("lastState = %+v, want terminated with exit code 1", mainStatus(got).LastTerminationState)
	}
	second.exit(0)
	got = ta.waitPod(t, "p", phaseIs(corev1.PodSucceeded))
	if cs := mainStatus(got); cs.RestartCount != 1 || cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 {
		t.Errorf("container status = %+v, want terminated 0 after one restart", cs)
	}
	for _, ph := range phasesWritten(ta, "p") {
		if ph == corev1.PodFailed {
			t.Errorf("phases written %v: the pod was Failed on its way", phasesWritten(ta, "p"))
			break
		}
	}
}

func TestContainerRestartRules(t *testing.T) {
	cases := map[string]struct {
		// setup
		podPolicy       corev1.RestartPolicy
		containerPolicy corev1.ContainerRestartPolicy
		rules           []corev1.ContainerRestartRule
		exitCode        int32
		// want
		wantRestart bool
	}{
		"rule In matches in a Never pod":        {podPolicy: corev1.RestartPolicyNever, containerPolicy: corev1.ContainerRestartPolicyNever, rules: []corev1.ContainerRestartRule{exitCodesRule(corev1.ContainerRestartRuleOnExitCodesOpIn, 42)}, exitCode: 42, wantRestart: true},
		"rule In misses, container Never fails": {podPolicy: corev1.RestartPolicyNever, containerPolicy: corev1.ContainerRestartPolicyNever, rules: []corev1.ContainerRestartRule{exitCodesRule(corev1.ContainerRestartRuleOnExitCodesOpIn, 42)}, exitCode: 1},
		"container Never in an Always pod":      {podPolicy: corev1.RestartPolicyAlways, containerPolicy: corev1.ContainerRestartPolicyNever, exitCode: 1},
		"container Always in a Never pod":       {podPolicy: corev1.RestartPolicyNever, containerPolicy: corev1.ContainerRestartPolicyAlways, exitCode: 0, wantRestart: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			w := builder.MakePod("p", "ns").UID("u1").RestartPolicy(tc.podPolicy).ContainerRestartPolicy(tc.containerPolicy)
			for _, r := range tc.rules {
				w = w.ContainerRestartRule(r.Action, r.ExitCodes.Operator, r.ExitCodes.Values...)
			}
			ta, rt := startAgentWithFake(t, w.Obj())
			rt.attempt(t, "main", 0).exit(tc.exitCode)
			if !tc.wantRestart {
				got := ta.waitPod(t, "p", func(p *corev1.Pod) bool { return status.IsTerminalPhase(p.Status.Phase) })
				want := corev1.PodFailed
				if tc.exitCode == 0 {
					want = corev1.PodSucceeded
				}
				if got.Status.Phase != want || rt.count("main") != 1 {
					t.Errorf("phase %s after %d attempts, want %s after 1", got.Status.Phase, rt.count("main"), want)
				}
				return
			}
			rt.attempt(t, "main", 1).exit(tc.exitCode)
			// The second restart waits out the 10s back-off, as CrashLoopBackOff.
			got := ta.waitPod(t, "p", func(p *corev1.Pod) bool {
				w := mainStatus(p).State.Waiting
				return w != nil && w.Reason == lifecycle.ReasonCrashLoopBackOff
			})
			if got.Status.Phase != corev1.PodRunning {
				t.Errorf("phase = %s in back-off, want Running", got.Status.Phase)
			}
			ta.stepUntil(t, time.Second, func() bool { return rt.count("main") > 2 })
			got = ta.waitPod(t, "p", func(p *corev1.Pod) bool { return mainStatus(p).RestartCount == 2 && mainStatus(p).State.Running != nil })
			if got.Status.Phase != corev1.PodRunning {
				t.Errorf("phase = %s, want Running", got.Status.Phase)
			}
		})
	}
}

func TestInitContainerRestartPolicyInANeverPod(t *testing.T) {
	pod := builder.MakePod("p", "ns").UID("u1").RestartPolicy(corev1.RestartPolicyNever).InitContainer("setup", "true").Obj()
	pod.Spec.InitContainers[0].RestartPolicy = ptr.To(corev1.ContainerRestartPolicyOnFailure)
	ta, rt := startAgentWithFake(t, pod)
	rt.attempt(t, "setup", 0).exit(3)
	rt.attempt(t, "setup", 1).exit(0)
	rt.attempt(t, "main", 0).exit(0)
	got := ta.waitPod(t, "p", phaseIs(corev1.PodSucceeded))
	if s, _ := initStatus(got, "setup"); s.RestartCount != 1 || s.LastTerminationState.Terminated == nil || s.LastTerminationState.Terminated.ExitCode != 3 {
		t.Errorf("init container status = %+v, want one restart after exit 3", s)
	}
}

func TestAgentRestartRestoresUnderTheContainersPolicy(t *testing.T) {
	pod := builder.MakePod("p", "ns").UID("u1").NodeName(testNode).RestartPolicy(corev1.RestartPolicyNever).
		ContainerRestartPolicy(corev1.ContainerRestartPolicyOnFailure).Obj()
	pod.Status = corev1.PodStatus{
		Phase:     corev1.PodRunning,
		StartTime: ptr.To(metav1.NewTime(t0.Add(-time.Minute))),
		ContainerStatuses: []corev1.ContainerStatus{{
			Name:  "main",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(t0.Add(-time.Minute))}},
		}},
	}
	ta, rt := startAgentWithFake(t, pod)
	rt.attempt(t, "main", 0)
	got := ta.waitPod(t, "p", func(p *corev1.Pod) bool { return mainStatus(p).State.Running != nil && mainStatus(p).RestartCount == 1 })
	if last := mainStatus(got).LastTerminationState.Terminated; last == nil || last.Reason != lifecycle.ReasonContainerStatusUnknown {
		t.Errorf("lastState = %+v, want the lost attempt", mainStatus(got).LastTerminationState)
	}
	if got.Status.Phase != corev1.PodRunning {
		t.Errorf("phase = %s, want Running", got.Status.Phase)
	}
}
