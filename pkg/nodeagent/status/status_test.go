package status

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/lifecycle"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/podconfig"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

func exited(code int32) *lifecycle.AttemptResult {
	return &lifecycle.AttemptResult{Result: runtime.Result{ExitCode: code, Reason: runtime.ReasonFor(code), StartedAt: t0, FinishedAt: t0.Add(time.Second)}}
}

func TestPodPhase(t *testing.T) {
	running := ContainerView{Name: "c", Kind: lifecycle.KindMain, Running: true, Started: true, Ready: true, EverRan: true}
	waiting := ContainerView{Name: "c", Kind: lifecycle.KindMain}
	succeeded := ContainerView{Name: "c", Kind: lifecycle.KindMain, Last: exited(0), Final: true, EverRan: true}
	failed := ContainerView{Name: "c", Kind: lifecycle.KindMain, Last: exited(1), Final: true, EverRan: true}
	restarting := ContainerView{Name: "c", Kind: lifecycle.KindMain, Last: exited(1), EverRan: true}
	initOf := func(v ContainerView) ContainerView { v.Kind = lifecycle.KindInit; return v }
	sidecarOf := func(v ContainerView) ContainerView { v.Kind = lifecycle.KindSidecar; return v }
	unstarted := ContainerView{Name: "s", Kind: lifecycle.KindSidecar, Running: true, EverRan: true}
	killed := ContainerView{Name: "s", Kind: lifecycle.KindSidecar, Last: &lifecycle.AttemptResult{Result: runtime.Result{ExitCode: 143, Signal: 15, Reason: "Error"}}, Final: true, EverRan: true}
	cases := map[string]struct {
		view PodView
		want corev1.PodPhase
	}{
		"nothing started":              {view: PodView{Containers: []ContainerView{waiting}}, want: corev1.PodPending},
		"init running":                 {view: PodView{Inits: []ContainerView{initOf(running)}, Containers: []ContainerView{waiting}}, want: corev1.PodPending},
		"init restarting":              {view: PodView{Inits: []ContainerView{initOf(restarting)}, Containers: []ContainerView{waiting}}, want: corev1.PodPending},
		"init failed for good":         {view: PodView{Inits: []ContainerView{initOf(failed)}, Containers: []ContainerView{waiting}}, want: corev1.PodFailed},
		"init done, container running": {view: PodView{Inits: []ContainerView{initOf(succeeded)}, Containers: []ContainerView{running}}, want: corev1.PodRunning},
		"one running one not started":  {view: PodView{Containers: []ContainerView{running, waiting}}, want: corev1.PodPending},
		"one running one succeeded":    {view: PodView{Containers: []ContainerView{running, succeeded}}, want: corev1.PodRunning},
		"all succeeded":                {view: PodView{Containers: []ContainerView{succeeded, succeeded}}, want: corev1.PodSucceeded},
		"one failed for good":          {view: PodView{Containers: []ContainerView{succeeded, failed}}, want: corev1.PodFailed},
		"restarting":                   {view: PodView{Containers: []ContainerView{restarting}}, want: corev1.PodRunning},
		"stopped while restarting":     {view: PodView{Terminal: true, Containers: []ContainerView{restarting}}, want: corev1.PodFailed},
		"stopped before start":         {view: PodView{Terminal: true, Containers: []ContainerView{waiting}}, want: corev1.PodFailed},
		"stopped during init":          {view: PodView{Terminal: true, Inits: []ContainerView{initOf(waiting)}, Containers: []ContainerView{waiting}}, want: corev1.PodFailed},
		// Sidecars, as getPhase counts them.
		"sidecar not started yet":             {view: PodView{Inits: []ContainerView{sidecarOf(waiting)}, Containers: []ContainerView{waiting}}, want: corev1.PodPending},
		"sidecar waiting for its probe":       {view: PodView{Inits: []ContainerView{unstarted}, Containers: []ContainerView{waiting}}, want: corev1.PodPending},
		"sidecar started, main not yet":       {view: PodView{Inits: []ContainerView{sidecarOf(running)}, Containers: []ContainerView{waiting}}, want: corev1.PodPending},
		"sidecar and main running":            {view: PodView{Inits: []ContainerView{sidecarOf(running)}, Containers: []ContainerView{running}}, want: corev1.PodRunning},
		"main done, sidecar still running":    {view: PodView{Inits: []ContainerView{sidecarOf(running)}, Containers: []ContainerView{succeeded}}, want: corev1.PodRunning},
		"main succeeded, sidecar killed":      {view: PodView{Inits: []ContainerView{killed}, Containers: []ContainerView{succeeded}}, want: corev1.PodSucceeded},
		"main failed, sidecar killed":         {view: PodView{Inits: []ContainerView{killed}, Containers: []ContainerView{failed}}, want: corev1.PodFailed},
		"sidecar restarting after init":       {view: PodView{Inits: []ContainerView{sidecarOf(restarting)}, Containers: []ContainerView{running}}, want: corev1.PodRunning},
		"sidecar probing again after init":    {view: PodView{Inits: []ContainerView{unstarted}, Containers: []ContainerView{running}}, want: corev1.PodRunning},
		"init failed, sidecar still stopping": {view: PodView{Inits: []ContainerView{sidecarOf(running), initOf(failed)}, Containers: []ContainerView{waiting}}, want: corev1.PodFailed},
		"stopped after success restarts":      {view: PodView{Terminal: true, Containers: []ContainerView{{Name: "c", Last: exited(0)}}}, want: corev1.PodSucceeded},
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
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Generation: 3}, Status: corev1.PodStatus{
		Phase:    corev1.PodPending,
		QOSClass: corev1.PodQOSBestEffort,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: earlier},
			{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "X", LastTransitionTime: earlier},
		},
	}}
	now := t0.Add(2 * time.Second)
	// A container the runtime knows reports its resources as allocated
	// (no resize: its spec's); one that never ran reports none.
	res := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
	}
	cases := map[string]struct {
		view PodView
		want corev1.PodStatus
	}{
		"running": {
			view: PodView{StartTime: t0, Containers: []ContainerView{{Name: "main", Image: "busybox", Kind: lifecycle.KindMain, Running: true, Started: true, Ready: true, EverRan: true, StartedAt: t0, ContainerID: "process://42",
				User:      &runtime.ContainerUser{UID: 1000, GID: 1000, SupplementalGroups: []int64{1000, 50000, 60000}},
				Resources: res, Allocated: res.Requests}}},
			want: corev1.PodStatus{
				Phase: corev1.PodRunning, QOSClass: corev1.PodQOSBestEffort,
				HostIP: podconfig.NodeIP, HostIPs: []corev1.HostIP{{IP: podconfig.NodeIP}}, PodIP: podconfig.NodeIP, PodIPs: []corev1.PodIP{{IP: podconfig.NodeIP}},
				StartTime: ptr.To(metav1.NewTime(t0)),
				Conditions: []corev1.PodCondition{
					{Type: corev1.PodScheduled, ObservedGeneration: 3, Status: corev1.ConditionTrue, LastTransitionTime: earlier},
					{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "X", LastTransitionTime: earlier},
					{Type: corev1.PodReadyToStartContainers, ObservedGeneration: 3, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now)},
					{Type: corev1.PodInitialized, ObservedGeneration: 3, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now)},
					{Type: corev1.ContainersReady, ObservedGeneration: 3, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now)},
					{Type: corev1.PodReady, ObservedGeneration: 3, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now)},
				},
				ContainerStatuses: []corev1.ContainerStatus{{
					Name: "main", Image: "busybox", ContainerID: "process://42", Ready: true, Started: ptr.To(true),
					State:              corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(t0)}},
					User:               &corev1.ContainerUser{Linux: &corev1.LinuxContainerUser{UID: 1000, GID: 1000, SupplementalGroups: []int64{1000, 50000, 60000}}},
					Resources:          &res,
					AllocatedResources: res.Requests,
				}},
			},
		},
		"failed with deadline": {
			view: PodView{StartTime: t0, Terminal: true, Reason: lifecycle.ReasonDeadlineExceeded, Message: lifecycle.MessageDeadlineExceeded,
				Containers: []ContainerView{{Name: "main", Image: "busybox", Kind: lifecycle.KindMain, EverRan: true, ContainerID: "process://42", Last: &lifecycle.AttemptResult{ContainerID: "process://42", Result: runtime.Result{ExitCode: 143, Signal: 15, Reason: "Error", StartedAt: t0, FinishedAt: now}}, Final: true}}},
			want: corev1.PodStatus{
				Phase: corev1.PodFailed, QOSClass: corev1.PodQOSBestEffort, Reason: lifecycle.ReasonDeadlineExceeded, Message: lifecycle.MessageDeadlineExceeded,
				HostIP: podconfig.NodeIP, HostIPs: []corev1.HostIP{{IP: podconfig.NodeIP}}, PodIP: podconfig.NodeIP, PodIPs: []corev1.PodIP{{IP: podconfig.NodeIP}},
				StartTime: ptr.To(metav1.NewTime(t0)),
				Conditions: []corev1.PodCondition{
					{Type: corev1.PodScheduled, ObservedGeneration: 3, Status: corev1.ConditionTrue, LastTransitionTime: earlier},
					{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "X", LastTransitionTime: earlier},
					{Type: corev1.PodReadyToStartContainers, ObservedGeneration: 3, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(now)},
					{Type: corev1.PodInitialized, ObservedGeneration: 3, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now)},
					{Type: corev1.ContainersReady, ObservedGeneration: 3, Status: corev1.ConditionFalse, Reason: "PodCompleted", LastTransitionTime: metav1.NewTime(now)},
					{Type: corev1.PodReady, ObservedGeneration: 3, Status: corev1.ConditionFalse, Reason: "PodCompleted", LastTransitionTime: metav1.NewTime(now)},
				},
				ContainerStatuses: []corev1.ContainerStatus{{
					Name: "main", Image: "busybox", ContainerID: "process://42", Started: ptr.To(false),
					State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
						ExitCode: 143, Signal: 15, Reason: "Error", StartedAt: metav1.NewTime(t0), FinishedAt: metav1.NewTime(now), ContainerID: "process://42"}},
					Resources: &corev1.ResourceRequirements{},
				}},
			},
		},
		"crash loop back-off while init waits": {
			view: PodView{StartTime: t0,
				Inits:      []ContainerView{{Name: "init", Kind: lifecycle.KindInit, EverRan: true, RestartCount: 1, Last: exited(1), WaitReason: lifecycle.ReasonCrashLoopBackOff, WaitMessage: "back-off 10s"}},
				Containers: []ContainerView{{Name: "main", Kind: lifecycle.KindMain, WaitReason: lifecycle.ReasonPodInitializing}}},
			want: corev1.PodStatus{
				Phase: corev1.PodPending, QOSClass: corev1.PodQOSBestEffort,
				HostIP: podconfig.NodeIP, HostIPs: []corev1.HostIP{{IP: podconfig.NodeIP}}, PodIP: podconfig.NodeIP, PodIPs: []corev1.PodIP{{IP: podconfig.NodeIP}},
				StartTime: ptr.To(metav1.NewTime(t0)),
				Conditions: []corev1.PodCondition{
					{Type: corev1.PodScheduled, ObservedGeneration: 3, Status: corev1.ConditionTrue, LastTransitionTime: earlier},
					{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "X", LastTransitionTime: earlier},
					{Type: corev1.PodReadyToStartContainers, ObservedGeneration: 3, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now)},
					{Type: corev1.PodInitialized, ObservedGeneration: 3, Status: corev1.ConditionFalse, Reason: "ContainersNotInitialized", Message: "containers with incomplete status: [init]", LastTransitionTime: metav1.NewTime(now)},
					{Type: corev1.ContainersReady, ObservedGeneration: 3, Status: corev1.ConditionFalse, Reason: "ContainersNotReady", Message: "containers with unready status: [main]", LastTransitionTime: metav1.NewTime(now)},
					{Type: corev1.PodReady, ObservedGeneration: 3, Status: corev1.ConditionFalse, Reason: "ContainersNotReady", Message: "containers with unready status: [main]", LastTransitionTime: metav1.NewTime(now)},
				},
				InitContainerStatuses: []corev1.ContainerStatus{{
					Name: "init", RestartCount: 1, Started: ptr.To(false),
					State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: lifecycle.ReasonCrashLoopBackOff, Message: "back-off 10s"}},
					LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", StartedAt: metav1.NewTime(t0), FinishedAt: metav1.NewTime(t0.Add(time.Second))}},
					Resources:            &corev1.ResourceRequirements{},
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
			got := BuildStatus(pod, tc.view, now)
			if diff := cmp.Diff(&tc.want, got); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
}

// t0 is the tests' fake now.
var t0 = time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)

func TestDisruptedPhase(t *testing.T) {
	exited := func(code int32, final bool) ContainerView {
		return ContainerView{Kind: lifecycle.KindMain, Last: &lifecycle.AttemptResult{}, Final: final, EverRan: true}.withCode(code)
	}
	cases := map[string]struct {
		v    PodView
		want corev1.PodPhase
	}{
		"killed by the shutdown":               {PodView{Containers: []ContainerView{exited(143, false)}, Terminal: true}, corev1.PodFailed},
		"exited 0 on SIGTERM":                  {PodView{Containers: []ContainerView{exited(0, false)}, Terminal: true}, corev1.PodFailed},
		"had succeeded before the shutdown":    {PodView{Containers: []ContainerView{exited(0, true)}, Terminal: true}, corev1.PodSucceeded},
		"never started":                        {PodView{Containers: []ContainerView{{Kind: lifecycle.KindMain, Final: true}}, Terminal: true}, corev1.PodFailed},
		"one of two succeeded, one was killed": {PodView{Containers: []ContainerView{exited(0, true), exited(137, false)}, Terminal: true}, corev1.PodFailed},
	}
	for name, tc := range cases {
		if got := DisruptedPhase(tc.v); got != tc.want {
			t.Errorf("%s: %s, want %s", name, got, tc.want)
		}
	}
}

// withCode sets the exit code of the view's last attempt.
func (c ContainerView) withCode(code int32) ContainerView {
	last := *c.Last
	last.ExitCode = code
	c.Last = &last
	return c
}

// TestCompletedInitContainerReady: a regular init container that exited 0
// is reported ready, as the kubelet's prober manager reports it; one that
// failed, or a sidecar that stopped, is not.
func TestCompletedInitContainerReady(t *testing.T) {
	pod := &corev1.Pod{}
	for _, tc := range []struct {
		name string
		init ContainerView
		want bool
	}{
		{name: "completed", init: ContainerView{Name: "init", Kind: lifecycle.KindInit, Last: exited(0), Final: true, EverRan: true}, want: true},
		{name: "failed", init: ContainerView{Name: "init", Kind: lifecycle.KindInit, Last: exited(1), Final: true, EverRan: true}},
		{name: "stopped sidecar", init: ContainerView{Name: "init", Kind: lifecycle.KindSidecar, Last: exited(0), Final: true, EverRan: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := PodView{StartTime: t0, Inits: []ContainerView{tc.init},
				Containers: []ContainerView{{Name: "main", Kind: lifecycle.KindMain, Running: true, Started: true, Ready: true, EverRan: true, StartedAt: t0}}}
			st := BuildStatus(pod, v, t0)
			if len(st.InitContainerStatuses) != 1 || st.InitContainerStatuses[0].Ready != tc.want {
				t.Errorf("init container statuses %+v, want one with ready %v", st.InitContainerStatuses, tc.want)
			}
		})
	}
}

// TestDeadlineExceededFails: a pod stopped by activeDeadlineSeconds is
// Failed even when its containers exited 0 on SIGTERM, as the kubelet
// reports it.
func TestDeadlineExceededFails(t *testing.T) {
	v := PodView{StartTime: t0, Terminal: true, Reason: lifecycle.ReasonDeadlineExceeded, Message: lifecycle.MessageDeadlineExceeded,
		Containers: []ContainerView{{Name: "main", Kind: lifecycle.KindMain, EverRan: true, Last: exited(0), Final: true}}}
	st := BuildStatus(&corev1.Pod{}, v, t0)
	if st.Phase != corev1.PodFailed || st.Reason != lifecycle.ReasonDeadlineExceeded {
		t.Errorf("phase %s reason %q, want Failed and %s", st.Phase, st.Reason, lifecycle.ReasonDeadlineExceeded)
	}
}

// TestVolumeMountsInStatus: each container status lists the container's
// volume mounts, as the kubelet reports them.
func TestVolumeMountsInStatus(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init", VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
		Containers: []corev1.Container{{Name: "main", VolumeMounts: []corev1.VolumeMount{
			{Name: "cfg", MountPath: "/cfg", ReadOnly: true, RecursiveReadOnly: ptr.To(corev1.RecursiveReadOnlyIfPossible)}}}},
	}}
	v := PodView{StartTime: t0, RecursiveReadOnly: true,
		Inits:      []ContainerView{{Name: "init", Kind: lifecycle.KindInit, Last: exited(0), Final: true, EverRan: true}},
		Containers: []ContainerView{{Name: "main", Kind: lifecycle.KindMain, Running: true, Started: true, Ready: true, EverRan: true, StartedAt: t0}}}
	st := BuildStatus(pod, v, t0)
	if diff := cmp.Diff([]corev1.VolumeMountStatus{{Name: "data", MountPath: "/data"}}, st.InitContainerStatuses[0].VolumeMounts); diff != "" {
		t.Errorf("init container (-want +got):\n%s", diff)
	}
	want := []corev1.VolumeMountStatus{{Name: "cfg", MountPath: "/cfg", ReadOnly: true, RecursiveReadOnly: ptr.To(corev1.RecursiveReadOnlyEnabled)}}
	if diff := cmp.Diff(want, st.ContainerStatuses[0].VolumeMounts); diff != "" {
		t.Errorf("container (-want +got):\n%s", diff)
	}
}

// TestAllContainersRestartingCondition: on a pod with a
// RestartAllContainers rule only, as the kubelet's
// GenerateAllContainersRestartingCondition.
func TestAllContainersRestartingCondition(t *testing.T) {
	now := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	rule := corev1.ContainerRestartRule{Action: corev1.ContainerRestartRuleActionRestartAllContainers,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", RestartPolicyRules: []corev1.ContainerRestartRule{rule}}}}}
	running := ContainerView{Name: "c", Kind: lifecycle.KindMain, Running: true, EverRan: true}
	waiting := ContainerView{Name: "c", Kind: lifecycle.KindMain, EverRan: true, RestartCount: 1, WaitReason: lifecycle.ReasonRestartingAllContainers,
		Last: &lifecycle.AttemptResult{Result: runtime.Result{ExitCode: 137, Reason: lifecycle.ReasonRestartingAllContainers}}}
	done := ContainerView{Name: "c", Kind: lifecycle.KindMain, EverRan: true, Final: true, Last: &lifecycle.AttemptResult{}}
	cases := []struct {
		name        string
		pod         *corev1.Pod
		view        PodView
		want        *corev1.PodCondition
		wantPhase   corev1.PodPhase
		wantWaiting string
	}{
		{name: "no rule, no condition", pod: &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}, view: PodView{Containers: []ContainerView{running}}, wantPhase: corev1.PodRunning},
		{name: "running", pod: pod, view: PodView{Containers: []ContainerView{running}}, want: &corev1.PodCondition{Status: corev1.ConditionFalse}, wantPhase: corev1.PodRunning},
		{name: "restarting: the pod still runs", pod: pod, view: PodView{Containers: []ContainerView{waiting}, RestartingAll: true},
			want:      &corev1.PodCondition{Status: corev1.ConditionTrue, Reason: "RestartAllContainersStarted", Message: "container exited with restart policy rule"},
			wantPhase: corev1.PodRunning, wantWaiting: lifecycle.ReasonRestartingAllContainers},
		{name: "succeeded", pod: pod, view: PodView{Containers: []ContainerView{done}}, want: &corev1.PodCondition{Status: corev1.ConditionFalse, Reason: "PodCompleted"}, wantPhase: corev1.PodSucceeded},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := BuildStatus(tc.pod, tc.view, now)
			var got *corev1.PodCondition
			for i := range st.Conditions {
				if st.Conditions[i].Type == corev1.AllContainersRestarting {
					got = &st.Conditions[i]
				}
			}
			if tc.want != nil {
				tc.want.Type, tc.want.LastTransitionTime = corev1.AllContainersRestarting, metav1.NewTime(now)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("condition (-want +got):\n%s", diff)
			}
			if st.Phase != tc.wantPhase {
				t.Errorf("phase %s, want %s", st.Phase, tc.wantPhase)
			}
			if w := st.ContainerStatuses[0].State.Waiting; tc.wantWaiting != "" && (w == nil || w.Reason != tc.wantWaiting || st.ContainerStatuses[0].RestartCount != 1) {
				t.Errorf("container status %+v, want waiting %s, one restart", st.ContainerStatuses[0], tc.wantWaiting)
			}
		})
	}
}
