package ttlafterfinished

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"jobkeeper.dev/jobkeeper/pkg/apis/jobkeeper/v1alpha1"
	"jobkeeper.dev/jobkeeper/pkg/controller/ttlafterfinished/policy"
)

// podResource is the resource of Pods in object keys.
var podResource = corev1.SchemeGroupVersion.WithResource("pods")

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
	f := policy.PodRule.Read(pod)
	if !f.Finished {
		return nil, nil
	}
	return &verdict{
		FinishedAt:  f.At,
		TTL:         secondsToDuration(ttl),
		Failed:      f.Failed,
		Propagation: metav1.DeletePropagationBackground,
	}, nil
}
