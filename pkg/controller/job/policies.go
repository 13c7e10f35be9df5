package job

import (
	batchv1 "k8s.io/api/batch/v1"
)

// This file is the seam for the Job features a later issue adds:
// podFailurePolicy (pod_failure_policy.go), backoffLimitPerIndex
// (backoff_limit_per_index.go), successPolicy (success_policy.go) and
// podReplacementPolicy=Failed. Until then:
//   - a Job using podFailurePolicy, backoffLimitPerIndex or successPolicy is
//     not synced at all: running it with those fields ignored would produce
//     statuses upstream never would (e.g. a FailJob rule not firing). One
//     Warning event UnsupportedJobSpec is recorded per Job.
//   - podReplacementPolicy=Failed is honoured only as far as counting goes
//     (see onlyReplaceFailedPods); replacement waits are upstream's default.

// ReasonUnsupportedJobSpec is the Warning event recorded for a Job that uses
// a field this controller does not implement yet.
const ReasonUnsupportedJobSpec = "UnsupportedJobSpec"

// unsupportedFeature names the first unimplemented feature the Job uses, or "".
func unsupportedFeature(job *batchv1.Job) string {
	switch {
	case job.Spec.PodFailurePolicy != nil:
		return "spec.podFailurePolicy"
	case job.Spec.BackoffLimitPerIndex != nil:
		return "spec.backoffLimitPerIndex"
	case job.Spec.SuccessPolicy != nil:
		return "spec.successPolicy"
	}
	return ""
}

// onlyReplaceFailedPods reports whether pods being deleted are not counted
// as failed until they reach phase Failed (podReplacementPolicy Failed).
func onlyReplaceFailedPods(job *batchv1.Job) bool {
	return job.Spec.PodReplacementPolicy != nil && *job.Spec.PodReplacementPolicy == batchv1.Failed
}
