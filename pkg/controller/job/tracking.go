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

// The path of a pod through tracking (KEP-2307), with the invariant that
// it is counted exactly once even if the controller dies between any two
// writes:
//
//	created (with the finalizer)
//	  -> finished (phase Succeeded or Failed, or deleted: isFailed)
//	  -> uncounted: its UID is in status.uncountedTerminatedPods (for
//	     Indexed Jobs, a success goes straight into completedIndexes)
//	     [status write 1]
//	  -> released: its finalizer is removed [one pod patch]
//	  -> counted: its UID leaves the list in the write that adds it to
//	     status.succeeded or status.failed [status write 2]
//
// A sync moves every pod it can along this path: planTracking decides
// (pure), trackStatus applies. A UID is never both in the list and counted;
// a pod without the finalizer whose UID is not in the list is ignored, so a
// crash before write 1 loses nothing (the pod still holds the finalizer)
// and a crash after it recounts nothing.

// trackingPlan is what one sync does to the Job's finished pods.
type trackingPlan struct {
	// release are the pods whose finalizer to remove after status write 1.
	release []*corev1.Pod
	// addSucceeded and addFailed are the UIDs to append to
	// status.uncountedTerminatedPods in status write 1.
	addSucceeded, addFailed []types.UID
	// indexes are the newly succeeded indexes of an Indexed Job, added to
	// status.completedIndexes in status write 1.
	indexes []int
	// policyActions counts, by action, the accounted failures that matched
	// a podFailurePolicy rule (for the metric).
	policyActions map[batchv1.PodFailurePolicyAction]int
	// capped reports that MaxUncountedPods stopped the plan early; the
	// remaining pods wait for the next sync.
	capped bool
}

// planTracking decides which of the Job's pods holding the finalizer
// (withFinalizer, removals in flight excluded) are released in this sync,
// and which of them are added as uncounted successes, failures or completed
// indexes. pending is how many UIDs stay in uncountedTerminatedPods; with
// them, at most maxUncounted are pending after the plan. A pod is released
// when it finished, or when the Job is being deleted or heading to an end
// (then unfinished pods count as failed if the Job is failing, and not at
// all if it is succeeding); a failed pod that keeps its index's failure
// count for the replacement (backoffLimitPerIndex) is kept. pods must be in
// index order for Indexed Jobs, so a capped sync records the lowest indexes.
func planTracking(sc *syncContext, pods []*corev1.Pod, withFinalizer sets.Set[types.UID], pending, maxUncounted int) trackingPlan {
	job := sc.job
	indexed := isIndexed(job)
	ending := sc.interim != nil || job.DeletionTimestamp != nil
	var plan trackingPlan
	for _, p := range pods {
		if !withFinalizer.Has(p.UID) {
			continue
		}
		failed := isFailed(p, job)
		if !ending && p.Status.Phase != corev1.PodSucceeded && !failed {
			continue
		}
		if !ending && awaitsReplacement(sc, p) {
			// Its failure counts travel to the replacement pod first.
			continue
		}
		plan.release = append(plan.release, p)
		switch {
		case p.Status.Phase == corev1.PodSucceeded && !sc.uncountedFailed.Has(p.UID):
			if indexed {
				ix := podIndex(p)
				if validIndex(p, *job.Spec.Completions) && !sc.prevSucceededIndexes.has(ix) && !(sc.failedIndexes != nil && sc.failedIndexes.has(ix)) {
					plan.indexes = append(plan.indexes, ix)
				}
			} else if !sc.uncountedSucceeded.Has(p.UID) {
				plan.addSucceeded = append(plan.addSucceeded, p.UID)
			}
		case failed || sc.failing():
			// Once the Job is failing, every unfinished pod counts as failed.
			if sc.uncountedFailed.Has(p.UID) || (indexed && !validIndex(p, *job.Spec.Completions)) {
				break
			}
			counts := true
			if policy := job.Spec.PodFailurePolicy; policy != nil {
				var action *batchv1.PodFailurePolicyAction
				_, counts, action = matchPodFailurePolicy(policy, p)
				if action != nil {
					if plan.policyActions == nil {
						plan.policyActions = map[batchv1.PodFailurePolicyAction]int{}
					}
					plan.policyActions[*action]++
				}
			}
			if counts {
				plan.addFailed = append(plan.addFailed, p.UID)
			}
		}
		if pending+len(plan.indexes)+len(plan.addSucceeded)+len(plan.addFailed) >= maxUncounted {
			plan.capped = true
			break
		}
	}
	return plan
}

// trackStatus applies the tracking plan and writes the status:
//  1. UIDs of pods released without a finalizer since an earlier sync move
//     into the counters, and the plan's uncounted UIDs, completed indexes
//     and the interim condition are added; status write 1 (skipped when
//     nothing changed);
//  2. the plan's pods lose their finalizer;
//  3. the UIDs of the pods now released move into the counters, and, if
//     the Job is heading to an end with nothing uncounted or terminating
//     left, the terminal condition is set; status write 2 (skipped when
//     nothing changed). So the counters move in the sync that released
//     the pods, as upstream's do.
//
// A Job whose every finished pod is accounted in this sync and that has no
// pod left running or terminating is finished in one write instead
// (finishNow). needsFlush says whether the caller already changed the
// status.
func (c *Controller) trackStatus(ctx context.Context, sc *syncContext, needsFlush bool) error {
	logger := klog.FromContext(ctx)
	job := sc.job
	pods := sc.pods
	if isIndexed(job) {
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
	u := job.Status.UncountedTerminatedPods
	plan := planTracking(sc, pods, withFinalizer, len(u.Succeeded)+len(u.Failed), c.opts.MaxUncountedPods)
	if len(plan.addSucceeded)+len(plan.addFailed) > 0 {
		u.Succeeded = append(u.Succeeded, plan.addSucceeded...)
		u.Failed = append(u.Failed, plan.addFailed...)
		needsFlush = true
	}
	if applyIndexes(job, sc, plan.indexes) {
		needsFlush = true
	}
	// The interim condition must be stored before any finalizer is removed.
	if sc.interim != nil && !conditionTrue(job.Status.Conditions, sc.interim.Type) {
		job.Status.Conditions = append(job.Status.Conditions, *sc.interim)
		needsFlush = true
	}

	if !plan.capped && sc.terminal != nil && sc.terminating == 0 {
		return c.finishNow(ctx, sc, plan, before)
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
	}
	c.recordPodFailurePolicyActions(plan.policyActions)

	var rmErr error
	if len(plan.release) > 0 {
		var released []bool
		released, rmErr = c.releaseFinalizers(ctx, sc.key, plan.release)
		for i, p := range plan.release {
			if released[i] {
				withFinalizer.Delete(p.UID)
			}
		}
	}
	moved := countReleased(&job.Status, withFinalizer)
	finished := rmErr == nil && !plan.capped && c.markFinished(logger, sc)
	if moved || finished {
		written, err := c.updateStatus(ctx, job)
		if err != nil {
			return fmt.Errorf("counting pods without finalizers: %w", errors.Join(rmErr, err))
		}
		if finished {
			c.recordFinished(written, sc.terminal)
			c.finishedJobs.Store(written.UID, struct{}{})
		}
		c.recordPodsFinished(written, before)
	}
	if plan.capped {
		// More finished pods wait; their own events may all be in already.
		c.enqueueBatched(logger, job)
	}
	return rmErr
}

// applyIndexes writes the Indexed Job's completed indexes (with the plan's
// new ones), the succeeded count and, with backoffLimitPerIndex, the
// failed indexes into its status. It reports whether the status changed.
func applyIndexes(job *batchv1.Job, sc *syncContext, newIndexes []int) bool {
	if !isIndexed(job) {
		return false
	}
	changed := false
	sc.succeededIndexes = sc.succeededIndexes.withIndexes(newIndexes)
	if s := sc.succeededIndexes.String(); s != job.Status.CompletedIndexes {
		job.Status.CompletedIndexes = s
		changed = true
	}
	job.Status.Succeeded = int32(sc.succeededIndexes.count())
	var failedStr *string
	if sc.failedIndexes != nil {
		failedStr = ptr.To(sc.failedIndexes.String())
	}
	if !ptr.Equal(failedStr, job.Status.FailedIndexes) {
		job.Status.FailedIndexes = failedStr
		changed = true
	}
	return changed
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
	fc := sc.terminal
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
	forEachPod(len(pods), func(i int) {
		pod := pods[i]
		err := c.pods.removeFinalizer(ctx, pod.Namespace, pod.Name, removeFinalizerPatch(pod))
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
// counted; if it succeeds, the pods' finalizers are only cleanup, which
// syncFinished and the orphan queue complete after a crash or a failed
// patch. It saves one status write per finishing Job compared with
// upstream; the price is that Complete can be seen a few milliseconds
// before the last finalizers are gone.
func (c *Controller) finishNow(ctx context.Context, sc *syncContext, plan trackingPlan, before batchv1.JobStatus) error {
	logger := klog.FromContext(ctx)
	job := sc.job
	countReleased(&job.Status, sets.New[types.UID]())
	if !c.markFinished(logger, sc) {
		return fmt.Errorf("job %s: terminal condition refused with nothing uncounted", sc.key)
	}
	// Mark before the write so that a sync woken by the write's update event
	// before the cache shows it does not act on the Job again.
	c.finishedJobs.Store(job.UID, struct{}{})
	written, err := c.updateStatus(ctx, job)
	if err != nil {
		c.finishedJobs.Delete(job.UID)
		return fmt.Errorf("writing finished status: %w", err)
	}
	c.recordFinished(written, sc.terminal)
	c.recordPodsFinished(written, before)
	c.recordPodFailurePolicyActions(plan.policyActions)
	if len(plan.release) == 0 {
		return nil
	}
	if _, err := c.releaseFinalizers(ctx, sc.key, plan.release); err != nil {
		logger.Error(err, "Removing finalizers of a finished job's pods; the orphan queue retries", "job", klog.KObj(job))
		c.enqueueSelectorOrphans(logger, written)
	}
	return nil
}
