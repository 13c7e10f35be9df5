package job

import (
	"context"
	"errors"
	"fmt"
	"sync"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/json"
	"k8s.io/klog/v2"
)

// releaseFinalizers removes the tracking finalizer from pods, one patch
// each, recording the removals as expected first. The i-th result is true
// if pod i no longer holds the finalizer (a pod that is gone counts).
func (c *Controller) releaseFinalizers(ctx context.Context, key string, pods []*corev1.Pod) ([]bool, error) {
	uids := make([]types.UID, len(pods))
	for i, p := range pods {
		uids[i] = p.UID
	}
	c.finalizers.expect(key, uids)
	done := make([]bool, len(pods))
	var mu sync.Mutex
	var errs []error
	forEachPod(len(pods), func(i int) {
		pod := pods[i]
		err := c.pods.removeFinalizer(ctx, pod.Namespace, pod.Name, removeFinalizerPatch(pod))
		if err != nil {
			// No update will come for this pod.
			c.finalizers.observed(key, pod.UID)
			if !apierrors.IsNotFound(err) {
				mu.Lock()
				errs = append(errs, fmt.Errorf("removing tracking finalizer from %s: %w", klog.KObj(pod), err))
				mu.Unlock()
				return
			}
		}
		done[i] = true
	})
	return done, errors.Join(errs...)
}

// removeFinalizerPatch is the strategic merge patch that drops the tracking
// finalizer, or nil if the pod does not hold it.
func removeFinalizerPatch(pod *corev1.Pod) []byte {
	if !hasTrackingFinalizer(pod) {
		return nil
	}
	b, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{
			"$deleteFromPrimitiveList/finalizers": []string{batchv1.JobTrackingFinalizer},
		},
	})
	return b
}

// removeFinalizerPatchAt is removeFinalizerPatch with the pod's
// resourceVersion as a precondition (nil if the pod does not hold the
// finalizer).
func removeFinalizerPatchAt(pod *corev1.Pod) []byte {
	if !hasTrackingFinalizer(pod) {
		return nil
	}
	meta := map[string]any{"$deleteFromPrimitiveList/finalizers": []string{batchv1.JobTrackingFinalizer}}
	if pod.ResourceVersion != "" {
		meta["resourceVersion"] = pod.ResourceVersion
	}
	b, _ := json.Marshal(map[string]any{"metadata": meta})
	return b
}
