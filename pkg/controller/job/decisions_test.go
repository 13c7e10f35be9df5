package job

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/test/builder"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func TestWantActive(t *testing.T) {
	cases := map[string]struct {
		completions                    *int32
		parallelism, succeeded, active int32
		want                           int32
	}{
		"work queue before success":   {parallelism: 3, want: 3},
		"work queue after success":    {parallelism: 3, succeeded: 1, active: 2, want: 2},
		"remaining below parallelism": {completions: ptr.To[int32](5), parallelism: 3, succeeded: 3, want: 2},
		"parallelism caps":            {completions: ptr.To[int32](10), parallelism: 3, succeeded: 1, want: 3},
		"over-succeeded":              {completions: ptr.To[int32](2), parallelism: 3, succeeded: 4, want: 0},
		"zero parallelism":            {completions: ptr.To[int32](2), parallelism: 0, want: 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := wantActive(tc.completions, tc.parallelism, tc.succeeded, tc.active); got != tc.want {
				t.Errorf("wantActive = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestBackoffDelay(t *testing.T) {
	cases := map[string]struct {
		failures int32
		want     time.Duration
	}{
		"none":   {0, 0},
		"first":  {1, 10 * time.Second},
		"second": {2, 20 * time.Second},
		"fourth": {4, 80 * time.Second},
		"capped": {10, 5 * time.Minute},
		"huge":   {1000, 5 * time.Minute},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := backoffDelay(tc.failures, 10*time.Second, 5*time.Minute); got != tc.want {
				t.Errorf("backoffDelay(%d) = %v, want %v", tc.failures, got, tc.want)
			}
		})
	}
}

func TestRemainingBackoff(t *testing.T) {
	last := t0
	cases := map[string]struct {
		record  backoffRecord
		elapsed time.Duration
		want    time.Duration
	}{
		"no failures":         {record: backoffRecord{}, want: 0},
		"just failed":         {record: backoffRecord{1, &last}, elapsed: 0, want: 10 * time.Second},
		"partly waited":       {record: backoffRecord{2, &last}, elapsed: 5 * time.Second, want: 15 * time.Second},
		"waited out":          {record: backoffRecord{2, &last}, elapsed: 21 * time.Second, want: 0},
		"exactly waited":      {record: backoffRecord{1, &last}, elapsed: 10 * time.Second, want: 0},
		"capped at max delay": {record: backoffRecord{30, &last}, elapsed: time.Minute, want: 9 * time.Minute},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := remainingBackoff(tc.record, t0.Add(tc.elapsed), 10*time.Second, 10*time.Minute); got != tc.want {
				t.Errorf("remainingBackoff = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNextBackoffRecord(t *testing.T) {
	finished := func(phase corev1.PodPhase, at time.Duration) *corev1.Pod {
		code := int32(0)
		if phase == corev1.PodFailed {
			code = 1
		}
		return builder.MakePod("p", "ns").Terminated(code, metav1.NewTime(t0.Add(at))).Obj()
	}
	at := func(d time.Duration) *time.Time { x := t0.Add(d); return &x }
	cases := map[string]struct {
		prev      backoffRecord
		succeeded []*corev1.Pod
		failed    []*corev1.Pod
		want      backoffRecord
	}{
		"nothing new keeps": {prev: backoffRecord{2, at(0)}, want: backoffRecord{2, at(0)}},
		"failures add up": {
			prev:   backoffRecord{1, at(0)},
			failed: []*corev1.Pod{finished(corev1.PodFailed, 5*time.Second), finished(corev1.PodFailed, 3*time.Second)},
			want:   backoffRecord{3, at(5 * time.Second)},
		},
		"success resets": {
			prev:      backoffRecord{4, at(0)},
			succeeded: []*corev1.Pod{finished(corev1.PodSucceeded, time.Second)},
			want:      backoffRecord{},
		},
		"only failures after the last success count": {
			prev:      backoffRecord{4, at(0)},
			succeeded: []*corev1.Pod{finished(corev1.PodSucceeded, 10*time.Second)},
			failed:    []*corev1.Pod{finished(corev1.PodFailed, 5*time.Second), finished(corev1.PodFailed, 12*time.Second), finished(corev1.PodFailed, 15*time.Second)},
			want:      backoffRecord{2, at(15 * time.Second)},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := nextBackoffRecord(tc.prev, tc.succeeded, tc.failed)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(backoffRecord{})); diff != "" {
				t.Errorf("nextBackoffRecord (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPodFinishTime(t *testing.T) {
	del := metav1.NewTime(t0.Add(time.Minute))
	cases := map[string]struct {
		pod  *corev1.Pod
		want time.Time
	}{
		"containers": {pod: builder.MakePod("p", "ns").Terminated(1, metav1.NewTime(t0.Add(3*time.Second))).Obj(), want: t0.Add(3 * time.Second)},
		"ready false": {pod: func() *corev1.Pod {
			p := builder.MakePod("p", "ns").Phase(corev1.PodFailed).Obj()
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(t0.Add(7 * time.Second))}}
			return p
		}(), want: t0.Add(7 * time.Second)},
		"deleted": {pod: func() *corev1.Pod {
			p := builder.MakePod("p", "ns").DeletionTimestamp(del).Obj()
			p.DeletionGracePeriodSeconds = ptr.To[int64](30)
			return p
		}(), want: t0.Add(30 * time.Second)},
		"creation": {pod: builder.MakePod("p", "ns").CreationTimestamp(metav1.NewTime(t0)).Obj(), want: t0},
		// A sidecar stopped after the main container finishes later: its
		// finish time is the pod's, as upstream's getFinishTimeFromContainers.
		"sidecar finished last": {pod: withSidecar(builder.MakePod("p", "ns").Terminated(0, metav1.NewTime(t0.Add(3*time.Second))).Obj(), terminatedAt(t0.Add(5*time.Second))), want: t0.Add(5 * time.Second)},
		"sidecar still running": {pod: func() *corev1.Pod {
			p := withSidecar(builder.MakePod("p", "ns").Terminated(0, metav1.NewTime(t0.Add(3*time.Second))).CreationTimestamp(metav1.NewTime(t0)).Obj(), corev1.ContainerState{Running: &corev1.ContainerStateRunning{}})
			return p
		}(), want: t0},
		"only a terminated sidecar reported": {pod: func() *corev1.Pod {
			p := withSidecar(builder.MakePod("p", "ns").CreationTimestamp(metav1.NewTime(t0)).Obj(), terminatedAt(t0.Add(4*time.Second)))
			p.Status.ContainerStatuses = nil
			return p
		}(), want: t0.Add(4 * time.Second)},
		"no status at all": {pod: func() *corev1.Pod {
			p := builder.MakePod("p", "ns").CreationTimestamp(metav1.NewTime(t0)).Obj()
			p.Status.ContainerStatuses = nil
			return p
		}(), want: t0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := podFinishTime(tc.pod); !got.Equal(tc.want) {
				t.Errorf("podFinishTime = %v, want %v", got, tc.want)
			}
		})
	}
}

// withSidecar adds a native sidecar "proxy" in state st to pod.
func withSidecar(pod *corev1.Pod, st corev1.ContainerState) *corev1.Pod {
	pod.Spec.InitContainers = append(pod.Spec.InitContainers, corev1.Container{Name: "proxy", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)})
	pod.Status.InitContainerStatuses = append(pod.Status.InitContainerStatuses, corev1.ContainerStatus{Name: "proxy", State: st})
	return pod
}

// terminatedAt is a terminated container state finished at t.
func terminatedAt(t time.Time) corev1.ContainerState {
	return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 143, FinishedAt: metav1.NewTime(t)}}
}

func TestDeadlineRemaining(t *testing.T) {
	start := metav1.NewTime(t0)
	cases := map[string]struct {
		job      *batchv1.Job
		now      time.Time
		want     time.Duration
		wantSome bool
	}{
		"no deadline":   {job: builder.MakeJob("j", "ns").Status(batchv1.JobStatus{StartTime: &start}).Obj(), now: t0},
		"not started":   {job: builder.MakeJob("j", "ns").ActiveDeadlineSeconds(10).Obj(), now: t0},
		"suspended":     {job: builder.MakeJob("j", "ns").ActiveDeadlineSeconds(10).Suspend(true).Status(batchv1.JobStatus{StartTime: &start}).Obj(), now: t0},
		"time left":     {job: builder.MakeJob("j", "ns").ActiveDeadlineSeconds(10).Status(batchv1.JobStatus{StartTime: &start}).Obj(), now: t0.Add(4 * time.Second), want: 6 * time.Second, wantSome: true},
		"exactly due":   {job: builder.MakeJob("j", "ns").ActiveDeadlineSeconds(10).Status(batchv1.JobStatus{StartTime: &start}).Obj(), now: t0.Add(10 * time.Second), want: 0, wantSome: true},
		"long exceeded": {job: builder.MakeJob("j", "ns").ActiveDeadlineSeconds(10).Status(batchv1.JobStatus{StartTime: &start}).Obj(), now: t0.Add(time.Minute), want: -50 * time.Second, wantSome: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, some := deadlineRemaining(tc.job, tc.now)
			if got != tc.want || some != tc.wantSome {
				t.Errorf("deadlineRemaining = %v, %v; want %v, %v", got, some, tc.want, tc.wantSome)
			}
		})
	}
}

func TestSetCondition(t *testing.T) {
	old := metav1.NewTime(t0)
	now := t0.Add(time.Minute)
	existing := []batchv1.JobCondition{{Type: batchv1.JobSuspended, Status: corev1.ConditionTrue, Reason: reasonSuspended, Message: msgSuspended, LastProbeTime: old, LastTransitionTime: old}}
	cases := map[string]struct {
		list        []batchv1.JobCondition
		status      corev1.ConditionStatus
		reason, msg string
		want        []batchv1.JobCondition
		wantChanged bool
	}{
		"false not added": {status: corev1.ConditionFalse, reason: reasonResumed, msg: msgResumed, want: nil},
		"true added": {status: corev1.ConditionTrue, reason: reasonSuspended, msg: msgSuspended,
			want: []batchv1.JobCondition{*newCondition(batchv1.JobSuspended, corev1.ConditionTrue, reasonSuspended, msgSuspended, now)}, wantChanged: true},
		"unchanged kept": {list: existing, status: corev1.ConditionTrue, reason: reasonSuspended, msg: msgSuspended, want: existing},
		"flipped with new times": {list: existing, status: corev1.ConditionFalse, reason: reasonResumed, msg: msgResumed,
			want: []batchv1.JobCondition{*newCondition(batchv1.JobSuspended, corev1.ConditionFalse, reasonResumed, msgResumed, now)}, wantChanged: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			list := append([]batchv1.JobCondition(nil), tc.list...)
			got, changed := setCondition(list, batchv1.JobSuspended, tc.status, tc.reason, tc.msg, now)
			if changed != tc.wantChanged {
				t.Errorf("changed = %v, want %v", changed, tc.wantChanged)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
		})
	}
}

func TestApplySuspendCondition(t *testing.T) {
	start := metav1.NewTime(t0)
	now := metav1.NewTime(t0.Add(time.Minute))
	suspendedCond := *newCondition(batchv1.JobSuspended, corev1.ConditionTrue, reasonSuspended, msgSuspended, t0)
	cases := map[string]struct {
		job           *batchv1.Job
		wantReason    string
		wantStartTime *metav1.Time
	}{
		"running never suspended": {job: builder.MakeJob("j", "ns").Status(batchv1.JobStatus{StartTime: &start}).Obj(), wantStartTime: &start},
		"suspending clears start": {job: builder.MakeJob("j", "ns").Suspend(true).Status(batchv1.JobStatus{StartTime: &start}).Obj(), wantReason: ReasonSuspended},
		"stays suspended":         {job: builder.MakeJob("j", "ns").Suspend(true).Status(batchv1.JobStatus{Conditions: []batchv1.JobCondition{suspendedCond}}).Obj()},
		"resuming restarts clock": {job: builder.MakeJob("j", "ns").Suspend(false).Status(batchv1.JobStatus{Conditions: []batchv1.JobCondition{suspendedCond}}).Obj(), wantReason: ReasonResumed, wantStartTime: &now},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tr := applySuspendCondition(tc.job, now)
			if tr.eventReason != tc.wantReason || tr.changed != (tc.wantReason != "") {
				t.Errorf("transition = %+v, want reason %q", tr, tc.wantReason)
			}
			if diff := cmp.Diff(tc.wantStartTime, tc.job.Status.StartTime); diff != "" {
				t.Errorf("startTime (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRestartsExceedBackoffLimit(t *testing.T) {
	running := func(restarts int32) *corev1.Pod {
		p := builder.MakePod("p", "ns").Phase(corev1.PodRunning).Obj()
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", RestartCount: restarts}}
		return p
	}
	cases := map[string]struct {
		policy corev1.RestartPolicy
		limit  int32
		pods   []*corev1.Pod
		want   bool
	}{
		"never policy ignores restarts": {policy: corev1.RestartPolicyNever, limit: 1, pods: []*corev1.Pod{running(5)}},
		"below limit":                   {policy: corev1.RestartPolicyOnFailure, limit: 3, pods: []*corev1.Pod{running(1), running(1)}},
		"reaches limit":                 {policy: corev1.RestartPolicyOnFailure, limit: 3, pods: []*corev1.Pod{running(2), running(1)}, want: true},
		"zero limit any restart":        {policy: corev1.RestartPolicyOnFailure, limit: 0, pods: []*corev1.Pod{running(1)}, want: true},
		"zero limit no restart":         {policy: corev1.RestartPolicyOnFailure, limit: 0, pods: []*corev1.Pod{running(0)}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			job := builder.MakeJob("j", "ns").RestartPolicy(tc.policy).BackoffLimit(tc.limit).Obj()
			if got := restartsExceedBackoffLimit(job, tc.pods); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
