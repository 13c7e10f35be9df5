package job

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	dto "github.com/prometheus/client_model/go"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/test/builder"
)

// indexPod returns a pod of index ix of job holding the tracking finalizer,
// with the given failure-count annotations ("" leaves one out).
func indexPod(name string, ix string, job *batchv1.Job, counted, ignored string) *builder.PodWrapper {
	w := builder.MakePod(name, ns).UID(name).OwnedByJob(job).Finalizer(batchv1.JobTrackingFinalizer).Index(ix).NodeName("n")
	if counted != "" {
		w = w.Annotation(batchv1.JobIndexFailureCountAnnotation, counted)
	}
	if ignored != "" {
		w = w.Annotation(batchv1.JobIndexIgnoredFailureCountAnnotation, ignored)
	}
	return w
}

func TestIndexFailureCounts(t *testing.T) {
	job := builder.MakeJob("j", ns).Indexed().Obj()
	cases := map[string]struct {
		counted, ignored         string
		wantCounted, wantIgnored int32
	}{
		"no annotations":  {},
		"both set":        {counted: "3", ignored: "2", wantCounted: 3, wantIgnored: 2},
		"not a number":    {counted: "x", ignored: "1", wantIgnored: 1},
		"negative":        {counted: "-1", ignored: "-5"},
		"above int32":     {counted: "2147483648", wantCounted: 0},
		"int32 max":       {counted: "2147483647", wantCounted: 2147483647},
		"only ignored":    {ignored: "4", wantIgnored: 4},
		"zero is allowed": {counted: "0", ignored: "0"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c, i := indexFailureCounts(indexPod("p", "0", job, tc.counted, tc.ignored).Obj())
			if c != tc.wantCounted || i != tc.wantIgnored {
				t.Errorf("indexFailureCounts = (%d, %d), want (%d, %d)", c, i, tc.wantCounted, tc.wantIgnored)
			}
		})
	}
}

func TestIsIndexFailedAndReplacementCounts(t *testing.T) {
	finished := metav1.NewTime(t0)
	plain := builder.MakeJob("j", ns).Indexed().Completions(3).BackoffLimitPerIndex(1).Obj()
	withPolicy := builder.MakeJob("j", ns).Indexed().Completions(3).BackoffLimitPerIndex(1).PodFailurePolicy(
		builder.ExitCodeRule(batchv1.PodFailurePolicyActionIgnore, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 3),
		builder.ExitCodeRule(batchv1.PodFailurePolicyActionFailIndex, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 4),
	).Obj()
	cases := map[string]struct {
		// setup
		job *batchv1.Job
		pod *corev1.Pod
		// want
		wantFailed                   bool
		wantNextCounted, wantNextIgn int32
	}{
		"first failure within the limit": {
			job: plain, pod: indexPod("p", "0", plain, "0", "").Terminated(1, finished).Obj(),
			wantNextCounted: 1,
		},
		"failure at the limit fails the index": {
			job: plain, pod: indexPod("p", "0", plain, "1", "").Terminated(1, finished).Obj(),
			wantFailed: true, wantNextCounted: 2,
		},
		"running pod is not a failure": {
			job: plain, pod: indexPod("p", "0", plain, "5", "").Phase(corev1.PodRunning).Obj(),
			wantFailed: false, wantNextCounted: 6,
		},
		"deleted pod counts as failed by default": {
			job: plain, pod: indexPod("p", "0", plain, "1", "").Phase(corev1.PodRunning).DeletionTimestamp(finished).Obj(),
			wantFailed: true, wantNextCounted: 2,
		},
		"ignored failure never fails the index and counts apart": {
			job: withPolicy, pod: indexPod("p", "0", withPolicy, "1", "2").Terminated(3, finished).Obj(),
			wantNextCounted: 1, wantNextIgn: 3,
		},
		"FailIndex fails the index on the first failure": {
			job: withPolicy, pod: indexPod("p", "0", withPolicy, "0", "").Terminated(4, finished).Obj(),
			wantFailed: true, wantNextCounted: 1,
		},
		"other exit codes count": {
			job: withPolicy, pod: indexPod("p", "0", withPolicy, "1", "").Terminated(1, finished).Obj(),
			wantFailed: true, wantNextCounted: 2,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := isIndexFailed(tc.job, tc.pod); got != tc.wantFailed {
				t.Errorf("isIndexFailed = %v, want %v", got, tc.wantFailed)
			}
			c, i := replacementFailureCounts(tc.job, tc.pod)
			if c != tc.wantNextCounted || i != tc.wantNextIgn {
				t.Errorf("replacementFailureCounts = (%d, %d), want (%d, %d)", c, i, tc.wantNextCounted, tc.wantNextIgn)
			}
		})
	}
	if c, i := replacementFailureCounts(plain, nil); c != 0 || i != 0 {
		t.Errorf("replacementFailureCounts(nil) = (%d, %d), want (0, 0)", c, i)
	}
}

func TestSetIndexFailureAnnotations(t *testing.T) {
	job := builder.MakeJob("j", ns).Indexed().Completions(3).BackoffLimitPerIndex(2).PodFailurePolicy(
		builder.ExitCodeRule(batchv1.PodFailurePolicyActionIgnore, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 3)).Obj()
	finished := metav1.NewTime(t0)
	cases := map[string]struct {
		replaced *corev1.Pod
		want     map[string]string
	}{
		"fresh index": {
			want: map[string]string{batchv1.JobIndexFailureCountAnnotation: "0"},
		},
		"after a counted failure": {
			replaced: indexPod("p", "0", job, "1", "").Terminated(1, finished).Obj(),
			want:     map[string]string{batchv1.JobIndexFailureCountAnnotation: "2"},
		},
		"after an ignored failure": {
			replaced: indexPod("p", "0", job, "1", "").Terminated(3, finished).Obj(),
			want:     map[string]string{batchv1.JobIndexFailureCountAnnotation: "1", batchv1.JobIndexIgnoredFailureCountAnnotation: "1"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tmpl := &corev1.PodTemplateSpec{}
			setIndexFailureAnnotations(tmpl, job, tc.replaced)
			if diff := cmp.Diff(tc.want, tmpl.Annotations); diff != "" {
				t.Errorf("annotations (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFailedIndexesAndCondition(t *testing.T) {
	finished := metav1.NewTime(t0)
	base := func() *builder.JobWrapper {
		return builder.MakeJob("j", ns).Indexed().Completions(5).Parallelism(5).BackoffLimitPerIndex(1)
	}
	cases := map[string]struct {
		// setup
		job       *batchv1.Job
		pods      func(job *batchv1.Job) []*corev1.Pod
		succeeded string
		inFlight  []string
		// want
		wantFailed string
		wantReason string
	}{
		"nothing failed": {
			job: base().Obj(),
		},
		"failure within the limit": {
			job: base().Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{indexPod("a", "1", job, "0", "").Terminated(1, finished).Obj()}
			},
		},
		"failure past the limit": {
			job: base().Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{indexPod("a", "1", job, "1", "").Terminated(1, finished).Obj()}
			},
			wantFailed: "1",
		},
		"accounted pods are not read again, status is kept": {
			job: base().Status(batchv1.JobStatus{FailedIndexes: ptr.To("3")}).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				p := indexPod("a", "1", job, "1", "").Terminated(1, finished).Obj()
				p.Finalizers = nil
				return []*corev1.Pod{p}
			},
			wantFailed: "3",
		},
		"pods whose finalizer removal is in flight are not read again": {
			job: base().Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{
					indexPod("a", "1", job, "1", "").Phase(corev1.PodRunning).DeletionTimestamp(finished).Obj(),
					indexPod("b", "2", job, "1", "").Phase(corev1.PodRunning).DeletionTimestamp(finished).Obj(),
				}
			},
			inFlight:   []string{"a"},
			wantFailed: "2",
		},
		"index out of range ignored": {
			job: base().Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{indexPod("a", "7", job, "1", "").Terminated(1, finished).Obj()}
			},
		},
		"all indexes finished with a failure": {
			job: base().Status(batchv1.JobStatus{FailedIndexes: ptr.To("0")}).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{indexPod("a", "4", job, "1", "").Terminated(1, finished).Obj()}
			},
			succeeded:  "1-3",
			wantFailed: "0,4",
			wantReason: batchv1.JobReasonFailedIndexes,
		},
		"indexes still pending": {
			job:        base().Status(batchv1.JobStatus{FailedIndexes: ptr.To("0")}).Obj(),
			succeeded:  "1-3",
			wantFailed: "0",
		},
		"max failed indexes exceeded": {
			job: base().MaxFailedIndexes(1).Status(batchv1.JobStatus{FailedIndexes: ptr.To("0")}).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{indexPod("a", "2", job, "1", "").Terminated(1, finished).Obj()}
			},
			wantFailed: "0,2",
			wantReason: batchv1.JobReasonMaxFailedIndexesExceeded,
		},
		"max failed indexes reached, not exceeded": {
			job:        base().MaxFailedIndexes(1).Status(batchv1.JobStatus{FailedIndexes: ptr.To("0")}).Obj(),
			wantFailed: "0",
		},
		"max exceeded wins over all finished": {
			job:        base().MaxFailedIndexes(0).Status(batchv1.JobStatus{FailedIndexes: ptr.To("0")}).Obj(),
			succeeded:  "1-4",
			wantFailed: "0",
			wantReason: batchv1.JobReasonMaxFailedIndexesExceeded,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var pods []*corev1.Pod
			if tc.pods != nil {
				pods = tc.pods(tc.job)
			}
			inFlight := sets.New[types.UID]()
			for _, n := range tc.inFlight {
				inFlight.Insert(types.UID(n))
			}
			failed := failedIndexes(tc.job, pods, inFlight)
			if got := failed.String(); got != tc.wantFailed {
				t.Errorf("failedIndexes = %q, want %q", got, tc.wantFailed)
			}
			cond := failedIndexesCondition(tc.job, failed, parseIndexSet(tc.succeeded, 5), t0)
			var reason string
			if cond != nil {
				reason = cond.Reason
				if cond.Type != batchv1.JobFailureTarget {
					t.Errorf("condition type %s, want FailureTarget", cond.Type)
				}
				wantMsg := map[string]string{
					batchv1.JobReasonFailedIndexes:            "Job has failed indexes",
					batchv1.JobReasonMaxFailedIndexesExceeded: "Job has exceeded the specified maximal number of failed indexes",
				}[reason]
				if cond.Message != wantMsg {
					t.Errorf("message %q, want %q", cond.Message, wantMsg)
				}
			}
			if reason != tc.wantReason {
				t.Errorf("condition reason %q, want %q", reason, tc.wantReason)
			}
		})
	}
}

func TestPodsAwaitingReplacement(t *testing.T) {
	job := builder.MakeJob("j", ns).Indexed().Completions(5).Parallelism(5).BackoffLimitPerIndex(3).Obj()
	early, late := metav1.NewTime(t0.Add(-time.Minute)), metav1.NewTime(t0)
	cases := map[string]struct {
		// setup
		pods      []*corev1.Pod
		succeeded string
		failed    string
		inFlight  []string
		// want: index -> pod name
		want map[int]string
	}{
		"failed pod of a pending index waits": {
			pods: []*corev1.Pod{indexPod("a", "0", job, "0", "").Terminated(1, early).Obj()},
			want: map[int]string{0: "a"},
		},
		"index with an active replacement: released": {
			pods: []*corev1.Pod{
				indexPod("a", "0", job, "0", "").Terminated(1, early).Obj(),
				indexPod("b", "0", job, "1", "").Phase(corev1.PodRunning).Obj(),
			},
			want: map[int]string{},
		},
		"succeeded or failed index: released": {
			pods: []*corev1.Pod{
				indexPod("a", "0", job, "0", "").Terminated(1, early).Obj(),
				indexPod("b", "1", job, "3", "").Terminated(1, early).Obj(),
			},
			succeeded: "0", failed: "1",
			want: map[int]string{},
		},
		"latest failure with most failures wins": {
			pods: []*corev1.Pod{
				indexPod("a", "2", job, "0", "").Terminated(1, early).Obj(),
				indexPod("b", "2", job, "1", "").Terminated(1, late).Obj(),
				indexPod("c", "3", job, "1", "").Terminated(1, late).Obj(),
				indexPod("d", "3", job, "0", "1").Terminated(1, early).Obj(),
			},
			want: map[int]string{2: "b", 3: "c"},
		},
		"pods without finalizer or with removal in flight are skipped": {
			pods: []*corev1.Pod{
				builder.MakePod("a", ns).UID("a").OwnedByJob(job).Index("0").Terminated(1, early).Obj(),
				indexPod("b", "1", job, "0", "").Terminated(1, early).Obj(),
			},
			inFlight: []string{"b"},
			want:     map[int]string{},
		},
		"succeeded pods never wait": {
			pods: []*corev1.Pod{indexPod("a", "0", job, "0", "").Terminated(0, early).Obj()},
			want: map[int]string{},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			sc := &syncContext{
				job: job, pods: tc.pods, active: filterPods(tc.pods, isActive),
				succeededIndexes:     parseIndexSet(tc.succeeded, 5),
				expectedRmFinalizers: sets.New[types.UID](),
			}
			for _, n := range tc.inFlight {
				sc.expectedRmFinalizers.Insert(types.UID(n))
			}
			got := map[int]string{}
			for ix, p := range podsAwaitingReplacement(sc, parseIndexSet(tc.failed, 5)) {
				got[ix] = p.Name
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("awaiting replacement (-want +got):\n%s", diff)
			}
		})
	}
}

func TestIndexesPastBackoff(t *testing.T) {
	job := builder.MakeJob("j", ns).Indexed().Completions(5).BackoffLimitPerIndex(9).Obj()
	failedAt := func(ago time.Duration, counted, ignored string) *corev1.Pod {
		return indexPod("p", "0", job, counted, ignored).Terminated(1, metav1.NewTime(t0.Add(-ago))).Obj()
	}
	const base, maxDelay = 10 * time.Second, time.Minute
	cases := map[string]struct {
		indexes  []int
		awaiting map[int]*corev1.Pod
		want     []int
		wantWait time.Duration
	}{
		"no failures": {
			indexes: []int{0, 1}, want: []int{0, 1},
		},
		"first failure waits base": {
			indexes: []int{0}, awaiting: map[int]*corev1.Pod{0: failedAt(4*time.Second, "0", "")},
			wantWait: 6 * time.Second,
		},
		"third failure waits 4x base, ignored failures included": {
			indexes: []int{0}, awaiting: map[int]*corev1.Pod{0: failedAt(10*time.Second, "1", "1")},
			wantWait: 30 * time.Second,
		},
		"capped": {
			indexes: []int{0}, awaiting: map[int]*corev1.Pod{0: failedAt(0, "20", "")},
			wantWait: maxDelay,
		},
		"backoff over": {
			indexes: []int{0}, awaiting: map[int]*corev1.Pod{0: failedAt(11*time.Second, "0", "")},
			want: []int{0},
		},
		"ready indexes go now, the others wait without a requeue": {
			indexes: []int{0, 1, 2}, awaiting: map[int]*corev1.Pod{0: failedAt(time.Second, "0", ""), 2: failedAt(2*time.Second, "0", "")},
			want: []int{1},
		},
		"shortest wait of several": {
			indexes: []int{0, 2}, awaiting: map[int]*corev1.Pod{0: failedAt(time.Second, "0", ""), 2: failedAt(7*time.Second, "0", "")},
			wantWait: 3 * time.Second,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, wait := indexesPastBackoff(tc.indexes, tc.awaiting, t0, base, maxDelay)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("indexes (-want +got):\n%s", diff)
			}
			if wait != tc.wantWait {
				t.Errorf("wait %v, want %v", wait, tc.wantWait)
			}
		})
	}
}

// perIndexStatus is statusCounts plus the failed indexes ("<nil>" if unset).
type perIndexStatus struct {
	Counts        statusCounts
	FailedIndexes string
}

func perIndexStatusOf(job *batchv1.Job) perIndexStatus {
	out := perIndexStatus{Counts: countsOf(job), FailedIndexes: "<nil>"}
	if job.Status.FailedIndexes != nil {
		out.FailedIndexes = *job.Status.FailedIndexes
	}
	return out
}

// podSummary is a pod as the per-index sync tests compare it.
type podSummary struct {
	Name, Index, FailureCount, IgnoredCount string
	Finalizer                               bool
}

func summarisePods(pods []corev1.Pod) []podSummary {
	var out []podSummary
	for i := range pods {
		p := &pods[i]
		out = append(out, podSummary{
			Name: p.Name, Index: p.Annotations[batchv1.JobCompletionIndexAnnotation],
			FailureCount: p.Annotations[batchv1.JobIndexFailureCountAnnotation], IgnoredCount: p.Annotations[batchv1.JobIndexIgnoredFailureCountAnnotation],
			Finalizer: hasTrackingFinalizer(p),
		})
	}
	return out
}

func TestSyncBackoffLimitPerIndex(t *testing.T) {
	started := metav1.NewTime(t0.Add(-time.Hour))
	longAgo := metav1.NewTime(t0.Add(-time.Minute))
	justNow := metav1.NewTime(t0.Add(-time.Second))
	running := func(active int32) batchv1.JobStatus {
		return batchv1.JobStatus{StartTime: &started, Active: active, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0)}
	}
	base := func() *builder.JobWrapper {
		return builder.MakeJob("j", ns).Selector("u").ManagedBy(DefaultManagedBy).Indexed().BackoffLimitPerIndex(1)
	}
	cases := map[string]struct {
		// setup
		job  *batchv1.Job
		pods func(job *batchv1.Job) []*corev1.Pod
		// want
		want           perIndexStatus
		wantPods       []podSummary
		wantWrites     map[string]int
		wantFailedIdx  float64
		wantSucceedIdx float64
	}{
		"fresh pods carry a zero failure count, failedIndexes is empty not nil": {
			job:  base().Parallelism(2).Completions(2).Obj(),
			pods: func(*batchv1.Job) []*corev1.Pod { return nil },
			want: perIndexStatus{statusCounts{Active: 2, Started: true}, ""},
			wantPods: []podSummary{
				{Name: "j-0-00001", Index: "0", FailureCount: "0", Finalizer: true},
				{Name: "j-1-00002", Index: "1", FailureCount: "0", Finalizer: true},
			},
			wantWrites: map[string]int{"create pods": 2, "update jobs/status": 1},
		},
		"failure within the limit: replacement carries the count, failed pod keeps its finalizer": {
			job: base().Parallelism(2).Completions(2).Status(running(2)).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{
					indexPod("a", "0", job, "0", "").Terminated(1, longAgo).Obj(),
					indexPod("b", "1", job, "0", "").Phase(corev1.PodRunning).Obj(),
				}
			},
			want: perIndexStatus{statusCounts{Active: 2, Started: true}, ""},
			wantPods: []podSummary{
				{Name: "a", Index: "0", FailureCount: "0", Finalizer: true},
				{Name: "b", Index: "1", FailureCount: "0", Finalizer: true},
				{Name: "j-0-00001", Index: "0", FailureCount: "1", Finalizer: true},
			},
			wantWrites: map[string]int{"create pods": 1, "update jobs/status": 1},
		},
		"failed pod released once its index has a replacement": {
			job: base().Parallelism(2).Completions(2).Status(running(2)).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{
					indexPod("a", "0", job, "0", "").Terminated(1, longAgo).Obj(),
					indexPod("a2", "0", job, "1", "").Phase(corev1.PodRunning).Obj(),
					indexPod("b", "1", job, "0", "").Phase(corev1.PodRunning).Obj(),
				}
			},
			want: perIndexStatus{statusCounts{Active: 2, Failed: 1, Started: true}, ""},
			wantPods: []podSummary{
				{Name: "a", Index: "0", FailureCount: "0"},
				{Name: "a2", Index: "0", FailureCount: "1", Finalizer: true},
				{Name: "b", Index: "1", FailureCount: "0", Finalizer: true},
			},
			wantWrites: map[string]int{"update jobs/status": 2, "patch pods": 1},
		},
		"index backoff delays the replacement": {
			job: base().Parallelism(2).Completions(2).Status(running(2)).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{
					indexPod("a", "0", job, "0", "").Terminated(1, justNow).Obj(),
					indexPod("b", "1", job, "0", "").Phase(corev1.PodRunning).Obj(),
				}
			},
			want: perIndexStatus{statusCounts{Active: 1, Started: true}, ""},
			wantPods: []podSummary{
				{Name: "a", Index: "0", FailureCount: "0", Finalizer: true},
				{Name: "b", Index: "1", FailureCount: "0", Finalizer: true},
			},
			wantWrites: map[string]int{"update jobs/status": 1},
		},
		"index failed past its limit is not retried, the others go on": {
			job: base().Parallelism(2).Completions(3).Status(running(2)).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{
					indexPod("a", "0", job, "1", "").Terminated(1, longAgo).Obj(),
					indexPod("b", "1", job, "0", "").Phase(corev1.PodRunning).Obj(),
				}
			},
			want: perIndexStatus{statusCounts{Active: 2, Failed: 1, Started: true}, "0"},
			wantPods: []podSummary{
				{Name: "a", Index: "0", FailureCount: "1"},
				{Name: "b", Index: "1", FailureCount: "0", Finalizer: true},
				{Name: "j-2-00001", Index: "2", FailureCount: "0", Finalizer: true},
			},
			wantWrites:    map[string]int{"create pods": 1, "update jobs/status": 2, "patch pods": 1},
			wantFailedIdx: 1,
		},
		"every index finished with one failed: FailedIndexes": {
			job: base().Parallelism(2).Completions(2).Status(running(2)).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{
					indexPod("a", "0", job, "1", "").Terminated(1, longAgo).Obj(),
					indexPod("b", "1", job, "0", "").Terminated(0, longAgo).Obj(),
				}
			},
			want: perIndexStatus{statusCounts{Succeeded: 1, Failed: 1, CompletedIndexes: "1", Started: true,
				Conditions: []string{"FailureTarget=True/FailedIndexes", "Failed=True/FailedIndexes"}}, "0"},
			wantPods: []podSummary{
				{Name: "a", Index: "0", FailureCount: "1"},
				{Name: "b", Index: "1", FailureCount: "0"},
			},
			wantWrites:     map[string]int{"update jobs/status": 2, "patch pods": 2},
			wantFailedIdx:  1,
			wantSucceedIdx: 1,
		},
		"max failed indexes exceeded: running pods deleted and counted": {
			job: base().MaxFailedIndexes(0).Parallelism(3).Completions(3).Status(running(3)).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{
					indexPod("a", "0", job, "1", "").Terminated(1, longAgo).Obj(),
					indexPod("b", "1", job, "0", "").Phase(corev1.PodRunning).Obj(),
					indexPod("c", "2", job, "0", "").Phase(corev1.PodPending).Obj(),
				}
			},
			want: perIndexStatus{statusCounts{Terminating: 2, Failed: 3, Started: true,
				Conditions: []string{"FailureTarget=True/MaxFailedIndexesExceeded"}}, "0"},
			wantWrites:    map[string]int{"update jobs/status": 2, "patch pods": 3, "delete pods": 2},
			wantFailedIdx: 1,
		},
		"FailIndex rule fails the index on its first failure": {
			job: base().BackoffLimitPerIndex(3).Parallelism(2).Completions(2).Status(running(2)).PodFailurePolicy(
				builder.ExitCodeRule(batchv1.PodFailurePolicyActionFailIndex, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 42)).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{
					indexPod("a", "0", job, "0", "").Terminated(42, longAgo).Obj(),
					indexPod("b", "1", job, "0", "").Phase(corev1.PodRunning).Obj(),
				}
			},
			want: perIndexStatus{statusCounts{Active: 1, Failed: 1, Started: true}, "0"},
			wantPods: []podSummary{
				{Name: "a", Index: "0", FailureCount: "0"},
				{Name: "b", Index: "1", FailureCount: "0", Finalizer: true},
			},
			wantWrites:    map[string]int{"update jobs/status": 2, "patch pods": 1},
			wantFailedIdx: 1,
		},
		"ignored failure: replacement carries it apart, nothing counted": {
			job: base().Parallelism(2).Completions(2).Status(running(2)).PodFailurePolicy(
				builder.ExitCodeRule(batchv1.PodFailurePolicyActionIgnore, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 3)).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{
					indexPod("a", "0", job, "1", "").Terminated(3, longAgo).Obj(),
					indexPod("b", "1", job, "0", "").Phase(corev1.PodRunning).Obj(),
				}
			},
			want: perIndexStatus{statusCounts{Active: 2, Started: true}, ""},
			wantPods: []podSummary{
				{Name: "a", Index: "0", FailureCount: "1", Finalizer: true},
				{Name: "b", Index: "1", FailureCount: "0", Finalizer: true},
				{Name: "j-0-00001", Index: "0", FailureCount: "1", IgnoredCount: "1", Finalizer: true},
			},
			wantWrites: map[string]int{"create pods": 1, "update jobs/status": 1},
		},
		"ignored failure released once replaced, still not counted": {
			job: base().Parallelism(2).Completions(2).Status(running(2)).PodFailurePolicy(
				builder.ExitCodeRule(batchv1.PodFailurePolicyActionIgnore, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 3)).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{
					indexPod("a", "0", job, "0", "").Terminated(3, longAgo).Obj(),
					indexPod("a2", "0", job, "0", "1").Phase(corev1.PodRunning).Obj(),
					indexPod("b", "1", job, "0", "").Phase(corev1.PodRunning).Obj(),
				}
			},
			want: perIndexStatus{statusCounts{Active: 2, Started: true}, ""},
			wantPods: []podSummary{
				{Name: "a", Index: "0", FailureCount: "0"},
				{Name: "a2", Index: "0", FailureCount: "0", IgnoredCount: "1", Finalizer: true},
				{Name: "b", Index: "1", FailureCount: "0", Finalizer: true},
			},
			// The status write only sets failedIndexes to "".
			wantWrites: map[string]int{"update jobs/status": 1, "patch pods": 1},
		},
		"global backoffLimit still applies": {
			job: base().BackoffLimit(1).Parallelism(3).Completions(3).Status(running(3)).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{
					indexPod("a", "0", job, "0", "").Terminated(1, longAgo).Obj(),
					indexPod("b", "1", job, "0", "").Terminated(1, longAgo).Obj(),
					indexPod("c", "2", job, "0", "").Terminated(0, longAgo).Obj(),
				}
			},
			want: perIndexStatus{statusCounts{Succeeded: 1, Failed: 2, CompletedIndexes: "2", Started: true,
				Conditions: []string{"FailureTarget=True/BackoffLimitExceeded", "Failed=True/BackoffLimitExceeded"}}, ""},
			wantPods: []podSummary{
				{Name: "a", Index: "0", FailureCount: "0"},
				{Name: "b", Index: "1", FailureCount: "0"},
				{Name: "c", Index: "2", FailureCount: "0"},
			},
			wantWrites:     map[string]int{"update jobs/status": 2, "patch pods": 3},
			wantSucceedIdx: 1,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pods := tc.pods(tc.job)
			h, got, gotPods := syncFresh(t, Options{}, tc.job, pods...)
			if diff := cmp.Diff(tc.want, perIndexStatusOf(got), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
			if tc.wantPods != nil {
				if diff := cmp.Diff(tc.wantPods, summarisePods(gotPods)); diff != "" {
					t.Errorf("pods (-want +got):\n%s", diff)
				}
			}
			if diff := cmp.Diff(tc.wantWrites, h.writes(), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
			for status, want := range map[string]float64{"failed": tc.wantFailedIdx, "succeeded": tc.wantSucceedIdx} {
				var m dto.Metric
				if err := h.c.metrics.FinishedIndexes.WithLabelValues(status, "perIndex").Write(&m); err != nil {
					t.Fatal(err)
				}
				if v := m.GetCounter().GetValue(); v != want {
					t.Errorf("job_finished_indexes_total{status=%q,backoffLimit=\"perIndex\"} = %v, want %v", status, v, want)
				}
			}
		})
	}
}

// TestSyncIndexBackoff steps the clock through the backoff of one index:
// no replacement before it is over, one carrying the failure count after.
func TestSyncIndexBackoff(t *testing.T) {
	started := metav1.NewTime(t0.Add(-time.Hour))
	job := builder.MakeJob("j", ns).Selector("u").ManagedBy(DefaultManagedBy).Indexed().BackoffLimitPerIndex(2).
		Parallelism(1).Completions(1).Status(batchv1.JobStatus{StartTime: &started, Active: 1, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0)}).Obj()
	// Second failure of the index: 2*10s of backoff from its finish time.
	failed := indexPod("a", "0", job, "1", "").Terminated(1, metav1.NewTime(t0.Add(-time.Second))).Obj()
	h := newHarness(t, Options{PodFailureBackoff: 10 * time.Second}, job, failed)
	got, pods := h.sync(t, job)
	if len(pods) != 1 {
		t.Fatalf("within the backoff: %d pods, want 1", len(pods))
	}
	if err := refreshJob(h, got); err != nil {
		t.Fatal(err)
	}
	h.clock.Step(18 * time.Second)
	got, pods = h.sync(t, got)
	if len(pods) != 1 {
		t.Fatalf("1s before the end of the backoff: %d pods, want 1", len(pods))
	}
	if err := refreshJob(h, got); err != nil {
		t.Fatal(err)
	}
	h.clock.Step(2 * time.Second)
	_, pods = h.sync(t, got)
	want := []podSummary{
		{Name: "a", Index: "0", FailureCount: "1", Finalizer: true},
		{Name: "j-0-00001", Index: "0", FailureCount: "2", Finalizer: true},
	}
	if diff := cmp.Diff(want, summarisePods(pods)); diff != "" {
		t.Errorf("pods after the backoff (-want +got):\n%s", diff)
	}
}
