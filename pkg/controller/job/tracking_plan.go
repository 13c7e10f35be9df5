package job

import (
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
)

// The decisions of tracking (tracking.go), as pure functions of the sync's
// values: which finished pods a sync releases and records, how released
// pods move into the counters, and when the terminal condition is due.

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

// terminalDue reports whether a Job heading to an end may have its
// terminal condition written, given its status as about to be written and
// the number of its pods still terminating. When it may not, wait names
// what holds it back: pods still uncounted (their finalizer may still be
// on), or pods still terminating (upstream delays the condition for them
// too, so that a replacement or a cleanup never races a finished Job).
func terminalDue(status batchv1.JobStatus, terminating int32) (due bool, wait string) {
	if u := status.UncountedTerminatedPods; u != nil {
		if n := len(u.Succeeded) + len(u.Failed); n > 0 {
			return false, fmt.Sprintf("%d uncounted pods", n)
		}
	}
	if terminating > 0 {
		return false, fmt.Sprintf("%d terminating pods", terminating)
	}
	return true, ""
}
