package job

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/controller/job/metrics"
)

// trackStatus accounts finished pods with the KEP-2307 protocol and writes
// the status:
//  1. finished pods holding the finalizer go to uncountedTerminatedPods
//     (for Indexed Jobs, succeeded ones go straight to completedIndexes),
//     together with the interim FailureTarget/SuccessCriteriaMet condition;
//     one status write;
//  2. their finalizers are removed;
//  3. UIDs whose pods no longer hold the finalizer (or are gone) move from
//     uncountedTerminatedPods into the counters, in the first write of the
//     next sync (step 1 of that sync) unless the Job finishes now;
//  4. when the Job is heading to a terminal condition and nothing is
//     uncounted or terminating, Complete/Failed and completionTime are set;
//     one more status write.
//
// At most MaxUncountedPods pods are taken per sync; the status and pod
// updates wake the Job again for the rest. needsFlush says whether the
// caller already changed the status.
//
// When the Job finishes in this sync (see finishNow), steps 1, 3 and 4 are
// one write and step 2 follows it.
func (c *Controller) trackStatus(ctx context.Context, sc *syncContext, needsFlush bool) error {
	logger := klog.FromContext(ctx)
	job := sc.job
	indexed := isIndexed(job)
	now := c.clock.Now()
	pods := sc.pods
	if indexed {
		// Add indexes in order, so a capped sync records the lowest ones.
		pods = slices.Clone(pods)
		slices.SortStableFunc(pods, func(a, b *corev1.Pod) int { return podIndex(a) - podIndex(b) })
	}
	withFinalizer := sets.New[types.UID]()
	for _, p := range pods {
		if hasTrackingFinalizer(p) && !sc.expectedRmFinalizers.Has(p.UID) {
			withFinalizer.Insert(p.UID)
		}
	}
	before := job.Status
	if countReleased(&job.Status, withFinalizer) {
		needsFlush = true
	}

	uncounted := job.Status.UncountedTerminatedPods
	var toRelease []*corev1.Pod
	var newIndexes []int
	capped := false
	failing := sc.finishedCondition != nil && sc.finishedCondition.Type != batchv1.JobSuccessCriteriaMet
	for _, p := range pods {
		if !withFinalizer.Has(p.UID) {
			continue
		}
		failed := isFailed(p, job)
		if !(job.DeletionTimestamp != nil || sc.finishedCondition != nil || p.Status.Phase == corev1.PodSucceeded || failed) {
			continue
		}
		if job.DeletionTimestamp == nil && sc.finishedCondition == nil && awaitsReplacement(sc, p) {
			// Its failure counts travel to the replacement pod first.
			logger.V(4).Info("Keeping the finalizer of a failed pod until its index has a replacement", "pod", klog.KObj(p))
			continue
		}
		toRelease = append(toRelease, p)
		switch {
		case p.Status.Phase == corev1.PodSucceeded && !sc.uncountedFailed.Has(p.UID):
			if indexed {
				if validIndex(p, *job.Spec.Completions) && !sc.prevSucceededIndexes.has(podIndex(p)) {
					newIndexes = append(newIndexes, podIndex(p))
					needsFlush = true
				}
			} else if !sc.uncountedSucceeded.Has(p.UID) {
				uncounted.Succeeded = append(uncounted.Succeeded, p.UID)
				needsFlush = true
			}
		case failed || failing:
			// Once the Job is failing, every unfinished pod counts as failed.
			if !sc.uncountedFailed.Has(p.UID) && (!indexed || validIndex(p, *job.Spec.Completions)) {
				if countFailureOf(sc, p) {
					uncounted.Failed = append(uncounted.Failed, p.UID)
					needsFlush = true
				}
			}
		}
		if len(newIndexes)+len(uncounted.Succeeded)+len(uncounted.Failed) >= c.opts.MaxUncountedPods {
			capped = true
			break
		}
	}
	if indexed {
		sc.succeededIndexes = sc.succeededIndexes.withIndexes(newIndexes)
		if s := sc.succeededIndexes.String(); s != job.Status.CompletedIndexes {
			job.Status.CompletedIndexes = s
			needsFlush = true
		}
		job.Status.Succeeded = int32(sc.succeededIndexes.count())
		var failedStr *string
		if sc.failedIndexes != nil {
			failedStr = ptr.To(sc.failedIndexes.String())
		}
		if !ptr.Equal(failedStr, job.Status.FailedIndexes) {
			job.Status.FailedIndexes = failedStr
			needsFlush = true
		}
	}

	// The interim condition must be stored before any finalizer is removed.
	if fc := sc.finishedCondition; fc != nil {
		switch fc.Type {
		case batchv1.JobFailureTarget:
			job.Status.Conditions = append(job.Status.Conditions, *fc)
			needsFlush = true
			sc.finishedCondition = terminalFor(fc, now)
		case batchv1.JobSuccessCriteriaMet:
			if !conditionTrue(job.Status.Conditions, batchv1.JobSuccessCriteriaMet) {
				job.Status.Conditions = append(job.Status.Conditions, *fc)
				needsFlush = true
			}
			sc.finishedCondition = terminalFor(fc, now)
		}
	}

	if !capped && sc.finishedCondition != nil && sc.terminating == 0 {
		return c.finishNow(ctx, sc, toRelease, before)
	}

	var err error
	if needsFlush {
		if job, err = c.updateStatus(ctx, job); err != nil {
			return fmt.Errorf("adding uncounted pods to status: %w", err)
		}
		sc.job = job
		c.backoff.set(sc.key, sc.newBackoff)
		c.recordPodsFinished(job, before)
		before = job.Status
		needsFlush = false
	}
	c.recordPodFailurePolicyActions(sc)

	var rmErr error
	if len(toRelease) > 0 {
		var released []bool
		released, rmErr = c.releaseFinalizers(ctx, sc.key, toRelease)
		for i, p := range toRelease {
			if released[i] {
				withFinalizer.Delete(p.UID)
			}
		}
	}
	if countReleased(&job.Status, withFinalizer) {
		needsFlush = true
	}
	if rmErr != nil {
		if needsFlush {
			if _, err := c.updateStatus(ctx, job); err != nil {
				return fmt.Errorf("counting pods without finalizers: %w", errors.Join(rmErr, err))
			}
			c.recordPodsFinished(job, before)
		}
		return rmErr
	}

	finished := !capped && c.markFinished(logger, sc)
	if !finished {
		if needsFlush {
			// Moving the released pods into the counters can wait for the
			// next sync, which their finalizer-removal updates trigger anyway
			// and which counts them together with whatever finishes next.
			// This halves the status writes of big Jobs and stays exact: a
			// UID leaves uncountedTerminatedPods only in the write that adds
			// it to a counter.
			c.enqueueBatched(logger, job)
		}
		return nil
	}
	written, err := c.updateStatus(ctx, job)
	if err != nil {
		return fmt.Errorf("counting pods without finalizers: %w", err)
	}
	if finished {
		c.recordFinished(written, sc.finishedCondition)
		c.finishedJobs.Store(written.UID, struct{}{})
	}
	c.recordPodsFinished(written, before)
	return nil
}

// countReleased moves the UIDs of uncountedTerminatedPods whose pods no
// longer hold the finalizer (not in withFinalizer) into the succeeded and
// failed counters. It reports whether the status changed.
func countReleased(status *batchv1.JobStatus, withFinalizer sets.Set[types.UID]) bool {
	u := status.UncountedTerminatedPods
	keep := func(uids []types.UID) []types.UID {
		var out []types.UID
		for _, uid := range uids {
			if withFinalizer.Has(uid) {
				out = append(out, uid)
			}
		}
		return out
	}
	changed := false
	if k := keep(u.Succeeded); len(k) != len(u.Succeeded) {
		status.Succeeded += int32(len(u.Succeeded) - len(k))
		u.Succeeded = k
		changed = true
	}
	if k := keep(u.Failed); len(k) != len(u.Failed) {
		status.Failed += int32(len(u.Failed) - len(k))
		u.Failed = k
		changed = true
	}
	return changed
}

// markFinished sets the terminal condition (and completionTime for
// Complete) when the Job is heading to one and no pod is uncounted or
// terminating. It reports whether it did.
func (c *Controller) markFinished(logger klog.Logger, sc *syncContext) bool {
	fc := sc.finishedCondition
	if fc == nil {
		return false
	}
	job := sc.job
	if u := job.Status.UncountedTerminatedPods; len(u.Succeeded)+len(u.Failed) > 0 {
		logger.V(4).Info("Delaying the terminal condition while pods are uncounted", "job", klog.KObj(job), "condition", fc.Type)
		return false
	}
	if sc.terminating > 0 {
		logger.V(4).Info("Delaying the terminal condition while pods are terminating", "job", klog.KObj(job), "condition", fc.Type, "terminating", sc.terminating)
		return false
	}
	job.Status.Conditions, _ = setCondition(job.Status.Conditions, fc.Type, fc.Status, fc.Reason, fc.Message, fc.LastTransitionTime.Time)
	if fc.Type == batchv1.JobComplete {
		t := fc.LastTransitionTime
		job.Status.CompletionTime = &t
	}
	return true
}

// releaseFinalizers removes the tracking finalizer from pods, one patch
// each, recording the removals as expected first. The i-th result is true
// if pod i no longer holds the finalizer (a pod that is gone counts).
func (c *Controller) releaseFinalizers(ctx context.Context, key string, pods []*corev1.Pod) ([]bool, error) {
	uids := make([]types.UID, len(pods))
	for i, p := range pods {
		uids[i] = p.UID
	}
	c.finalizers.expect(key, uids)
	done := make([]bool, len(pods))
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for i, pod := range pods {
		wg.Go(func() {
			err := c.pods.PatchPod(ctx, pod.Namespace, pod.Name, removeFinalizerPatch(pod))
			if err != nil {
				// No update will come for this pod.
				c.finalizers.observed(key, pod.UID)
				if !apierrors.IsNotFound(err) {
					mu.Lock()
					errs = append(errs, fmt.Errorf("removing tracking finalizer from %s: %w", klog.KObj(pod), err))
					mu.Unlock()
					return
				}
			}
			done[i] = true
		})
	}
	wg.Wait()
	return done, errors.Join(errs...)
}

// recordFinished records the terminal events and jobs_finished_total.
func (c *Controller) recordFinished(job *batchv1.Job, cond *batchv1.JobCondition) {
	mode := completionModeLabel(job)
	if cond.Type == batchv1.JobComplete {
		if job.Spec.Completions != nil && job.Status.Succeeded > *job.Spec.Completions {
			c.recorder.Event(job, corev1.EventTypeWarning, ReasonTooManySucceededPods, "Too many succeeded pods running after completion count reached")
		}
		c.recorder.Event(job, corev1.EventTypeNormal, ReasonCompleted, "Job completed")
		c.metrics.JobsFinished.WithLabelValues(mode, metrics.Succeeded, cond.Reason).Inc()
		return
	}
	c.recorder.Event(job, corev1.EventTypeWarning, cond.Reason, cond.Message)
	c.metrics.JobsFinished.WithLabelValues(mode, metrics.Failed, cond.Reason).Inc()
}

// recordPodsFinished feeds job_pods_finished_total (and, for Indexed Jobs,
// job_finished_indexes_total) with the counter changes since before.
func (c *Controller) recordPodsFinished(job *batchv1.Job, before batchv1.JobStatus) {
	mode := completionModeLabel(job)
	var succeeded int
	if isIndexed(job) {
		limit := int(*job.Spec.Completions)
		if job.Status.CompletedIndexes != before.CompletedIndexes {
			succeeded = parseIndexSet(job.Status.CompletedIndexes, limit).count() - parseIndexSet(before.CompletedIndexes, limit).count()
		}
		limitLabel := metrics.BackoffLimitGlobal
		if hasBackoffLimitPerIndex(job) {
			limitLabel = metrics.BackoffLimitPerIndex
			if failed := failedIndexCount(job.Status.FailedIndexes, limit) - failedIndexCount(before.FailedIndexes, limit); failed > 0 {
				c.metrics.FinishedIndexes.WithLabelValues(metrics.Failed, limitLabel).Add(float64(failed))
			}
		}
		c.metrics.FinishedIndexes.WithLabelValues(metrics.Succeeded, limitLabel).Add(float64(max(succeeded, 0)))
	} else {
		succeeded = int(job.Status.Succeeded - before.Succeeded)
	}
	if succeeded > 0 {
		c.metrics.PodsFinished.WithLabelValues(mode, metrics.Succeeded).Add(float64(succeeded))
	}
	if failed := job.Status.Failed - before.Failed; failed > 0 {
		c.metrics.PodsFinished.WithLabelValues(mode, metrics.Failed).Add(float64(failed))
	}
}

// finishNow finishes a Job whose every finished pod is accounted in this
// sync and that has no pod left running or terminating: the counters, the
// interim and the terminal condition go out in one status write, and only
// then are the finalizers removed. This is exact under crashes because a
// finished Job is never counted again: if the write fails nothing was
// counted; if it succeeds, the pods' finalizers are only cleanup, which the
// orphan queue completes after a crash or a failed patch. It saves one
// status write per finishing Job compared with upstream.
func (c *Controller) finishNow(ctx context.Context, sc *syncContext, toRelease []*corev1.Pod, before batchv1.JobStatus) error {
	logger := klog.FromContext(ctx)
	job := sc.job
	countReleased(&job.Status, sets.New[types.UID]())
	if !c.markFinished(logger, sc) {
		return fmt.Errorf("job %s: terminal condition refused with nothing uncounted", sc.key)
	}
	// Mark before the write so the update event does not also queue the
	// finalizer cleanup that follows here.
	c.finishedJobs.Store(job.UID, struct{}{})
	written, err := c.updateStatus(ctx, job)
	if err != nil {
		c.finishedJobs.Delete(job.UID)
		return fmt.Errorf("writing finished status: %w", err)
	}
	c.recordFinished(written, sc.finishedCondition)
	c.recordPodsFinished(written, before)
	c.recordPodFailurePolicyActions(sc)
	if len(toRelease) == 0 {
		return nil
	}
	if _, err := c.releaseFinalizers(ctx, sc.key, toRelease); err != nil {
		logger.Error(err, "Removing finalizers of a finished job's pods; the orphan queue retries", "job", klog.KObj(job))
		c.enqueueSelectorOrphans(logger, written)
	}
	return nil
}
