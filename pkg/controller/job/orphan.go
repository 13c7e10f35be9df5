package job

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller"
)

// orphanKey is an item of the orphan queue: one pod by name, or every pod
// of a namespace matching a (deleted or finished) Job's selector.
type orphanKey struct {
	// namespace of the pods.
	namespace string
	// name of one pod; empty when selector is set.
	name string
	// selector of a Job, rendered as a string.
	selector string
	// live says the pod is read from the apiserver: it may be in no cache
	// (a pod without the Job label, Options.JobPodsOnly).
	live bool
}

// enqueueOrphanPod queues one pod for finalizer removal.
func (c *Controller) enqueueOrphanPod(pod *corev1.Pod) {
	c.orphanQueue.Add(orphanKey{namespace: pod.Namespace, name: pod.Name})
}

// enqueueSelectorOrphans queues every pod selected by the Job for finalizer
// removal (used when the Job is deleted or finished).
func (c *Controller) enqueueSelectorOrphans(logger klog.Logger, job *batchv1.Job) {
	sel, ok := selectorOf(job)
	if !ok {
		logger.Info("Job has an invalid selector", "job", klog.KObj(job))
		return
	}
	c.orphanQueue.Add(orphanKey{namespace: job.Namespace, selector: sel.String()})
}

// orphanWorker processes the orphan queue until it shuts down.
func (c *Controller) orphanWorker(ctx context.Context) {
	for c.processNextOrphan(ctx) {
	}
}

// processNextOrphan handles one orphan key; errors requeue it rate-limited.
func (c *Controller) processNextOrphan(ctx context.Context) bool {
	key, quit := c.orphanQueue.Get()
	if quit {
		return false
	}
	defer c.orphanQueue.Done(key)
	if err := c.syncOrphan(ctx, key); err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Removing finalizers of orphan pods", "key", key)
		c.orphanQueue.AddRateLimited(key)
		return true
	}
	c.orphanQueue.Forget(key)
	return true
}

// syncOrphan removes the tracking finalizer from the pod(s) of key that no
// managed, unfinished Job can count any more.
func (c *Controller) syncOrphan(ctx context.Context, key orphanKey) error {
	if key.live {
		return c.releaseLivePod(ctx, key.namespace, key.name)
	}
	if key.selector == "" {
		pod, err := c.podLister.Pods(key.namespace).Get(key.name)
		if apierrors.IsNotFound(err) {
			var ok bool
			if pod, ok = c.sources.cachedPod(key.namespace, key.name); !ok {
				return nil
			}
			err = nil
		}
		if err != nil {
			return err
		}
		return c.releaseOrphanFinalizer(ctx, pod)
	}
	sel, err := labels.Parse(key.selector)
	if err != nil {
		return fmt.Errorf("parsing selector %q: %w", key.selector, err)
	}
	pods, err := c.podLister.Pods(key.namespace).List(sel)
	if err != nil {
		return err
	}
	var firstErr error
	for _, pod := range pods {
		if err := c.releaseOrphanFinalizer(ctx, pod); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// goneJobsCacheSize bounds how many gone Jobs' UIDs are remembered (a UID
// is 36 bytes; evicting one costs one more read of a Job that is gone).
const goneJobsCacheSize = 4096

// releaseOrphanFinalizer removes the finalizer of pod unless a Job can still
// count it: a pod controlled by something other than a batch/v1 Job, by a
// Job of another controller, or by an unfinished Job keeps it. The patch
// is made on the pod's version in the cache: a pod that changed since (a
// conflict) is looked at again on the retry.
func (c *Controller) releaseOrphanFinalizer(ctx context.Context, pod *corev1.Pod) error {
	if !hasTrackingFinalizer(pod) {
		return nil
	}
	if ref := metav1.GetControllerOf(pod); ref != nil {
		if ref.Kind != "Job" || ref.APIVersion != batchv1.SchemeGroupVersion.String() {
			return nil
		}
		job, err := c.liveControllerJob(ctx, pod.Namespace, ref)
		if err != nil {
			return fmt.Errorf("checking the Job of orphan pod %s: %w", klog.KObj(pod), err)
		}
		if job != nil && (!c.manages(job) || !isFinished(job)) {
			return nil
		}
	}
	klog.FromContext(ctx).V(2).Info("Removing tracking finalizer from orphan pod", "pod", klog.KObj(pod))
	if err := c.pods.releaseOrphan(ctx, pod); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing tracking finalizer from %s: %w", klog.KObj(pod), err)
	}
	return nil
}

// liveControllerJob returns the Job ref points to, or nil if it is gone
// (none with its UID): from the cache when it is there, else from the
// apiserver, since the cache may lag behind the pod's and a Job that still
// counts the pod must not lose it. A Job confirmed gone is remembered.
func (c *Controller) liveControllerJob(ctx context.Context, ns string, ref *metav1.OwnerReference) (*batchv1.Job, error) {
	if job := c.resolveControllerRef(ns, ref); job != nil {
		return job, nil
	}
	if _, gone := c.goneJobs.Get(ref.UID); gone {
		return nil, nil
	}
	live, err := c.client.BatchV1().Jobs(ns).Get(ctx, ref.Name, metav1.GetOptions{})
	switch {
	case err == nil && live.UID == ref.UID:
		return live, nil
	case err != nil && !apierrors.IsNotFound(err):
		return nil, err
	}
	// Not found, or a new Job of the same name: a UID never comes back.
	c.goneJobs.Add(ref.UID, struct{}{})
	return nil, nil
}

// releaseLivePod reads a pod that may be in no cache from the apiserver and
// releases its tracking finalizer when no managed, unfinished Job counts
// it, as upstream's orphan handling and its Job syncs would: a pod without
// a controller, or whose Job is gone or finished, loses the finalizer; a
// pod whose unfinished Job's selector it no longer matches is released by
// that Job, losing its controller reference and the finalizer together.
func (c *Controller) releaseLivePod(ctx context.Context, ns, name string) error {
	pod, err := c.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading pod %s/%s: %w", ns, name, err)
	}
	if !hasTrackingFinalizer(pod) {
		return nil
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.Kind != "Job" || ref.APIVersion != batchv1.SchemeGroupVersion.String() {
		return c.releaseOrphanFinalizer(ctx, pod)
	}
	job, err := c.liveControllerJob(ctx, ns, ref)
	if err != nil {
		return fmt.Errorf("checking the Job of pod %s: %w", klog.KObj(pod), err)
	}
	if job == nil || isFinished(job) || !c.manages(job) {
		return c.releaseOrphanFinalizer(ctx, pod)
	}
	if sel, ok := selectorOf(job); !ok || sel.Matches(labels.Set(pod.Labels)) {
		return nil
	}
	klog.FromContext(ctx).V(2).Info("Releasing a pod that no longer matches its Job's selector", "pod", klog.KObj(pod), "job", klog.KObj(job))
	patch, err := controller.GenerateDeleteOwnerRefStrategicMergeBytes(pod.UID, []types.UID{job.UID}, batchv1.JobTrackingFinalizer)
	if err != nil {
		return err
	}
	if err := c.pods.PatchPod(ctx, ns, name, patch); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsInvalid(err) {
		return fmt.Errorf("releasing pod %s: %w", klog.KObj(pod), err)
	}
	return nil
}
