package job

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Event reasons of suspend and resume (KEP-2232).
const (
	// ReasonSuspended is the event recorded when a Job becomes suspended.
	ReasonSuspended = "Suspended"
	// ReasonResumed is the event recorded when a suspended Job resumes.
	ReasonResumed = "Resumed"
)

// isSuspended reports whether spec.suspend is true.
func isSuspended(job *batchv1.Job) bool {
	return ptr.Deref(job.Spec.Suspend, false)
}

// suspendTransition is the status change and event of a suspend or resume.
type suspendTransition struct {
	// changed is true when the Suspended condition changed.
	changed bool
	// eventReason and eventMessage describe the event to record.
	eventReason, eventMessage string
}

// applySuspendCondition aligns the Suspended condition of status with
// spec.suspend. Suspending clears startTime, so that the active deadline
// never runs while suspended; resuming sets it to now, so the deadline
// restarts. A Job that was never suspended gets no condition.
func applySuspendCondition(job *batchv1.Job, now metav1.Time) suspendTransition {
	var changed bool
	if isSuspended(job) {
		job.Status.Conditions, changed = setCondition(job.Status.Conditions, batchv1.JobSuspended, corev1.ConditionTrue, reasonSuspended, msgSuspended, now.Time)
		if !changed {
			return suspendTransition{}
		}
		job.Status.StartTime = nil
		return suspendTransition{changed: true, eventReason: ReasonSuspended, eventMessage: msgSuspended}
	}
	job.Status.Conditions, changed = setCondition(job.Status.Conditions, batchv1.JobSuspended, corev1.ConditionFalse, reasonResumed, msgResumed, now.Time)
	if !changed {
		return suspendTransition{}
	}
	job.Status.StartTime = &now
	return suspendTransition{changed: true, eventReason: ReasonResumed, eventMessage: msgResumed}
}
