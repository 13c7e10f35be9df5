package job

import (
	"slices"
	"sort"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
	"k8s.io/kubernetes/pkg/controller"
)

// hasTrackingFinalizer reports whether the pod holds batch.kubernetes.io/job-tracking.
func hasTrackingFinalizer(pod *corev1.Pod) bool {
	return slices.Contains(pod.Finalizers, batchv1.JobTrackingFinalizer)
}

// isTerminal reports whether the pod reached phase Succeeded or Failed.
func isTerminal(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// isActive reports whether the pod is neither terminal nor being deleted.
func isActive(pod *corev1.Pod) bool {
	return !isTerminal(pod) && pod.DeletionTimestamp == nil
}

// isTerminating reports whether the pod is being deleted but not terminal yet.
func isTerminating(pod *corev1.Pod) bool {
	return !isTerminal(pod) && pod.DeletionTimestamp != nil
}

// isFailed reports whether the pod counts as failed: phase Failed, or, with
// the default podReplacementPolicy (TerminatingOrFailed), deleted before
// succeeding — deleted pods may never reach a terminal phase (KEP-2307).
func isFailed(pod *corev1.Pod, job *batchv1.Job) bool {
	if pod.Status.Phase == corev1.PodFailed {
		return true
	}
	if onlyReplaceFailedPods(job) {
		return false
	}
	return pod.DeletionTimestamp != nil && pod.Status.Phase != corev1.PodSucceeded
}

// isReady reports whether the pod has the Ready=True condition.
func isReady(pod *corev1.Pod) bool {
	return podutil.IsPodReady(pod)
}

// countPods counts the pods for which pred holds.
func countPods(pods []*corev1.Pod, pred func(*corev1.Pod) bool) int32 {
	var n int32
	for _, p := range pods {
		if pred(p) {
			n++
		}
	}
	return n
}

// filterPods returns the pods for which pred holds.
func filterPods(pods []*corev1.Pod, pred func(*corev1.Pod) bool) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range pods {
		if pred(p) {
			out = append(out, p)
		}
	}
	return out
}

// sortForDeletion orders pods so that the cheapest to lose come first:
// unscheduled before scheduled, pending before running, not ready before
// ready, then by readiness time, restarts and age (upstream's ActivePods order).
func sortForDeletion(pods []*corev1.Pod) {
	sort.Sort(controller.ActivePods(pods))
}

// podsForRemoval returns the active pods to delete so that at least n go:
// for Indexed Jobs first pods with an invalid or duplicated index, or of an
// index already succeeded (done), then the cheapest pods to lose.
func podsForRemoval(job *batchv1.Job, active []*corev1.Pod, n int, done indexSet) []*corev1.Pod {
	var rm, rest []*corev1.Pod
	if isIndexed(job) {
		rm, rest = excessIndexedPods(active, *job.Spec.Completions, done)
	} else {
		rest = slices.Clone(active)
	}
	if len(rm) < n {
		sortForDeletion(rest)
		rm = append(rm, rest[:min(n-len(rm), len(rest))]...)
	}
	return rm
}

// restartsExceedBackoffLimit reports whether, for restartPolicy OnFailure,
// the container restarts of running and pending pods reach backoffLimit
// (exceed it when the limit is 0).
func restartsExceedBackoffLimit(job *batchv1.Job, pods []*corev1.Pod) bool {
	if job.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyOnFailure {
		return false
	}
	var restarts int32
	for _, p := range pods {
		if p.Status.Phase != corev1.PodRunning && p.Status.Phase != corev1.PodPending {
			continue
		}
		for _, s := range p.Status.InitContainerStatuses {
			restarts += s.RestartCount
		}
		for _, s := range p.Status.ContainerStatuses {
			restarts += s.RestartCount
		}
	}
	limit := *job.Spec.BackoffLimit
	if limit == 0 {
		return restarts > 0
	}
	return restarts >= limit
}
