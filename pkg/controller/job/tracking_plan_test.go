package job

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"jobkeeper.dev/jobkeeper/test/builder"
)

// planSummary is a trackingPlan by pod names.
type planSummary struct {
	Release, AddSucceeded, AddFailed []string
	Indexes                          []int
	Actions                          map[batchv1.PodFailurePolicyAction]int
	Capped                           bool
}

func summarize(p trackingPlan) planSummary {
	s := planSummary{Indexes: p.indexes, Actions: p.policyActions, Capped: p.capped}
	for _, pod := range p.release {
		s.Release = append(s.Release, pod.Name)
	}
	for _, uid := range p.addSucceeded {
		s.AddSucceeded = append(s.AddSucceeded, string(uid))
	}
	for _, uid := range p.addFailed {
		s.AddFailed = append(s.AddFailed, string(uid))
	}
	return s
}

func TestPlanTracking(t *testing.T) {
	finishedAt := metav1.NewTime(t0)
	nonIndexed := builder.MakeJob("j", ns).Selector("u").Parallelism(3).Completions(5).Obj()
	indexed := builder.MakeJob("j", ns).Selector("u").Indexed().Parallelism(3).Completions(5).Obj()
	pod := func(name string, job *batchv1.Job) *builder.PodWrapper {
		return builder.MakePod(name, ns).UID(name).OwnedByJob(job).Finalizer(batchv1.JobTrackingFinalizer)
	}
	failing := newCondition(batchv1.JobFailureTarget, corev1.ConditionTrue, batchv1.JobReasonBackoffLimitExceeded, msgBackoffLimitExceeded, t0)
	succeeding := newCondition(batchv1.JobSuccessCriteriaMet, corev1.ConditionTrue, batchv1.JobReasonCompletionsReached, msgCompletionsReached, t0)
	cases := map[string]struct {
		// setup
		job                *batchv1.Job
		pods               []*corev1.Pod
		interim            *batchv1.JobCondition
		uncountedSucceeded []types.UID
		uncountedFailed    []types.UID
		prevIndexes        indexSet
		failedIndexes      *indexSet
		inFlight           []types.UID
		pending, max       int
		// want
		want planSummary
	}{
		"finished pods are released and added; running ones stay": {
			job: nonIndexed,
			pods: []*corev1.Pod{
				pod("ok", nonIndexed).Terminated(0, finishedAt).Obj(),
				pod("bad", nonIndexed).Terminated(1, finishedAt).Obj(),
				pod("run", nonIndexed).Phase(corev1.PodRunning).Obj(),
			},
			want: planSummary{Release: []string{"ok", "bad"}, AddSucceeded: []string{"ok"}, AddFailed: []string{"bad"}},
		},
		"already uncounted: released, not added twice": {
			job:                nonIndexed,
			pods:               []*corev1.Pod{pod("ok", nonIndexed).Terminated(0, finishedAt).Obj(), pod("bad", nonIndexed).Terminated(1, finishedAt).Obj()},
			uncountedSucceeded: []types.UID{"ok"},
			uncountedFailed:    []types.UID{"bad"},
			want:               planSummary{Release: []string{"ok", "bad"}},
		},
		"removal in flight: left alone": {
			job:      nonIndexed,
			pods:     []*corev1.Pod{pod("ok", nonIndexed).Terminated(0, finishedAt).Obj()},
			inFlight: []types.UID{"ok"},
			want:     planSummary{},
		},
		"without the finalizer: left alone": {
			job:  nonIndexed,
			pods: []*corev1.Pod{builder.MakePod("gone", ns).UID("gone").OwnedByJob(nonIndexed).Terminated(0, finishedAt).Obj()},
			want: planSummary{},
		},
		"failing job: running pods counted as failed": {
			job:     nonIndexed,
			pods:    []*corev1.Pod{pod("run", nonIndexed).Phase(corev1.PodRunning).Obj(), pod("ok", nonIndexed).Terminated(0, finishedAt).Obj()},
			interim: failing,
			want:    planSummary{Release: []string{"run", "ok"}, AddFailed: []string{"run"}, AddSucceeded: []string{"ok"}},
		},
		"succeeding job: running pods released uncounted": {
			job:     nonIndexed,
			pods:    []*corev1.Pod{pod("run", nonIndexed).Phase(corev1.PodRunning).Obj()},
			interim: succeeding,
			want:    planSummary{Release: []string{"run"}},
		},
		"capped with what is already pending": {
			job: nonIndexed,
			pods: []*corev1.Pod{
				pod("a", nonIndexed).Terminated(0, finishedAt).Obj(),
				pod("b", nonIndexed).Terminated(0, finishedAt).Obj(),
				pod("c", nonIndexed).Terminated(0, finishedAt).Obj(),
			},
			pending: 1, max: 2,
			want: planSummary{Release: []string{"a"}, AddSucceeded: []string{"a"}, Capped: true},
		},
		"indexed: new indexes only, no UIDs": {
			job: indexed,
			pods: []*corev1.Pod{
				pod("i0", indexed).Index("0").Terminated(0, finishedAt).Obj(),
				pod("i1", indexed).Index("1").Terminated(0, finishedAt).Obj(),
				pod("dup1", indexed).Index("1").Terminated(0, finishedAt).Obj(),
				pod("bad-index", indexed).Index("abc").Terminated(0, finishedAt).Obj(),
				pod("huge-index", indexed).Index("99999999999999999999").Terminated(1, finishedAt).Obj(),
			},
			prevIndexes: indexSet{{0, 0}},
			want:        planSummary{Release: []string{"i0", "i1", "dup1", "bad-index", "huge-index"}, Indexes: []int{1, 1}},
		},
		"indexed: a success in a failed index is not counted": {
			job:           indexed,
			pods:          []*corev1.Pod{pod("late", indexed).Index("2").Terminated(0, finishedAt).Obj()},
			failedIndexes: &indexSet{{2, 2}},
			want:          planSummary{Release: []string{"late"}},
		},
		"pod failure policy: ignored failures released uncounted": {
			job: builder.MakeJob("j", ns).Selector("u").Parallelism(2).Completions(2).
				PodFailurePolicy(builder.ExitCodeRule(batchv1.PodFailurePolicyActionIgnore, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 42)).Obj(),
			pods: []*corev1.Pod{
				pod("ignored", nonIndexed).ContainerExited("main", 42).Phase(corev1.PodFailed).Obj(),
				pod("counted", nonIndexed).ContainerExited("main", 1).Phase(corev1.PodFailed).Obj(),
			},
			want: planSummary{Release: []string{"ignored", "counted"}, AddFailed: []string{"counted"},
				Actions: map[batchv1.PodFailurePolicyAction]int{batchv1.PodFailurePolicyActionIgnore: 1}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			sc := &syncContext{
				job:                  tc.job,
				pods:                 tc.pods,
				uncountedSucceeded:   sets.New(tc.uncountedSucceeded...),
				uncountedFailed:      sets.New(tc.uncountedFailed...),
				prevSucceededIndexes: tc.prevIndexes,
				failedIndexes:        tc.failedIndexes,
			}
			sc.setEnd(tc.interim, t0)
			withFinalizer := sets.New[types.UID]()
			for _, p := range tc.pods {
				if hasTrackingFinalizer(p) && !sets.New(tc.inFlight...).Has(p.UID) {
					withFinalizer.Insert(p.UID)
				}
			}
			maxUncounted := tc.max
			if maxUncounted == 0 {
				maxUncounted = 500
			}
			got := summarize(planTracking(sc, tc.pods, withFinalizer, tc.pending, maxUncounted))
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCountReleased(t *testing.T) {
	status := batchv1.JobStatus{Succeeded: 1, Failed: 2, UncountedTerminatedPods: &batchv1.UncountedTerminatedPods{
		Succeeded: []types.UID{"s1", "s2"}, Failed: []types.UID{"f1", "f2"},
	}}
	if !countReleased(&status, sets.New[types.UID]("s2", "f1")) {
		t.Fatal("countReleased reported no change")
	}
	want := batchv1.JobStatus{Succeeded: 2, Failed: 3, UncountedTerminatedPods: &batchv1.UncountedTerminatedPods{
		Succeeded: []types.UID{"s2"}, Failed: []types.UID{"f1"},
	}}
	if diff := cmp.Diff(want, status); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	if countReleased(&status, sets.New[types.UID]("s2", "f1")) {
		t.Error("a second call with the same pods changed the status")
	}
}

func TestTerminalDue(t *testing.T) {
	cases := map[string]struct {
		// setup
		uncounted   *batchv1.UncountedTerminatedPods
		terminating int32
		// want
		due  bool
		wait string
	}{
		"nothing left":              {uncounted: &batchv1.UncountedTerminatedPods{}, due: true},
		"no list at all":            {due: true},
		"a success still uncounted": {uncounted: &batchv1.UncountedTerminatedPods{Succeeded: []types.UID{"a"}}, wait: "1 uncounted pods"},
		"failures still uncounted":  {uncounted: &batchv1.UncountedTerminatedPods{Failed: []types.UID{"a", "b"}}, wait: "2 uncounted pods"},
		"a pod terminating":         {uncounted: &batchv1.UncountedTerminatedPods{}, terminating: 1, wait: "1 terminating pods"},
		"uncounted first": {
			uncounted: &batchv1.UncountedTerminatedPods{Succeeded: []types.UID{"a"}}, terminating: 3, wait: "1 uncounted pods",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			due, wait := terminalDue(batchv1.JobStatus{UncountedTerminatedPods: tc.uncounted}, tc.terminating)
			if due != tc.due || wait != tc.wait {
				t.Errorf("terminalDue = %v, %q; want %v, %q", due, wait, tc.due, tc.wait)
			}
		})
	}
}
