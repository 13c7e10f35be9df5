package ttlafterfinished

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"jobkeeper.dev/jobkeeper/pkg/apis/jobkeeper/v1alpha1"
	"jobkeeper.dev/jobkeeper/pkg/controller/ttlafterfinished/policy"
	"jobkeeper.dev/jobkeeper/test/builder"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// verdictView is the comparable part of a verdict.
type verdictView struct {
	FinishedAt  time.Time
	TTL         time.Duration
	Policy      string
	Failed      bool
	DryRun      bool
	Propagation metav1.DeletionPropagation
}

func view(v *verdict) *verdictView {
	if v == nil {
		return nil
	}
	return &verdictView{v.FinishedAt, v.TTL, v.Policy, v.Failed, v.DryRun, v.Propagation}
}

func TestJobOwnVerdict(t *testing.T) {
	at := metav1.NewTime(t0)
	cases := map[string]struct {
		job     *batchv1.Job
		want    *verdictView
		wantErr bool
	}{
		"no TTL": {
			job: builder.MakeJob("j", "ns").Condition(batchv1.JobComplete, "", at).Obj(),
		},
		"not finished": {
			job: builder.MakeJob("j", "ns").TTLSecondsAfterFinished(10).Obj(),
		},
		"only FailureTarget": {
			job: builder.MakeJob("j", "ns").TTLSecondsAfterFinished(10).Condition(batchv1.JobFailureTarget, "BackoffLimitExceeded", at).Obj(),
		},
		"only SuccessCriteriaMet": {
			job: builder.MakeJob("j", "ns").TTLSecondsAfterFinished(10).Condition(batchv1.JobSuccessCriteriaMet, "CompletionsReached", at).Obj(),
		},
		"suspended": {
			job: builder.MakeJob("j", "ns").TTLSecondsAfterFinished(10).Suspend(true).Condition(batchv1.JobSuspended, "JobSuspended", at).Obj(),
		},
		"Complete=False": {
			job: builder.MakeJob("j", "ns").TTLSecondsAfterFinished(10).Status(batchv1.JobStatus{Conditions: []batchv1.JobCondition{
				{Type: batchv1.JobComplete, Status: corev1.ConditionFalse, LastTransitionTime: at}}}).Obj(),
		},
		"complete": {
			job:  builder.MakeJob("j", "ns").TTLSecondsAfterFinished(10).Condition(batchv1.JobSuccessCriteriaMet, "", metav1.NewTime(t0.Add(-time.Second))).Condition(batchv1.JobComplete, "", at).Obj(),
			want: &verdictView{FinishedAt: t0, TTL: 10 * time.Second, Propagation: metav1.DeletePropagationForeground},
		},
		"failed, TTL 0": {
			job:  builder.MakeJob("j", "ns").TTLSecondsAfterFinished(0).Condition(batchv1.JobFailed, "BackoffLimitExceeded", at).Obj(),
			want: &verdictView{FinishedAt: t0, Failed: true, Propagation: metav1.DeletePropagationForeground},
		},
		"being deleted": {
			job: func() *batchv1.Job {
				j := builder.MakeJob("j", "ns").TTLSecondsAfterFinished(0).Condition(batchv1.JobComplete, "", at).Obj()
				j.DeletionTimestamp = &at
				return j
			}(),
		},
		"no transition time": {
			job:     builder.MakeJob("j", "ns").TTLSecondsAfterFinished(0).Condition(batchv1.JobComplete, "", metav1.Time{}).Obj(),
			wantErr: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := jobOwnVerdict(tc.job)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, view(got)); diff != "" {
				t.Errorf("verdict (-want +got):\n%s", diff)
			}
		})
	}
}

func TestVerdictRemaining(t *testing.T) {
	v := &verdict{FinishedAt: t0, TTL: 10 * time.Second}
	cases := map[string]struct {
		now        time.Time
		want       time.Duration
		wantFuture bool
	}{
		"just finished":     {now: t0, want: 10 * time.Second},
		"one second before": {now: t0.Add(9 * time.Second), want: time.Second},
		"exactly at expiry": {now: t0.Add(10 * time.Second), want: 0},
		"long after":        {now: t0.Add(time.Hour), want: 10*time.Second - time.Hour},
		"finish in future":  {now: t0.Add(-time.Minute), want: 70 * time.Second, wantFuture: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := v.Remaining(tc.now); got != tc.want {
				t.Errorf("remaining %v, want %v", got, tc.want)
			}
			if got := v.FinishedAt.After(tc.now); got != tc.wantFuture {
				t.Errorf("finishedInFuture %v, want %v", got, tc.wantFuture)
			}
		})
	}
}

func TestPodFinishTime(t *testing.T) {
	ts := func(d time.Duration) metav1.Time { return metav1.NewTime(t0.Add(d)) }
	term := func(d time.Duration) corev1.ContainerState {
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{FinishedAt: ts(d)}}
	}
	cases := map[string]struct {
		status  corev1.PodStatus
		created time.Duration
		want    time.Time
	}{
		"latest of containers": {
			status: corev1.PodStatus{
				InitContainerStatuses: []corev1.ContainerStatus{{State: term(1 * time.Second)}},
				ContainerStatuses:     []corev1.ContainerStatus{{State: term(5 * time.Second)}, {State: term(3 * time.Second)}},
				Conditions:            []corev1.PodCondition{{LastTransitionTime: ts(time.Hour)}},
			},
			want: t0.Add(5 * time.Second),
		},
		"sidecar init container finishing last": {
			status: corev1.PodStatus{
				InitContainerStatuses: []corev1.ContainerStatus{{State: term(9 * time.Second)}},
				ContainerStatuses:     []corev1.ContainerStatus{{State: term(5 * time.Second)}},
			},
			want: t0.Add(9 * time.Second),
		},
		"no terminated container: conditions": {
			status: corev1.PodStatus{
				Conditions: []corev1.PodCondition{{LastTransitionTime: ts(2 * time.Second)}, {LastTransitionTime: ts(7 * time.Second)}},
				StartTime:  &metav1.Time{Time: t0},
			},
			want: t0.Add(7 * time.Second),
		},
		"only start time": {
			status: corev1.PodStatus{StartTime: &metav1.Time{Time: t0.Add(4 * time.Second)}},
			want:   t0.Add(4 * time.Second),
		},
		"nothing: creation time": {
			created: 3 * time.Second,
			want:    t0.Add(3 * time.Second),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := builder.MakePod("p", "ns").Obj()
			pod.Status = tc.status
			pod.CreationTimestamp = ts(tc.created)
			if got := policy.PodFinishTime(pod); !got.Equal(tc.want) {
				t.Errorf("podFinishTime %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPodOwnVerdict(t *testing.T) {
	at := metav1.NewTime(t0)
	job := builder.MakeJob("j", "ns").UID("job-uid").Obj()
	cases := map[string]struct {
		pod     *corev1.Pod
		want    *verdictView
		wantErr bool
	}{
		"no annotation": {
			pod: builder.MakePod("p", "ns").Terminated(0, at).Obj(),
		},
		"running": {
			pod: builder.MakePod("p", "ns").Annotation(v1alpha1.TTLAnnotation, "5").Phase(corev1.PodRunning).Obj(),
		},
		"succeeded": {
			pod:  builder.MakePod("p", "ns").Annotation(v1alpha1.TTLAnnotation, "5").Terminated(0, at).Obj(),
			want: &verdictView{FinishedAt: t0, TTL: 5 * time.Second, Propagation: metav1.DeletePropagationBackground},
		},
		"failed": {
			pod:  builder.MakePod("p", "ns").Annotation(v1alpha1.TTLAnnotation, "0").Terminated(1, at).Obj(),
			want: &verdictView{FinishedAt: t0, Failed: true, Propagation: metav1.DeletePropagationBackground},
		},
		"controlled by a Job": {
			pod: builder.MakePod("p", "ns").Annotation(v1alpha1.TTLAnnotation, "0").OwnedByJob(job).Terminated(0, at).Obj(),
		},
		"bad annotation": {
			pod:     builder.MakePod("p", "ns").Annotation(v1alpha1.TTLAnnotation, "-1").Terminated(0, at).Obj(),
			wantErr: true,
		},
		"not a number": {
			pod:     builder.MakePod("p", "ns").Annotation(v1alpha1.TTLAnnotation, "1h").Terminated(0, at).Obj(),
			wantErr: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := podOwnVerdict(tc.pod)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, view(got)); diff != "" {
				t.Errorf("verdict (-want +got):\n%s", diff)
			}
		})
	}
}
