package job

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/test/builder"
)

func TestMatchSuccessPolicy(t *testing.T) {
	indexesRule := func(ixs string) batchv1.SuccessPolicyRule {
		return batchv1.SuccessPolicyRule{SucceededIndexes: ptr.To(ixs)}
	}
	countRule := func(n int32) batchv1.SuccessPolicyRule {
		return batchv1.SuccessPolicyRule{SucceededCount: ptr.To(n)}
	}
	bothRule := func(ixs string, n int32) batchv1.SuccessPolicyRule {
		return batchv1.SuccessPolicyRule{SucceededIndexes: ptr.To(ixs), SucceededCount: ptr.To(n)}
	}
	cases := map[string]struct {
		// setup
		rules       []batchv1.SuccessPolicyRule
		noPolicy    bool
		completions int32
		succeeded   string
		// want
		wantMsg string
		wantOK  bool
	}{
		"no policy": {
			noPolicy: true, completions: 5, succeeded: "0-4",
		},
		"nothing succeeded": {
			rules: []batchv1.SuccessPolicyRule{countRule(0)}, completions: 5, succeeded: "",
		},
		"indexes all succeeded": {
			rules: []batchv1.SuccessPolicyRule{indexesRule("0,2-3")}, completions: 5, succeeded: "0-3",
			wantMsg: "Matched rules at index 0", wantOK: true,
		},
		"indexes one missing": {
			rules: []batchv1.SuccessPolicyRule{indexesRule("0,2-3")}, completions: 5, succeeded: "0,1,3,4",
		},
		"indexes cut at completions": {
			rules: []batchv1.SuccessPolicyRule{indexesRule("3-9")}, completions: 5, succeeded: "3,4",
			wantMsg: "Matched rules at index 0", wantOK: true,
		},
		"indexes all above completions never match": {
			rules: []batchv1.SuccessPolicyRule{indexesRule("7-9")}, completions: 5, succeeded: "0-4",
		},
		"indexes malformed never match": {
			rules: []batchv1.SuccessPolicyRule{indexesRule("x")}, completions: 5, succeeded: "0-4",
		},
		"indexes and count reached": {
			rules: []batchv1.SuccessPolicyRule{bothRule("0-4", 2)}, completions: 10, succeeded: "1,4,7-9",
			wantMsg: "Matched rules at index 0", wantOK: true,
		},
		"indexes and count: succeeded outside the set do not count": {
			rules: []batchv1.SuccessPolicyRule{bothRule("0-4", 2)}, completions: 10, succeeded: "4-9",
		},
		"count reached": {
			rules: []batchv1.SuccessPolicyRule{countRule(3)}, completions: 10, succeeded: "0,5,9",
			wantMsg: "Matched rules at index 0", wantOK: true,
		},
		"count not reached": {
			rules: []batchv1.SuccessPolicyRule{countRule(3)}, completions: 10, succeeded: "0,9",
		},
		"first matching rule is named": {
			rules:       []batchv1.SuccessPolicyRule{indexesRule("0"), countRule(2), indexesRule("1")},
			completions: 5, succeeded: "1,2",
			wantMsg: "Matched rules at index 1", wantOK: true,
		},
		"later rule matches": {
			rules:       []batchv1.SuccessPolicyRule{indexesRule("0"), countRule(4), indexesRule("1")},
			completions: 5, succeeded: "1,2",
			wantMsg: "Matched rules at index 2", wantOK: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var policy *batchv1.SuccessPolicy
			if !tc.noPolicy {
				policy = &batchv1.SuccessPolicy{Rules: tc.rules}
			}
			msg, ok := matchSuccessPolicy(policy, tc.completions, parseIndexSet(tc.succeeded, int(tc.completions)))
			if msg != tc.wantMsg || ok != tc.wantOK {
				t.Errorf("matchSuccessPolicy = (%q, %v), want (%q, %v)", msg, ok, tc.wantMsg, tc.wantOK)
			}
		})
	}
}

func TestIndexSetOverlap(t *testing.T) {
	cases := map[string]struct {
		a, b string
		want int
	}{
		"empty":            {a: "", b: "0-3", want: 0},
		"disjoint":         {a: "0-2", b: "3-5", want: 0},
		"same":             {a: "0-5", b: "0-5", want: 6},
		"inside":           {a: "0-9", b: "2,4-6", want: 4},
		"straddling spans": {a: "0-3,6-8", b: "2-7", want: 4},
		"many small":       {a: "0,2,4,6,8", b: "0-1,3-4,7-9", want: 3},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			a, b := parseIndexSet(tc.a, 100), parseIndexSet(tc.b, 100)
			if got := a.overlap(b); got != tc.want {
				t.Errorf("overlap(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
			}
			if got := b.overlap(a); got != tc.want {
				t.Errorf("overlap(%q, %q) = %d, want %d", tc.b, tc.a, got, tc.want)
			}
		})
	}
}

func TestSyncSuccessPolicy(t *testing.T) {
	started := metav1.NewTime(t0.Add(-time.Minute))
	finishedAt := metav1.NewTime(t0.Add(-time.Second))
	running := batchv1.JobStatus{StartTime: &started, Active: 3, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0)}
	met := *newCondition(batchv1.JobSuccessCriteriaMet, corev1.ConditionTrue, batchv1.JobReasonSuccessPolicy, "Matched rules at index 0", t0.Add(-time.Second))
	base := func() *builder.JobWrapper {
		return builder.MakeJob("j", ns).Selector("u").ManagedBy(DefaultManagedBy).Indexed().Parallelism(3).Completions(3)
	}
	pod := func(name, ix string, job *batchv1.Job) *builder.PodWrapper {
		return builder.MakePod(name, ns).UID(name).OwnedByJob(job).Finalizer(batchv1.JobTrackingFinalizer).Index(ix).NodeName("n")
	}
	cases := map[string]struct {
		// setup
		job  *batchv1.Job
		pods func(job *batchv1.Job) []*corev1.Pod
		// want
		want           statusCounts
		wantMessage    string
		wantPods       int
		wantFinalizers int
		wantWrites     map[string]int
		wantEvents     []string
	}{
		"succeededIndexes rule met: pending pods deleted, not counted as failed": {
			job: base().Status(running).SuccessPolicy(builder.SucceededIndexesRule("0")).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{
					pod("a", "0", job).Terminated(0, finishedAt).Obj(),
					pod("b", "1", job).Phase(corev1.PodRunning).Ready().Obj(),
					pod("c", "2", job).Phase(corev1.PodPending).Obj(),
				}
			},
			want: statusCounts{Succeeded: 1, CompletedIndexes: "0", Terminating: 2, Started: true,
				Conditions: []string{"SuccessCriteriaMet=True/SuccessPolicy"}},
			wantMessage: "Matched rules at index 0",
			wantPods:    1,
			wantWrites:  map[string]int{"update jobs/status": 1, "patch pods": 3, "delete pods": 2},
			wantEvents:  []string{"SuccessfulDelete", "SuccessfulDelete"},
		},
		"succeededCount rule met with nothing else running completes at once": {
			job: base().Parallelism(2).Completions(4).Status(running).SuccessPolicy(builder.SucceededCountRule(2)).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{
					pod("a", "1", job).Terminated(0, finishedAt).Obj(),
					pod("b", "3", job).Terminated(0, finishedAt).Obj(),
				}
			},
			want: statusCounts{Succeeded: 2, CompletedIndexes: "1,3", Started: true, Completed: true,
				Conditions: []string{"SuccessCriteriaMet=True/SuccessPolicy", "Complete=True/SuccessPolicy"}},
			wantMessage: "Matched rules at index 0",
			wantPods:    2,
			wantWrites:  map[string]int{"update jobs/status": 2, "patch pods": 2},
			wantEvents:  []string{"Completed"},
		},
		"rule not met yet: the job keeps running": {
			job: base().Status(running).SuccessPolicy(builder.SucceededIndexesRule("0,2")).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{
					pod("a", "0", job).Terminated(0, finishedAt).Obj(),
					pod("b", "1", job).Phase(corev1.PodRunning).Obj(),
					pod("c", "2", job).Phase(corev1.PodRunning).Obj(),
				}
			},
			want:           statusCounts{Active: 2, Succeeded: 1, CompletedIndexes: "0", Started: true},
			wantPods:       3,
			wantFinalizers: 2,
			wantWrites:     map[string]int{"update jobs/status": 1, "patch pods": 1},
		},
		"a failure decided in the same sync wins": {
			job: base().BackoffLimit(0).Status(running).SuccessPolicy(builder.SucceededIndexesRule("0")).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{
					pod("a", "0", job).Terminated(0, finishedAt).Obj(),
					pod("b", "1", job).Terminated(1, finishedAt).Obj(),
					pod("c", "2", job).Phase(corev1.PodRunning).Obj(),
				}
			},
			// c is deleted and, the Job failing, counted as failed: b and c
			// move into the counter in this sync's second status write.
			want: statusCounts{Succeeded: 1, CompletedIndexes: "0", Terminating: 1, Failed: 2, Started: true,
				Conditions: []string{"FailureTarget=True/BackoffLimitExceeded"}},
			wantMessage: "Job has reached the specified backoff limit",
			wantPods:    2,
			wantWrites:  map[string]int{"update jobs/status": 2, "patch pods": 3, "delete pods": 1},
			wantEvents:  []string{"SuccessfulDelete"},
		},
		"SuccessCriteriaMet is not flipped by a later failure": {
			job: base().BackoffLimit(0).Status(batchv1.JobStatus{
				StartTime: &started, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0), Succeeded: 1, CompletedIndexes: "0",
				Conditions: []batchv1.JobCondition{met}}).SuccessPolicy(builder.SucceededIndexesRule("0")).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{pod("b", "1", job).Terminated(1, finishedAt).Obj()}
			},
			want: statusCounts{Succeeded: 1, Failed: 1, CompletedIndexes: "0", Started: true, Completed: true,
				Conditions: []string{"SuccessCriteriaMet=True/SuccessPolicy", "Complete=True/SuccessPolicy"}},
			wantMessage: "Matched rules at index 0",
			wantPods:    1,
			wantWrites:  map[string]int{"update jobs/status": 2, "patch pods": 1},
			wantEvents:  []string{"Completed"},
		},
		"SuccessCriteriaMet waits for terminating pods": {
			job: base().Status(batchv1.JobStatus{
				StartTime: &started, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](1), Succeeded: 1, CompletedIndexes: "0",
				Conditions: []batchv1.JobCondition{met}}).SuccessPolicy(builder.SucceededIndexesRule("0")).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{builder.MakePod("b", ns).UID("b").OwnedByJob(job).Index("1").NodeName("n").
					Phase(corev1.PodRunning).DeletionTimestamp(finishedAt).Obj()}
			},
			want: statusCounts{Succeeded: 1, CompletedIndexes: "0", Terminating: 1, Started: true,
				Conditions: []string{"SuccessCriteriaMet=True/SuccessPolicy"}},
			wantMessage: "Matched rules at index 0",
			wantPods:    1,
			wantWrites:  map[string]int{},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pods := tc.pods(tc.job)
			h, got, gotPods := syncFresh(t, Options{}, tc.job, pods...)
			if diff := cmp.Diff(tc.want, countsOf(got), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
			if n := len(got.Status.Conditions); n > 0 && got.Status.Conditions[n-1].Message != tc.wantMessage {
				t.Errorf("last condition message %q, want %q", got.Status.Conditions[n-1].Message, tc.wantMessage)
			}
			if got.Status.FailedIndexes != nil {
				t.Errorf("failedIndexes = %q, want nil without backoffLimitPerIndex", *got.Status.FailedIndexes)
			}
			h.checkSyncEffects(t, gotPods, tc.wantPods, tc.wantFinalizers, tc.wantWrites, tc.wantEvents)
		})
	}
}
