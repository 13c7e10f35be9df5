package follow

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/test/builder"
)

var (
	t0  = time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	mt0 = metav1.NewTime(t0)
)

func at(d time.Duration) metav1.Time { return metav1.NewTime(t0.Add(d)) }

func TestBuild(t *testing.T) {
	base := func() *builder.JobWrapper {
		return builder.MakeJob("j", "ns").UID("job-uid").Parallelism(2).Completions(4)
	}
	running := batchv1.JobStatus{StartTime: &mt0, Active: 2, Ready: ptr.To[int32](1), Terminating: ptr.To[int32](0), Succeeded: 1, Failed: 1}
	cases := map[string]struct {
		// job and deleted are the input; now is the time of the build.
		job     *batchv1.Job
		deleted bool
		now     time.Duration
		// want is the expected State, without conditions and warnings.
		want State
	}{
		"running": {
			job: base().Status(running).Obj(),
			now: 90 * time.Second,
			want: State{Namespace: "ns", Name: "j", UID: "job-uid", Completions: 4, Parallelism: 2,
				Succeeded: 1, Failed: 1, Active: 2, Ready: 1, Started: t0, Elapsed: 90 * time.Second},
		},
		"not started yet: elapsed since creation, ready and terminating unset": {
			job: func() *batchv1.Job {
				j := base().Obj()
				j.CreationTimestamp = mt0
				return j
			}(),
			now:  3 * time.Second,
			want: State{Namespace: "ns", Name: "j", UID: "job-uid", Completions: 4, Parallelism: 2, Started: t0, Elapsed: 3 * time.Second},
		},
		"complete: elapsed up to the completion time": {
			job: base().Status(builder.SucceededStatus(mt0, at(10*time.Second))).Obj(),
			now: time.Hour,
			want: State{Namespace: "ns", Name: "j", UID: "job-uid", Completions: 4, Parallelism: 2, Succeeded: 1,
				Started: t0, Elapsed: 10 * time.Second, Outcome: Complete, Reason: batchv1.JobReasonCompletionsReached},
		},
		"failed: reason and message of the Failed condition": {
			job: func() *batchv1.Job {
				j := base().Status(running).Obj()
				j.Status.Conditions = []batchv1.JobCondition{
					{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, LastTransitionTime: at(4 * time.Second)},
					{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, Message: "Job has reached the specified backoff limit", LastTransitionTime: at(5 * time.Second)},
				}
				return j
			}(),
			now: time.Hour,
			want: State{Namespace: "ns", Name: "j", UID: "job-uid", Completions: 4, Parallelism: 2,
				Succeeded: 1, Failed: 1, Active: 2, Ready: 1, Started: t0, Elapsed: 5 * time.Second,
				Outcome: Failed, Reason: batchv1.JobReasonBackoffLimitExceeded, Message: "Job has reached the specified backoff limit"},
		},
		"an interim FailureTarget is not an outcome": {
			job: base().Status(running).Condition(batchv1.JobFailureTarget, batchv1.JobReasonDeadlineExceeded, at(time.Second)).Obj(),
			now: 2 * time.Second,
			want: State{Namespace: "ns", Name: "j", UID: "job-uid", Completions: 4, Parallelism: 2,
				Succeeded: 1, Failed: 1, Active: 2, Ready: 1, Started: t0, Elapsed: 2 * time.Second},
		},
		"a False Complete condition is not an outcome": {
			job: func() *batchv1.Job {
				j := base().Status(running).Obj()
				j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionFalse}}
				return j
			}(),
			now: time.Second,
			want: State{Namespace: "ns", Name: "j", UID: "job-uid", Completions: 4, Parallelism: 2,
				Succeeded: 1, Failed: 1, Active: 2, Ready: 1, Started: t0, Elapsed: time.Second},
		},
		"deleted while running": {
			job: base().Status(running).Obj(), deleted: true, now: 7 * time.Second,
			want: State{Namespace: "ns", Name: "j", UID: "job-uid", Completions: 4, Parallelism: 2,
				Succeeded: 1, Failed: 1, Active: 2, Ready: 1, Started: t0, Elapsed: 7 * time.Second,
				Outcome: Deleted, Reason: "Deleted", Message: "the Job was deleted before it finished"},
		},
		"deleted after it completed keeps its outcome": {
			job: base().Status(builder.SucceededStatus(mt0, at(10*time.Second))).Obj(), deleted: true, now: time.Hour,
			want: State{Namespace: "ns", Name: "j", UID: "job-uid", Completions: 4, Parallelism: 2, Succeeded: 1,
				Started: t0, Elapsed: 10 * time.Second, Outcome: Complete, Reason: batchv1.JobReasonCompletionsReached},
		},
		"suspended, work queue, managed elsewhere, being deleted": {
			job: func() *batchv1.Job {
				j := base().NoCompletions().Suspend(true).ManagedBy("example.com/x").Obj()
				j.DeletionTimestamp = &mt0
				return j
			}(),
			want: State{Namespace: "ns", Name: "j", UID: "job-uid", WorkQueue: true, Parallelism: 2,
				Suspended: true, ManagedBy: "example.com/x", Deleting: true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Build(Input{Job: tc.job, Deleted: tc.deleted}, t0.Add(tc.now))
			got.Conditions, got.Warnings = nil, nil
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("State (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBuildConditions(t *testing.T) {
	job := builder.MakeJob("j", "ns").Status(builder.SucceededStatus(mt0, at(time.Second))).Obj()
	job.Status.Conditions[0].Message = "Reached expected number of succeeded pods"
	got := Build(Input{Job: job}, t0).Conditions
	want := []Condition{
		{Type: "SuccessCriteriaMet", Status: "True", Reason: "CompletionsReached", Message: "Reached expected number of succeeded pods", Since: t0.Add(time.Second)},
		{Type: "Complete", Status: "True", Reason: "CompletionsReached", Since: t0.Add(time.Second)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("conditions (-want +got):\n%s", diff)
	}
}

func TestBuildIndexes(t *testing.T) {
	job := builder.MakeJob("j", "ns").UID("job-uid").Indexed().Completions(10).Obj()
	job.Status.CompletedIndexes = "0-2,5,bad,9-7"
	job.Status.FailedIndexes = ptr.To("4,12")
	other := builder.MakeJob("other", "ns").UID("other-uid").Obj()
	pods := []*corev1.Pod{
		builder.MakePod("j-3", "ns").OwnedByJob(job).Index("3").Phase(corev1.PodRunning).Obj(),
		builder.MakePod("j-6", "ns").OwnedByJob(job).Index("6").Phase(corev1.PodPending).Obj(),
		builder.MakePod("o-7", "ns").OwnedByJob(other).Index("7").Phase(corev1.PodRunning).Obj(),
		builder.MakePod("j-8", "ns").OwnedByJob(job).Index("8").Phase(corev1.PodRunning).DeletionTimestamp(mt0).Obj(),
		builder.MakePod("j-1", "ns").OwnedByJob(job).Index("1").Phase(corev1.PodRunning).Obj(),
		builder.MakePod("j-99", "ns").OwnedByJob(job).Index("99").Phase(corev1.PodRunning).Obj(),
		builder.MakePod("j-7", "ns").OwnedByJob(job).Index("7").Terminated(0, mt0).Obj(), // not counted yet
		builder.MakePod("j-9", "ns").OwnedByJob(job).Index("9").Terminated(1, mt0).Obj(), // will be retried
	}
	got := Build(Input{Job: job, Pods: pods}, t0).Indexes
	P, R, S, F := IndexPending, IndexRunning, IndexSucceeded, IndexFailed
	want := []IndexPhase{S, S, S, R, F, S, P, R, P, P}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("indexes (-want +got):\n%s", diff)
	}
	if got := Build(Input{Job: builder.MakeJob("n", "ns").Obj(), Pods: pods}, t0).Indexes; got != nil {
		t.Errorf("NonIndexed Job: indexes %v, want none", got)
	}
}

func TestBuildWarnings(t *testing.T) {
	job := builder.MakeJob("j", "ns").UID("job-uid").Indexed().Completions(3).Obj()
	pod := builder.MakePod("j-2-abc", "ns").UID("pod-uid").OwnedByJob(job).Index("2").Obj()
	stranger := builder.MakePod("s", "ns").UID("stranger-uid").Obj()
	event := func(uid, kind, objUID, typ, reason string, last time.Duration) *corev1.Event {
		return &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{UID: "ev-" + ktypes.UID(uid), CreationTimestamp: mt0},
			InvolvedObject: corev1.ObjectReference{Kind: kind, UID: ktypes.UID(objUID)},
			Type:           typ, Reason: reason, Message: reason + " happened", LastTimestamp: at(last),
		}
	}
	series := event("series", "Pod", "pod-uid", corev1.EventTypeWarning, "BackOff", time.Second)
	series.Count = 2
	series.Series = &corev1.EventSeries{Count: 5, LastObservedTime: metav1.NewMicroTime(t0.Add(9 * time.Second))}
	events := []*corev1.Event{
		event("job", "Job", "job-uid", corev1.EventTypeWarning, "FailedCreate", 3*time.Second),
		event("normal", "Job", "job-uid", corev1.EventTypeNormal, "SuccessfulCreate", time.Second),
		event("stranger", "Pod", "stranger-uid", corev1.EventTypeWarning, "Failed", time.Second),
		event("other-kind", "Node", "job-uid", corev1.EventTypeWarning, "Odd", time.Second),
		series,
	}
	got := Build(Input{Job: job, Pods: []*corev1.Pod{pod, stranger}, Events: events}, t0).Warnings
	want := []Warning{
		{UID: "ev-job", Object: "job/j", Reason: "FailedCreate", Message: "FailedCreate happened", Count: 1, Last: t0.Add(3 * time.Second)},
		{UID: "ev-series", Object: "pod/j-2-abc", Index: "2", Reason: "BackOff", Message: "BackOff happened", Count: 5, Last: t0.Add(9 * time.Second)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
}

func TestOutcomeExitCodes(t *testing.T) {
	for o, want := range map[Outcome]int{Complete: 0, Failed: 1, Deleted: 3, Running: 2} {
		if got := o.ExitCode(); got != want {
			t.Errorf("%v: exit code %d, want %d", o, got, want)
		}
	}
}
