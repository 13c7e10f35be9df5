package job

import (
	batchv1 "k8s.io/api/batch/v1"
)

// The Job policies beyond backoffLimit each live in their own file, keep
// their per-sync state in syncContext, and are called from syncJob (failure
// and success decisions, in upstream's order), manageJob (which indexes get
// pods, and when) and trackStatus (counting, finalizers):
//   - podFailurePolicy (pod_failure_policy.go): syncJob turns a FailJob
//     match into the FailureTarget condition, and trackStatus leaves pods
//     matching Ignore out of status.failed;
//   - backoffLimitPerIndex and maxFailedIndexes (backoff_limit_per_index.go):
//     per-index failure counts in pod annotations, per-index backoff,
//     status.failedIndexes and the FailedIndexes/MaxFailedIndexesExceeded
//     conditions;
//   - successPolicy (success_policy.go): the SuccessCriteriaMet condition
//     with reason SuccessPolicy.
//
// podReplacementPolicy is supported: with Failed, a pod being deleted is
// not counted as failed until it reaches phase Failed, and neither it nor
// its index is replaced before then (onlyReplaceFailedPods). A Job with a
// podFailurePolicy always behaves so, whatever podReplacementPolicy says:
// the apiserver defaults podReplacementPolicy to Failed for such Jobs and
// rejects any other value, and the controller does not rely on that
// (upstream does the same).

// onlyReplaceFailedPods reports whether pods being deleted are not counted
// as failed until they reach phase Failed, and are not replaced before:
// podReplacementPolicy Failed, or any Job with a podFailurePolicy (whose
// rules can only be matched against a pod's final state).
func onlyReplaceFailedPods(job *batchv1.Job) bool {
	if job.Spec.PodReplacementPolicy != nil && *job.Spec.PodReplacementPolicy == batchv1.Failed {
		return true
	}
	return job.Spec.PodFailurePolicy != nil
}
