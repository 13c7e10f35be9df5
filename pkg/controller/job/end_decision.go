package job

import (
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// finishCounts are the outcomes decideFinish weighs besides the Job and
// its pods.
type finishCounts struct {
	// failed is status.failed plus the failures not yet counted (Ignore
	// matches left out).
	failed int32
	// succeededIndexes are the succeeded indexes (Indexed Jobs).
	succeededIndexes indexSet
	// failedIndexes are the failed indexes (backoffLimitPerIndex only).
	failedIndexes *indexSet
}

// finishDecision is what decideFinish concludes.
type finishDecision struct {
	// interim is the FailureTarget or SuccessCriteriaMet condition the Job
	// is now heading to, or nil.
	interim *batchv1.JobCondition
	// deadlineIn is how long until a running activeDeadlineSeconds
	// expires, when no end is decided yet (0: no deadline running).
	deadlineIn time.Duration
}

// decideFinish decides, before any pod is created or deleted, whether the
// Job is heading to an end, in upstream's order, where the first match
// wins:
//  1. an earlier sync's SuccessCriteriaMet, then its FailureTarget (a
//     decision once stored is never revisited);
//  2. a pod matching a FailJob rule of the podFailurePolicy;
//  3. backoffLimit exceeded (counted failures, or container restarts with
//     restartPolicy OnFailure);
//  4. activeDeadlineSeconds passed;
//  5. with backoffLimitPerIndex, too many failed indexes, or every index
//     finished with at least one failed;
//  6. the successPolicy of an Indexed Job.
//
// Reaching completions is decided after pods are managed (succeededEnough),
// because it depends on the pods still active.
func decideFinish(job *batchv1.Job, pods []*corev1.Pod, counts finishCounts, now time.Time) finishDecision {
	if cond := findCondition(job.Status.Conditions, batchv1.JobSuccessCriteriaMet); cond != nil && cond.Status == corev1.ConditionTrue {
		return finishDecision{interim: cond.DeepCopy()}
	}
	if cond := findCondition(job.Status.Conditions, batchv1.JobFailureTarget); cond != nil && cond.Status == corev1.ConditionTrue {
		return finishDecision{interim: cond.DeepCopy()}
	}
	if msg := failJobMessage(job, pods); msg != nil {
		return finishDecision{interim: newCondition(batchv1.JobFailureTarget, corev1.ConditionTrue, batchv1.JobReasonPodFailurePolicy, *msg, now)}
	}
	if counts.failed > *job.Spec.BackoffLimit || restartsExceedBackoffLimit(job, pods) {
		return finishDecision{interim: newCondition(batchv1.JobFailureTarget, corev1.ConditionTrue, batchv1.JobReasonBackoffLimitExceeded, msgBackoffLimitExceeded, now)}
	}
	var d finishDecision
	if left, ok := deadlineRemaining(job, now); ok {
		if left <= 0 {
			return finishDecision{interim: newCondition(batchv1.JobFailureTarget, corev1.ConditionTrue, batchv1.JobReasonDeadlineExceeded, msgDeadlineExceeded, now)}
		}
		d.deadlineIn = left
	}
	if !isIndexed(job) {
		return d
	}
	if counts.failedIndexes != nil {
		if cond := failedIndexesCondition(job, *counts.failedIndexes, counts.succeededIndexes, now); cond != nil {
			return finishDecision{interim: cond}
		}
	}
	if msg, ok := matchSuccessPolicy(job.Spec.SuccessPolicy, *job.Spec.Completions, counts.succeededIndexes); ok {
		d.interim = newCondition(batchv1.JobSuccessCriteriaMet, corev1.ConditionTrue, batchv1.JobReasonSuccessPolicy, msg, now)
	}
	return d
}
