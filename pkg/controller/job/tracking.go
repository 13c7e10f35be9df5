package job

import (
	"context"
	"errors"
	"fmt"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
)

// The path of a pod through tracking (KEP-2307), with the invariant that
// it is counted exactly once even if the controller dies between any two
// writes:
//
//	created (with the finalizer)
//	  -> finished (phase Succeeded or Failed, or deleted: isFailed)
//	  -> uncounted: its UID is in status.uncountedTerminatedPods (for
//	     Indexed Jobs, a success goes straight into completedIndexes)
//	     [status write 1, with the interim condition if the Job is ending]
//	  -> released: its finalizer is removed [one pod patch]
//	  -> counted: its UID leaves the list in the write that adds it to
//	     status.succeeded or status.failed [status write 2]
//
// A sync moves every pod it can along this path: planTracking decides
// (pure, tracking_plan.go), trackStatus applies. A UID is never both in the
// list and counted; a pod without the finalizer whose UID is not in the
// list is ignored, so a crash before write 1 loses nothing (the pod still
// holds the finalizer) and a crash after it recounts nothing.
//
// The terminal condition (Complete or Failed) comes last, in status write
// 2 at the earliest, and only once no UID is left in the list and no pod is
// terminating (terminalDue): a client that sees Complete or Failed may rely
// on every pod of the Job being counted and released. A finalizer removal
// that fails keeps its UID in the list, so it holds the condition back
// until a later sync releases the pod.

// trackStatus applies the tracking plan and writes the status:
//  1. UIDs of pods released without a finalizer since an earlier sync move
//     into the counters, and the plan's uncounted UIDs, completed indexes
//     and the interim condition are added; status write 1 (skipped when
//     nothing changed);
//  2. the plan's pods lose their finalizer;
//  3. the UIDs of the pods now released move into the counters, and, if
//     the Job is heading to an end and terminalDue holds, the terminal
//     condition is set; status write 2 (skipped when nothing changed). So
//     the counters move in the sync that released the pods, as upstream's
//     do.
//
// needsFlush says whether the caller already changed the status.
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
			c.finishedJobs.Store(written.UID, struct{}{})
			c.recordFinished(written, sc.terminal)
		}
		c.recordPodsFinished(written, before)
	}
	if plan.capped {
		// More finished pods wait; their own events may all be in already.
		c.enqueueBatched(logger, job)
	}
	return rmErr
}

// markFinished sets the terminal condition (and completionTime for
// Complete) on the sync's Job when it is heading to one and terminalDue
// holds. It reports whether it did.
func (c *Controller) markFinished(logger klog.Logger, sc *syncContext) bool {
	fc := sc.terminal
	if fc == nil {
		return false
	}
	job := sc.job
	if due, wait := terminalDue(job.Status, sc.terminating); !due {
		logger.V(4).Info("Delaying the terminal condition", "job", klog.KObj(job), "condition", fc.Type, "waitingFor", wait)
		return false
	}
	job.Status.Conditions, _ = setCondition(job.Status.Conditions, fc.Type, fc.Status, fc.Reason, fc.Message, fc.LastTransitionTime.Time)
	if fc.Type == batchv1.JobComplete {
		t := fc.LastTransitionTime
		job.Status.CompletionTime = &t
	}
	return true
}
