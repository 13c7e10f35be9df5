package ttlafterfinished

import (
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"jobkeeper.dev/jobkeeper/pkg/apis/jobkeeper/v1alpha1"
)

// podResource is the resource of Pods in object keys.
var podResource = corev1.SchemeGroupVersion.WithResource("pods")

// podFinished reports whether a Pod is in phase Succeeded or Failed, and
// whether it failed.
func podFinished(pod *corev1.Pod) (finished, failed bool) {
	switch pod.Status.Phase {
	case corev1.PodSucceeded:
		return true, false
	case corev1.PodFailed:
		return true, true
	}
	return false, false
}

// podFinishTime is when a finished Pod finished: the latest finishedAt of any
// terminated container (init, regular or ephemeral). When no container
// recorded one (a Pod failed before its containers ran, e.g. evicted or
// rejected at admission), the fallbacks are, in order: the latest
// lastTransitionTime of the Pod's conditions, status.startTime and
// metadata.creationTimestamp.
func podFinishTime(pod *corev1.Pod) time.Time {
	var latest time.Time
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for _, cs := range list {
			if t := cs.State.Terminated; t != nil && t.FinishedAt.Time.After(latest) {
				latest = t.FinishedAt.Time
			}
		}
	}
	if !latest.IsZero() {
		return latest
	}
	for _, c := range pod.Status.Conditions {
		if c.LastTransitionTime.Time.After(latest) {
			latest = c.LastTransitionTime.Time
		}
	}
	if !latest.IsZero() {
		return latest
	}
	if pod.Status.StartTime != nil && !pod.Status.StartTime.IsZero() {
		return pod.Status.StartTime.Time
	}
	return pod.CreationTimestamp.Time
}

// controlledByJob reports whether a Job is the object's controller.
func controlledByJob(obj metav1.Object) bool {
	ref := metav1.GetControllerOfNoCopy(obj)
	if ref == nil || ref.Kind != "Job" {
		return false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && gv.Group == "batch"
}

// annotationTTL parses the TTL annotation. ok is false when the annotation is
// absent; err is set when it is present but not a non-negative int32.
func annotationTTL(obj metav1.Object) (ttl int32, ok bool, err error) {
	v, ok := obj.GetAnnotations()[v1alpha1.TTLAnnotation]
	if !ok {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil || n < 0 {
		return 0, true, fmt.Errorf("annotation %s=%q is not a non-negative number of seconds", v1alpha1.TTLAnnotation, v)
	}
	return int32(n), true, nil
}

// podOwnVerdict applies the TTL annotation of a Pod that no Job controls. It
// returns nil when the Pod is being deleted, has no annotation, is controlled
// by a Job or has not finished.
func podOwnVerdict(pod *corev1.Pod) (*verdict, error) {
	if pod.DeletionTimestamp != nil || controlledByJob(pod) {
		return nil, nil
	}
	ttl, ok, err := annotationTTL(pod)
	if !ok || err != nil {
		return nil, err
	}
	finished, failed := podFinished(pod)
	if !finished {
		return nil, nil
	}
	return &verdict{
		finishedAt:  podFinishTime(pod),
		ttl:         secondsToDuration(ttl),
		failed:      failed,
		propagation: metav1.DeletePropagationBackground,
	}, nil
}
