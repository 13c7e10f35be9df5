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
// podReplacementPolicy is supported: with Failed, a pod being deleted is
// not counted as failed until it reaches phase Failed, and neither it nor
// its index is replaced before then (onlyReplaceFailedPods).

// ReasonUnsupportedJobSpec is the Warning event recorded for a Job that uses
// a field this controller does not implement yet.
const ReasonUnsupportedJobSpec = "UnsupportedJobSpec"

// unsupportedFeature names the first unimplemented feature the Job uses, or "".
func unsupportedFeature(job *batchv1.Job) string {
	switch {
	case job.Spec.PodFailurePolicy != nil:
		return "spec.podFailurePolicy"
	}
	return ""
}

// onlyReplaceFailedPods reports whether pods being deleted are not counted
// as failed until they reach phase Failed (podReplacementPolicy Failed).
func onlyReplaceFailedPods(job *batchv1.Job) bool {
	return job.Spec.PodReplacementPolicy != nil && *job.Spec.PodReplacementPolicy == batchv1.Failed
}
