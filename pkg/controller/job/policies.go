package job

import (
	batchv1 "k8s.io/api/batch/v1"
)

// This file is the seam for the Job features a later issue adds:
// podFailurePolicy (pod_failure_policy.go), backoffLimitPerIndex
// (backoff_limit_per_index.go) and successPolicy (success_policy.go); each
// gets its fields in syncContext and its decision function called from
// syncJob (failure and success decisions) and trackStatus (counting). Until
// then a Job using any of them is not synced at all: running it with those
// fields ignored would produce statuses upstream never would (e.g. a FailJob
// rule not firing, an index retried past its limit). One Warning event
// UnsupportedJobSpec is recorded per Job, and its pods are left alone.
//
// podFailurePolicy is supported (pod_failure_policy.go): syncJob turns a
// FailJob match into the FailureTarget condition, and trackStatus leaves
// pods matching Ignore out of status.failed.
//
// podReplacementPolicy is supported: with Failed, a pod being deleted is
// not counted as failed until it reaches phase Failed, and neither it nor
// its index is replaced before then (onlyReplaceFailedPods). A Job with a
// podFailurePolicy always behaves so, whatever podReplacementPolicy says:
// the apiserver defaults podReplacementPolicy to Failed for such Jobs and
// rejects any other value, and the controller does not rely on that
// (upstream does the same).

// ReasonUnsupportedJobSpec is the Warning event recorded for a Job that uses
// a field this controller does not implement yet.
const ReasonUnsupportedJobSpec = "UnsupportedJobSpec"

// unsupportedFeature names the first unimplemented feature the Job uses, or "".
func unsupportedFeature(job *batchv1.Job) string {
	switch {
	}
	return ""
}

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
