package job

import (
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition messages written by the controller (reasons are batchv1's).
const (
	msgCompletionsReached   = "Reached expected number of succeeded pods"
	msgBackoffLimitExceeded = "Job has reached the specified backoff limit"
	msgDeadlineExceeded     = "Job was active longer than specified deadline"
	reasonSuspended         = "JobSuspended"
	msgSuspended            = "Job suspended"
	reasonResumed           = "JobResumed"
	msgResumed              = "Job resumed"
)

// newCondition returns a condition of the given type, probed and
// transitioned at now.
func newCondition(t batchv1.JobConditionType, status corev1.ConditionStatus, reason, msg string, now time.Time) *batchv1.JobCondition {
	return &batchv1.JobCondition{
		Type: t, Status: status, Reason: reason, Message: msg,
		LastProbeTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now),
	}
}

// findCondition returns the condition of type t in list, or nil.
func findCondition(list []batchv1.JobCondition, t batchv1.JobConditionType) *batchv1.JobCondition {
	for i := range list {
		if list[i].Type == t {
			return &list[i]
		}
	}
	return nil
}

// conditionTrue reports whether the condition of type t is True.
func conditionTrue(list []batchv1.JobCondition, t batchv1.JobConditionType) bool {
	c := findCondition(list, t)
	return c != nil && c.Status == corev1.ConditionTrue
}

// isFinished reports whether the Job has a True Complete or Failed condition.
func isFinished(job *batchv1.Job) bool {
	return conditionTrue(job.Status.Conditions, batchv1.JobComplete) || conditionTrue(job.Status.Conditions, batchv1.JobFailed)
}

// setCondition makes the condition of type t have status, reason and
// message, replacing (with fresh times) an existing one that differs. A
// missing condition is not added with status False. It reports whether the
// list changed.
func setCondition(list []batchv1.JobCondition, t batchv1.JobConditionType, status corev1.ConditionStatus, reason, msg string, now time.Time) ([]batchv1.JobCondition, bool) {
	if c := findCondition(list, t); c != nil {
		if c.Status == status && c.Reason == reason && c.Message == msg {
			return list, false
		}
		*c = *newCondition(t, status, reason, msg, now)
		return list, true
	}
	if status == corev1.ConditionFalse {
		return list, false
	}
	return append(list, *newCondition(t, status, reason, msg, now)), true
}

// terminalFor returns the final condition that follows an interim one:
// Failed for FailureTarget, Complete for SuccessCriteriaMet, keeping reason
// and message.
func terminalFor(interim *batchv1.JobCondition, now time.Time) *batchv1.JobCondition {
	t := batchv1.JobFailed
	if interim.Type == batchv1.JobSuccessCriteriaMet {
		t = batchv1.JobComplete
	}
	return newCondition(t, corev1.ConditionTrue, interim.Reason, interim.Message, now)
}
