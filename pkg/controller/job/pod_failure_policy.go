package job

import (
	"fmt"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// This file holds spec.podFailurePolicy: which rule a failed pod matches
// and what follows from it. The controller calls matchPodFailurePolicy for
// every pod it is about to account as failed (with a policy, a pod counts
// as failed only in phase Failed, see onlyReplaceFailedPods) and, once the
// Job is failing, for the unfinished pods it accounts as failed too, as
// upstream does:
//   - FailJob: syncJob adds the interim FailureTarget condition with reason
//     PodFailurePolicy and the rule's message, deletes the active pods, and
//     the Job becomes Failed with the same reason and message once no pod is
//     terminating or uncounted;
//   - Ignore: the pod is neither counted in status.failed nor against
//     backoffLimit; its finalizer is removed and it is replaced (after the
//     usual failure backoff delay, which upstream also applies to ignored
//     failures);
//   - Count, or no matching rule: an ordinary failure;
//   - FailIndex: an ordinary failure for backoffLimit, and the pod's index
//     is marked failed (backoff_limit_per_index.go).
// Each accounted failure that matched a rule increments
// job_controller_pod_failures_handled_by_failure_policy_total{action}.

// matchPodFailurePolicy matches a failed pod against the policy's rules in
// order; the first rule that matches decides. It returns:
//   - msg: for a FailJob rule, the message of the Job's FailureTarget and
//     Failed conditions; nil otherwise;
//   - countFailed: whether the failure counts against backoffLimit (and
//     backoffLimitPerIndex); false only for an Ignore rule;
//   - action: the matched rule's action, nil when no rule matched (the
//     failure is then an ordinary one).
//
// A nil policy matches nothing. An onExitCodes rule matches the first
// terminated container (regular containers first, then init containers)
// with a non-zero exit code that satisfies the operator, restricted to
// containerName when set; an onPodConditions rule matches when the pod has
// a condition with one of the patterns' type and status. The function does
// not look at the pod's phase: callers only pass pods they account as
// failed.
func matchPodFailurePolicy(policy *batchv1.PodFailurePolicy, pod *corev1.Pod) (msg *string, countFailed bool, action *batchv1.PodFailurePolicyAction) {
	if policy == nil {
		return nil, true, nil
	}
	for i, rule := range policy.Rules {
		var failJobMsg string
		switch {
		case rule.OnExitCodes != nil:
			cs := matchingExitCodeContainer(&pod.Status, rule.OnExitCodes)
			if cs == nil {
				continue
			}
			failJobMsg = fmt.Sprintf("Container %s for pod %s/%s failed with exit code %d matching %s rule at index %d",
				cs.Name, pod.Namespace, pod.Name, cs.State.Terminated.ExitCode, rule.Action, i)
		case rule.OnPodConditions != nil:
			cond := matchingPodCondition(&pod.Status, rule.OnPodConditions)
			if cond == nil {
				continue
			}
			failJobMsg = fmt.Sprintf("Pod %s/%s has condition %s matching %s rule at index %d",
				pod.Namespace, pod.Name, cond.Type, rule.Action, i)
		default:
			continue
		}
		act := rule.Action
		switch act {
		case batchv1.PodFailurePolicyActionFailJob:
			return &failJobMsg, true, &act
		case batchv1.PodFailurePolicyActionIgnore:
			return nil, false, &act
		case batchv1.PodFailurePolicyActionFailIndex, batchv1.PodFailurePolicyActionCount:
			return nil, true, &act
		}
		// An action this controller does not know (API validation rejects
		// them): like upstream, the rule is skipped.
	}
	return nil, true, nil
}

// matchingExitCodeContainer returns the first terminated container status
// satisfying req, looking at regular containers before init containers, or
// nil. A returned status has State.Terminated set.
func matchingExitCodeContainer(status *corev1.PodStatus, req *batchv1.PodFailurePolicyOnExitCodesRequirement) *corev1.ContainerStatus {
	for _, list := range [][]corev1.ContainerStatus{status.ContainerStatuses, status.InitContainerStatuses} {
		for i := range list {
			cs := &list[i]
			if cs.State.Terminated == nil {
				// Still running or waiting: no exit code yet.
				continue
			}
			if req.ContainerName != nil && *req.ContainerName != cs.Name {
				continue
			}
			if exitCodeMatches(cs.State.Terminated.ExitCode, req) {
				return cs
			}
		}
	}
	return nil
}

// exitCodeMatches reports whether a container's exit code satisfies the
// requirement's operator and values. Exit code 0 (success) never matches,
// not even NotIn.
func exitCodeMatches(code int32, req *batchv1.PodFailurePolicyOnExitCodesRequirement) bool {
	if code == 0 {
		return false
	}
	switch req.Operator {
	case batchv1.PodFailurePolicyOnExitCodesOpIn:
		return slices.Contains(req.Values, code)
	case batchv1.PodFailurePolicyOnExitCodesOpNotIn:
		return !slices.Contains(req.Values, code)
	}
	return false
}

// matchingPodCondition returns the first of the pod's conditions (in the
// pod's order) whose type and status equal one of the patterns', or nil.
func matchingPodCondition(status *corev1.PodStatus, patterns []batchv1.PodFailurePolicyOnPodConditionsPattern) *corev1.PodCondition {
	for i := range status.Conditions {
		c := &status.Conditions[i]
		for _, p := range patterns {
			if c.Type == p.Type && c.Status == p.Status {
				return c
			}
		}
	}
	return nil
}

// failJobMessage returns the message of the first pod counted as failed
// that matches a FailJob rule, or nil. Like upstream, every pod of the Job
// is looked at, accounted or not: a FailJob match is decided in the sync
// that first sees it, and the FailureTarget condition keeps it afterwards.
func failJobMessage(job *batchv1.Job, pods []*corev1.Pod) *string {
	if job.Spec.PodFailurePolicy == nil {
		return nil
	}
	for _, p := range pods {
		if !isFailed(p, job) {
			continue
		}
		if msg, _, _ := matchPodFailurePolicy(job.Spec.PodFailurePolicy, p); msg != nil {
			return msg
		}
	}
	return nil
}

// countedFailures returns how many of the failed pods count against
// backoffLimit: all but those matching an Ignore rule.
func countedFailures(policy *batchv1.PodFailurePolicy, failed []*corev1.Pod) int32 {
	var n int32
	for _, p := range failed {
		if _, count, _ := matchPodFailurePolicy(policy, p); count {
			n++
		}
	}
	return n
}

// recordPodFailurePolicyActions adds the failures handled by a
// podFailurePolicy rule, by action, to
// pod_failures_handled_by_failure_policy_total.
func (c *Controller) recordPodFailurePolicyActions(actions map[batchv1.PodFailurePolicyAction]int) {
	for action, n := range actions {
		c.metrics.PodFailuresHandledByFailurePolicy.WithLabelValues(string(action)).Add(float64(n))
	}
}
