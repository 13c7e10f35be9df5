package nodeagent

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/lifecycle"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/podconfig"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

var t0 = time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)

func exited(code int32) *lifecycle.AttemptResult {
	return &lifecycle.AttemptResult{Result: runtime.Result{ExitCode: code, Reason: runtime.ReasonFor(code), StartedAt: t0, FinishedAt: t0.Add(time.Second)}}
}

func TestPodPhase(t *testing.T) {
	running := containerView{name: "c", kind: lifecycle.KindMain, running: true, started: true, ready: true, everRan: true}
	waiting := containerView{name: "c", kind: lifecycle.KindMain}
	succeeded := containerView{name: "c", kind: lifecycle.KindMain, last: exited(0), final: true, everRan: true}
	failed := containerView{name: "c", kind: lifecycle.KindMain, last: exited(1), final: true, everRan: true}
	restarting := containerView{name: "c", kind: lifecycle.KindMain, last: exited(1), everRan: true}
	initOf := func(v containerView) containerView { v.kind = lifecycle.KindInit; return v }
	sidecarOf := func(v containerView) containerView { v.kind = lifecycle.KindSidecar; return v }
	unstarted := containerView{name: "s", kind: lifecycle.KindSidecar, running: true, everRan: true}
	killed := containerView{name: "s", kind: lifecycle.KindSidecar, last: &lifecycle.AttemptResult{Result: runtime.Result{ExitCode: 143, Signal: 15, Reason: "Error"}}, final: true, everRan: true}
	cases := map[string]struct {
		view podView
		want corev1.PodPhase
	}{
		"nothing started":              {view: podView{containers: []containerView{waiting}}, want: corev1.PodPending},
		"init running":                 {view: podView{inits: []containerView{initOf(running)}, containers: []containerView{waiting}}, want: corev1.PodPending},
		"init restarting":              {view: podView{inits: []containerView{initOf(restarting)}, containers: []containerView{waiting}}, want: corev1.PodPending},
		"init failed for good":         {view: podView{inits: []containerView{initOf(failed)}, containers: []containerView{waiting}}, want: corev1.PodFailed},
		"init done, container running": {view: podView{inits: []containerView{initOf(succeeded)}, containers: []containerView{running}}, want: corev1.PodRunning},
		"one running one not started":  {view: podView{containers: []containerView{running, waiting}}, want: corev1.PodPending},
		"one running one succeeded":    {view: podView{containers: []containerView{running, succeeded}}, want: corev1.PodRunning},
		"all succeeded":                {view: podView{containers: []containerView{succeeded, succeeded}}, want: corev1.PodSucceeded},
		"one failed for good":          {view: podView{containers: []containerView{succeeded, failed}}, want: corev1.PodFailed},
		"restarting":                   {view: podView{containers: []containerView{restarting}}, want: corev1.PodRunning},
		"stopped while restarting":     {view: podView{terminal: true, containers: []containerView{restarting}}, want: corev1.PodFailed},
		"stopped before start":         {view: podView{terminal: true, containers: []containerView{waiting}}, want: corev1.PodFailed},
		"stopped during init":          {view: podView{terminal: true, inits: []containerView{initOf(waiting)}, containers: []containerView{waiting}}, want: corev1.PodFailed},
		// Sidecars, as getPhase counts them.
		"sidecar not started yet":             {view: podView{inits: []containerView{sidecarOf(waiting)}, containers: []containerView{waiting}}, want: corev1.PodPending},
		"sidecar waiting for its probe":       {view: podView{inits: []containerView{unstarted}, containers: []containerView{waiting}}, want: corev1.PodPending},
		"sidecar started, main not yet":       {view: podView{inits: []containerView{sidecarOf(running)}, containers: []containerView{waiting}}, want: corev1.PodPending},
		"sidecar and main running":            {view: podView{inits: []containerView{sidecarOf(running)}, containers: []containerView{running}}, want: corev1.PodRunning},
		"main done, sidecar still running":    {view: podView{inits: []containerView{sidecarOf(running)}, containers: []containerView{succeeded}}, want: corev1.PodRunning},
		"main succeeded, sidecar killed":      {view: podView{inits: []containerView{killed}, containers: []containerView{succeeded}}, want: corev1.PodSucceeded},
		"main failed, sidecar killed":         {view: podView{inits: []containerView{killed}, containers: []containerView{failed}}, want: corev1.PodFailed},
		"sidecar restarting after init":       {view: podView{inits: []containerView{sidecarOf(restarting)}, containers: []containerView{running}}, want: corev1.PodRunning},
		"sidecar probing again after init":    {view: podView{inits: []containerView{unstarted}, containers: []containerView{running}}, want: corev1.PodRunning},
		"init failed, sidecar still stopping": {view: podView{inits: []containerView{sidecarOf(running), initOf(failed)}, containers: []containerView{waiting}}, want: corev1.PodFailed},
		"stopped after success restarts":      {view: podView{terminal: true, containers: []containerView{{name: "c", last: exited(0)}}}, want: corev1.PodSucceeded},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := podPhase(tc.view); got != tc.want {
				t.Errorf("podPhase() = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestBuildStatus(t *testing.T) {
	earlier := metav1.NewTime(t0.Add(-time.Hour))
	pod := &corev1.Pod{Status: corev1.PodStatus{
		Phase:    corev1.PodPending,
		QOSClass: corev1.PodQOSBestEffort,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: earlier},
			{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "X", LastTransitionTime: earlier},
		},
	}}
	now := t0.Add(2 * time.Second)
	cases := map[string]struct {
		view podView
		want corev1.PodStatus
	}{
		"running": {
			view: podView{startTime: t0, containers: []containerView{{name: "main", image: "busybox", kind: lifecycle.KindMain, running: true, started: true, ready: true, everRan: true, startedAt: t0, containerID: "process://42"}}},
			want: corev1.PodStatus{
				Phase: corev1.PodRunning, QOSClass: corev1.PodQOSBestEffort,
				HostIP: podconfig.NodeIP, HostIPs: []corev1.HostIP{{IP: podconfig.NodeIP}}, PodIP: podconfig.NodeIP, PodIPs: []corev1.PodIP{{IP: podconfig.NodeIP}},
				StartTime: ptr.To(metav1.NewTime(t0)),
				Conditions: []corev1.PodCondition{
					{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: earlier},
					{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "X", LastTransitionTime: earlier},
					{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now)},
					{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now)},
					{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now)},
					{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now)},
				},
				ContainerStatuses: []corev1.ContainerStatus{{
					Name: "main", Image: "busybox", ContainerID: "process://42", Ready: true, Started: ptr.To(true),
					State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(t0)}},
				}},
			},
		},
		"failed with deadline": {
			view: podView{startTime: t0, terminal: true, reason: lifecycle.ReasonDeadlineExceeded, message: lifecycle.MessageDeadlineExceeded,
				containers: []containerView{{name: "main", image: "busybox", kind: lifecycle.KindMain, everRan: true, containerID: "process://42", last: &lifecycle.AttemptResult{ContainerID: "process://42", Result: runtime.Result{ExitCode: 143, Signal: 15, Reason: "Error", StartedAt: t0, FinishedAt: now}}, final: true}}},
			want: corev1.PodStatus{
				Phase: corev1.PodFailed, QOSClass: corev1.PodQOSBestEffort, Reason: lifecycle.ReasonDeadlineExceeded, Message: lifecycle.MessageDeadlineExceeded,
				HostIP: podconfig.NodeIP, HostIPs: []corev1.HostIP{{IP: podconfig.NodeIP}}, PodIP: podconfig.NodeIP, PodIPs: []corev1.PodIP{{IP: podconfig.NodeIP}},
				StartTime: ptr.To(metav1.NewTime(t0)),
				Conditions: []corev1.PodCondition{
					{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: earlier},
					{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "X", LastTransitionTime: earlier},
					{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(now)},
					{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now)},
					{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, Reason: "PodCompleted", LastTransitionTime: metav1.NewTime(now)},
					{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "PodCompleted", LastTransitionTime: metav1.NewTime(now)},
				},
				ContainerStatuses: []corev1.ContainerStatus{{
					Name: "main", Image: "busybox", ContainerID: "process://42", Started: ptr.To(false),
					State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
						ExitCode: 143, Signal: 15, Reason: "Error", StartedAt: metav1.NewTime(t0), FinishedAt: metav1.NewTime(now), ContainerID: "process://42"}},
				}},
			},
		},
		"crash loop back-off while init waits": {
			view: podView{startTime: t0,
				inits:      []containerView{{name: "init", kind: lifecycle.KindInit, everRan: true, restartCount: 1, last: exited(1), waitReason: lifecycle.ReasonCrashLoopBackOff, waitMessage: "back-off 10s"}},
				containers: []containerView{{name: "main", kind: lifecycle.KindMain, waitReason: lifecycle.ReasonPodInitializing}}},
			want: corev1.PodStatus{
				Phase: corev1.PodPending, QOSClass: corev1.PodQOSBestEffort,
				HostIP: podconfig.NodeIP, HostIPs: []corev1.HostIP{{IP: podconfig.NodeIP}}, PodIP: podconfig.NodeIP, PodIPs: []corev1.PodIP{{IP: podconfig.NodeIP}},
				StartTime: ptr.To(metav1.NewTime(t0)),
				Conditions: []corev1.PodCondition{
					{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: earlier},
					{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "X", LastTransitionTime: earlier},
					{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now)},
					{Type: corev1.PodInitialized, Status: corev1.ConditionFalse, Reason: "ContainersNotInitialized", Message: "containers with incomplete status: [init]", LastTransitionTime: metav1.NewTime(now)},
					{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady", Message: "containers with unready status: [main]", LastTransitionTime: metav1.NewTime(now)},
					{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady", Message: "containers with unready status: [main]", LastTransitionTime: metav1.NewTime(now)},
				},
				InitContainerStatuses: []corev1.ContainerStatus{{
					Name: "init", RestartCount: 1, Started: ptr.To(false),
					State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: lifecycle.ReasonCrashLoopBackOff, Message: "back-off 10s"}},
					LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", StartedAt: metav1.NewTime(t0), FinishedAt: metav1.NewTime(t0.Add(time.Second))}},
				}},
				ContainerStatuses: []corev1.ContainerStatus{{
					Name: "main", Started: ptr.To(false),
					State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: lifecycle.ReasonPodInitializing}},
				}},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := buildStatus(pod, tc.view, now)
			if diff := cmp.Diff(&tc.want, got); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
}
