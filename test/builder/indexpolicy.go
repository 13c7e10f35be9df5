package builder

import (
	"math"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/utils/ptr"
)

// BackoffLimitPerIndex sets spec.backoffLimitPerIndex (for Indexed Jobs)
// and, as the apiserver defaults it for such Jobs, backoffLimit to
// math.MaxInt32; call BackoffLimit afterwards to keep a global limit too.
func (w *JobWrapper) BackoffLimitPerIndex(n int32) *JobWrapper {
	w.Job.Spec.BackoffLimitPerIndex = ptr.To(n)
	w.Job.Spec.BackoffLimit = ptr.To[int32](math.MaxInt32)
	return w
}

// MaxFailedIndexes sets spec.maxFailedIndexes (needs backoffLimitPerIndex).
func (w *JobWrapper) MaxFailedIndexes(n int32) *JobWrapper {
	w.Job.Spec.MaxFailedIndexes = ptr.To(n)
	return w
}

// SuccessPolicy sets spec.successPolicy to the given rules, in order.
func (w *JobWrapper) SuccessPolicy(rules ...batchv1.SuccessPolicyRule) *JobWrapper {
	w.Job.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: rules}
	return w
}

// SucceededIndexesRule returns a successPolicy rule met when every index of
// indexes (e.g. "0,2-4") succeeded.
func SucceededIndexesRule(indexes string) batchv1.SuccessPolicyRule {
	return batchv1.SuccessPolicyRule{SucceededIndexes: ptr.To(indexes)}
}

// SucceededCountRule returns a successPolicy rule met when at least n
// indexes succeeded.
func SucceededCountRule(n int32) batchv1.SuccessPolicyRule {
	return batchv1.SuccessPolicyRule{SucceededCount: ptr.To(n)}
}
