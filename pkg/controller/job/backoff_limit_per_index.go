package job

import (
	"math"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
)

// backoffLimitPerIndex (KEP-3850) for Indexed Jobs: each index has its own
// failure budget and its own re-creation backoff, and an index whose budget
// is spent (or whose pod matched a FailIndex rule of the podFailurePolicy)
// is marked failed in status.failedIndexes and never retried. The failures
// of an index are carried from each failed pod to its replacement in the
// pod annotations batch.kubernetes.io/job-index-failure-count (failures
// that count) and batch.kubernetes.io/job-index-ignored-failure-count
// (failures an Ignore rule matched); so that the count is not lost, a
// failed pod keeps its tracking finalizer until its index has a
// replacement (or the index is finished, or the Job is).

// Condition messages of a Job failed by backoffLimitPerIndex (the reasons
// are batchv1's).
const (
	msgFailedIndexes            = "Job has failed indexes"
	msgMaxFailedIndexesExceeded = "Job has exceeded the specified maximal number of failed indexes"
)

// hasBackoffLimitPerIndex reports whether the Job counts failures per index.
func hasBackoffLimitPerIndex(job *batchv1.Job) bool {
	return job.Spec.BackoffLimitPerIndex != nil
}

// indexFailureCounts returns the failures of the pod's index before this
// pod, as its annotations record them: the ones that count against
// backoffLimitPerIndex and the ones an Ignore rule matched. A missing or
// corrupt annotation (not a number, negative, above MaxInt32) reads as 0.
func indexFailureCounts(pod *corev1.Pod) (counted, ignored int32) {
	return annotationCount(pod, batchv1.JobIndexFailureCountAnnotation), annotationCount(pod, batchv1.JobIndexIgnoredFailureCountAnnotation)
}

// annotationCount parses a failure-count annotation, 0 if unusable.
func annotationCount(pod *corev1.Pod, key string) int32 {
	v, ok := pod.Annotations[key]
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > math.MaxInt32 {
		return 0
	}
	return int32(n)
}

// failureVerdict applies the Job's podFailurePolicy to a failed pod: whether
// the failure counts (not matched by Ignore) and whether a FailIndex rule
// matched. Without a policy every failure counts.
func failureVerdict(job *batchv1.Job, pod *corev1.Pod) (counts, failIndex bool) {
	if job.Spec.PodFailurePolicy == nil {
		return true, false
	}
	_, counts, action := matchPodFailurePolicy(job.Spec.PodFailurePolicy, pod)
	return counts, action != nil && *action == batchv1.PodFailurePolicyActionFailIndex
}

// isIndexFailed reports whether the pod's failure makes its index failed:
// a FailIndex rule matched, or the failure counts and the index already had
// backoffLimitPerIndex counted failures before it.
func isIndexFailed(job *batchv1.Job, pod *corev1.Pod) bool {
	if !isFailed(pod, job) {
		return false
	}
	counts, failIndex := failureVerdict(job, pod)
	if failIndex {
		return true
	}
	counted, _ := indexFailureCounts(pod)
	return counts && counted >= *job.Spec.BackoffLimitPerIndex
}

// failedIndexes returns status.failedIndexes plus the indexes that pods
// not yet accounted make failed: pods still holding the tracking finalizer
// whose removal is not in flight (inFlight). A pod whose removal is in
// flight was accounted by the status write that preceded it; reading it
// again, after the cache showed its deletion but not yet the removal, could
// fail the index of a pod the Job itself deleted.
func failedIndexes(job *batchv1.Job, pods []*corev1.Pod, inFlight sets.Set[types.UID]) indexSet {
	completions := *job.Spec.Completions
	var prev indexSet
	if job.Status.FailedIndexes != nil {
		prev = parseIndexSet(*job.Status.FailedIndexes, int(completions))
	}
	var fresh []int
	for _, p := range pods {
		if hasTrackingFinalizer(p) && !inFlight.Has(p.UID) && validIndex(p, completions) && isIndexFailed(job, p) {
			fresh = append(fresh, podIndex(p))
		}
	}
	return prev.withIndexes(fresh)
}

// failedIndexesCondition decides whether failed indexes fail the Job: more
// than maxFailedIndexes of them (MaxFailedIndexesExceeded), or at least one
// once every index is either succeeded or failed (FailedIndexes). It
// returns the interim FailureTarget condition, or nil.
func failedIndexesCondition(job *batchv1.Job, failed, succeeded indexSet, now time.Time) *batchv1.JobCondition {
	switch nFailed := failed.count(); {
	case job.Spec.MaxFailedIndexes != nil && nFailed > int(*job.Spec.MaxFailedIndexes):
		return newCondition(batchv1.JobFailureTarget, corev1.ConditionTrue, batchv1.JobReasonMaxFailedIndexesExceeded, msgMaxFailedIndexesExceeded, now)
	case nFailed > 0 && nFailed+succeeded.count() >= int(*job.Spec.Completions):
		return newCondition(batchv1.JobFailureTarget, corev1.ConditionTrue, batchv1.JobReasonFailedIndexes, msgFailedIndexes, now)
	}
	return nil
}

// podsAwaitingReplacement returns, per index, the failed pod whose tracking
// finalizer must stay until the index has a replacement pod: the index is
// neither succeeded, failed nor active, and of its unaccounted failed pods
// this is the one with the most failures recorded (the latest to finish
// among equals). Its annotations seed the replacement's; its finish time
// starts the index's backoff.
func podsAwaitingReplacement(sc *syncContext, failed indexSet) map[int]*corev1.Pod {
	job := sc.job
	active := indexesOf(sc.active)
	out := map[int]*corev1.Pod{}
	for _, p := range sc.pods {
		if !hasTrackingFinalizer(p) || sc.expectedRmFinalizers.Has(p.UID) || !isFailed(p, job) || !validIndex(p, *job.Spec.Completions) {
			continue
		}
		ix := podIndex(p)
		if sc.succeededIndexes.has(ix) || failed.has(ix) || active.Has(ix) {
			continue
		}
		if cur, ok := out[ix]; ok && !laterFailure(p, cur) {
			continue
		}
		out[ix] = p
	}
	return out
}

// laterFailure reports whether failed pod a supersedes b within an index:
// at least as many failures recorded and finished no earlier.
func laterFailure(a, b *corev1.Pod) bool {
	return totalIndexFailures(a) >= totalIndexFailures(b) && !podFinishTime(a).Before(podFinishTime(b))
}

// totalIndexFailures is the index's failures before the pod, counted or not.
func totalIndexFailures(pod *corev1.Pod) int32 {
	counted, ignored := indexFailureCounts(pod)
	return counted + ignored
}

// replacementFailureCounts returns the failure-count annotations of the pod
// that replaces failed pod replaced in its index: its counts plus its own
// failure, in the ignored count if an Ignore rule matched it. Zero for an
// index without a failed pod.
func replacementFailureCounts(job *batchv1.Job, replaced *corev1.Pod) (counted, ignored int32) {
	if replaced == nil {
		return 0, 0
	}
	counted, ignored = indexFailureCounts(replaced)
	if counts, _ := failureVerdict(job, replaced); counts {
		counted++
	} else {
		ignored++
	}
	return counted, ignored
}

// setIndexFailureAnnotations stamps the failure counts of a new pod for an
// index on its template: the counted one always, the ignored one when not 0.
func setIndexFailureAnnotations(tmpl *corev1.PodTemplateSpec, job *batchv1.Job, replaced *corev1.Pod) {
	counted, ignored := replacementFailureCounts(job, replaced)
	if tmpl.Annotations == nil {
		tmpl.Annotations = map[string]string{}
	}
	tmpl.Annotations[batchv1.JobIndexFailureCountAnnotation] = strconv.Itoa(int(counted))
	if ignored > 0 {
		tmpl.Annotations[batchv1.JobIndexIgnoredFailureCountAnnotation] = strconv.Itoa(int(ignored))
	}
}

// indexBackoff is how long index creation must still wait after its last
// failed pod (nil: no failure, no wait): the backoff delay for the index's
// failures so far, this one included, counted from the pod's finish time.
func indexBackoff(lastFailed *corev1.Pod, now time.Time, base, maxDelay time.Duration) time.Duration {
	if lastFailed == nil {
		return 0
	}
	finished := podFinishTime(lastFailed)
	return remainingBackoff(backoffRecord{failuresAfterLastSuccess: totalIndexFailures(lastFailed) + 1, lastFailureTime: &finished}, now, base, maxDelay)
}

// indexesPastBackoff keeps the indexes whose backoff is over. If none is,
// it also returns the shortest remaining wait, after which to sync again.
func indexesPastBackoff(indexes []int, awaiting map[int]*corev1.Pod, now time.Time, base, maxDelay time.Duration) ([]int, time.Duration) {
	var ready []int
	var wait time.Duration
	for _, ix := range indexes {
		left := indexBackoff(awaiting[ix], now, base, maxDelay)
		switch {
		case left <= 0:
			ready = append(ready, ix)
		case wait == 0 || left < wait:
			wait = left
		}
	}
	if len(ready) > 0 {
		return ready, 0
	}
	return nil, wait
}

// awaitsReplacement reports whether the pod is the failed pod of its index
// that keeps its finalizer until a replacement exists.
func awaitsReplacement(sc *syncContext, pod *corev1.Pod) bool {
	p, ok := sc.awaitingReplacement[podIndex(pod)]
	return ok && p.UID == pod.UID
}

// failedIndexCount is the number of indexes below limit in a
// status.failedIndexes value (0 when unset).
func failedIndexCount(failed *string, limit int) int {
	if failed == nil {
		return 0
	}
	return parseIndexSet(*failed, limit).count()
}
