package job

import (
	"reflect"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"jobkeeper.dev/jobkeeper/pkg/controller/job/metrics"
)

// addPod observes a creation and wakes the owning Job (batched), or, for an
// orphan, queues finalizer removal and wakes Jobs that may adopt it.
func (c *Controller) addPod(logger klog.Logger, obj any) {
	pod := obj.(*corev1.Pod)
	c.countTerminatedWithFinalizer(nil, pod)
	if pod.DeletionTimestamp != nil {
		// Seen for the first time while being deleted (e.g. after a restart):
		// that is not the creation anyone is waiting for.
		c.deletePod(logger, pod, false)
		return
	}
	if ref := metav1.GetControllerOf(pod); ref != nil {
		job := c.resolveControllerRef(pod.Namespace, ref)
		if job == nil || (c.manages(job) && isFinished(job)) {
			// The Job is gone, or finished (e.g. by someone else while this
			// controller was down, or before a pod created from a stale cache
			// showed up): nothing will count the pod.
			if hasTrackingFinalizer(pod) {
				c.enqueueOrphanPod(pod)
			}
			return
		}
		if !c.manages(job) {
			return
		}
		c.expectations.observe(jobKey(job), 1, 0)
		c.enqueueBatched(logger, job)
		return
	}
	if hasTrackingFinalizer(pod) {
		c.enqueueOrphanPod(pod)
	}
	for _, job := range c.jobsSelecting(pod) {
		c.enqueueBatched(logger, job)
	}
}

// updatePod wakes the Jobs concerned by a pod change, observing finalizer
// removals and deletions.
func (c *Controller) updatePod(logger klog.Logger, old, cur any) {
	oldPod, curPod := old.(*corev1.Pod), cur.(*corev1.Pod)
	c.countTerminatedWithFinalizer(oldPod, curPod)
	if oldPod.ResourceVersion == curPod.ResourceVersion {
		return
	}
	if curPod.DeletionTimestamp != nil {
		// Replacement pods may be created as soon as deletion starts.
		c.deletePod(logger, curPod, false)
		return
	}
	finalizerGone := !hasTrackingFinalizer(curPod)
	curRef, oldRef := metav1.GetControllerOf(curPod), metav1.GetControllerOf(oldPod)
	refChanged := !sameOwnerRef(curRef, oldRef)
	if refChanged && oldRef != nil {
		if job := c.resolveControllerRef(oldPod.Namespace, oldRef); job != nil && c.manages(job) {
			if finalizerGone {
				c.finalizers.observed(jobKey(job), curPod.UID)
			}
			c.enqueueBatched(logger, job)
		}
	}
	if curRef != nil {
		job := c.resolveControllerRef(curPod.Namespace, curRef)
		if job == nil {
			// Owned by a Job that is gone: the same as an orphan.
			if !finalizerGone {
				c.enqueueOrphanPod(curPod)
			}
			return
		}
		if !c.manages(job) {
			return
		}
		if finalizerGone {
			c.finalizers.observed(jobKey(job), curPod.UID)
		}
		if isFinished(job) {
			if !finalizerGone {
				c.enqueueOrphanPod(curPod)
			}
			return
		}
		c.enqueueBatched(logger, job)
		return
	}
	if hasTrackingFinalizer(curPod) {
		c.enqueueOrphanPod(curPod)
	}
	if refChanged || !reflect.DeepEqual(curPod.Labels, oldPod.Labels) {
		for _, job := range c.jobsSelecting(curPod) {
			c.enqueueBatched(logger, job)
		}
	}
}

// sameOwnerRef reports whether a and b are the same controller reference,
// field by field, as reflect.DeepEqual would (both nil, or equal fields
// with the pointed-to booleans compared), without reflection on every pod
// update.
func sameOwnerRef(a, b *metav1.OwnerReference) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.APIVersion == b.APIVersion && a.Kind == b.Kind && a.Name == b.Name && a.UID == b.UID &&
		sameBool(a.Controller, b.Controller) && sameBool(a.BlockOwnerDeletion, b.BlockOwnerDeletion)
}

// sameBool reports whether a and b are both nil or point to equal values.
func sameBool(a, b *bool) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// deletePod observes a deletion (final, or the deletion timestamp being set)
// and wakes the owning Job; pods whose Job is gone or finished go to the
// orphan queue if they still hold the finalizer.
func (c *Controller) deletePod(logger klog.Logger, obj any, final bool) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		tomb, ok := obj.(cache.DeletedFinalStateUnknown)
		if !ok {
			return
		}
		if pod, ok = tomb.Obj.(*corev1.Pod); !ok {
			return
		}
	}
	if final {
		c.countTerminatedWithFinalizer(pod, nil)
	}
	ref := metav1.GetControllerOf(pod)
	withFinalizer := hasTrackingFinalizer(pod)
	if ref == nil {
		if withFinalizer {
			c.enqueueOrphanPod(pod)
		}
		return
	}
	job := c.resolveControllerRef(pod.Namespace, ref)
	if job == nil || isFinished(job) {
		if withFinalizer {
			c.enqueueOrphanPod(pod)
		}
		return
	}
	if !c.manages(job) {
		return
	}
	key := jobKey(job)
	c.expectations.observe(key, 0, 1)
	if final || !withFinalizer {
		c.finalizers.observed(key, pod.UID)
	}
	c.enqueueBatched(logger, job)
}

// addJob syncs a new Job at once.
func (c *Controller) addJob(logger klog.Logger, obj any) {
	job := obj.(*batchv1.Job)
	if !c.manages(job) {
		if job.Spec.ManagedBy != nil {
			c.metrics.JobsByExternalController.WithLabelValues(*job.Spec.ManagedBy).Inc()
		}
		return
	}
	c.sources.watchManual(job)
	c.enqueue(logger, job, 0)
}

// updateJob syncs a Job at once on spec changes and batched on status-only
// changes, and schedules the new active deadline if it changed. A finished
// Job only gets its pods' finalizers cleaned.
func (c *Controller) updateJob(logger klog.Logger, old, cur any) {
	oldJob, curJob := old.(*batchv1.Job), cur.(*batchv1.Job)
	if !c.manages(curJob) {
		return
	}
	c.sources.watchManual(curJob)
	if isFinished(curJob) {
		// syncFinished releases what still holds the finalizer and forgets
		// the Job, whoever finished it.
		c.enqueueBatched(logger, curJob)
		return
	}
	if curJob.Generation == oldJob.Generation {
		c.enqueueBatched(logger, curJob)
	} else {
		c.enqueue(logger, curJob, 0)
	}
	if curJob.Status.StartTime != nil && curJob.Spec.ActiveDeadlineSeconds != nil {
		oldADS := oldJob.Spec.ActiveDeadlineSeconds
		if oldADS == nil || *oldADS != *curJob.Spec.ActiveDeadlineSeconds {
			if left, ok := deadlineRemaining(curJob, c.clock.Now()); ok {
				c.queue.AddAfter(jobKey(curJob), left)
			}
		}
	}
}

// deleteJob forgets a Job and queues the removal of its pods' finalizers.
func (c *Controller) deleteJob(logger klog.Logger, obj any) {
	job, ok := obj.(*batchv1.Job)
	if !ok {
		tomb, ok := obj.(cache.DeletedFinalStateUnknown)
		if !ok {
			return
		}
		if job, ok = tomb.Obj.(*batchv1.Job); !ok {
			return
		}
	}
	if !c.manages(job) {
		return
	}
	c.enqueue(logger, job, 0)
	c.forgetJob(jobKey(job), job.UID)
	c.enqueueSelectorOrphans(logger, job)
	if c.sources != nil {
		// Its pods without the Job label leave the caches with its narrow
		// informer: those holding the finalizer are read live.
		for _, m := range c.sources.outsidePodsOf(job.Namespace, job.UID) {
			c.orphanQueue.Add(orphanKey{namespace: m.Namespace, name: m.Name, live: true})
		}
		c.sources.unwatchManual(job)
	}
}

// enqueue queues the Job's key after delay.
func (c *Controller) enqueue(logger klog.Logger, job *batchv1.Job, delay time.Duration) {
	key := jobKey(job)
	// Checked first: the arguments would be boxed on every pod event even
	// with the line off.
	if v := logger.V(4); v.Enabled() {
		v.Info("Enqueueing job", "key", key, "delay", delay)
	}
	c.queue.AddAfter(key, delay)
}

// enqueueBatched queues the Job at once while its wake-ups are few, and
// after the batch period in a burst, so that a burst of pod events shares
// one sync (batching.go).
func (c *Controller) enqueueBatched(logger klog.Logger, job *batchv1.Job) {
	key := jobKey(job)
	c.enqueue(logger, job, c.batches.delay(key, c.clock.Now(), c.opts.SyncBatchPeriod))
}

// jobsSelecting returns the managed Jobs whose selector matches the pod.
func (c *Controller) jobsSelecting(pod *corev1.Pod) []*batchv1.Job {
	jobs, err := c.jobLister.GetPodJobs(pod)
	if err != nil {
		return nil
	}
	var out []*batchv1.Job
	for i := range jobs {
		if c.manages(&jobs[i]) {
			out = append(out, &jobs[i])
		}
	}
	return out
}

// countTerminatedWithFinalizer feeds the terminated_pods_tracking_finalizer
// metric: "add" when a pod becomes terminal holding the finalizer, "delete"
// when such a pod loses it or goes away. nil stands for no pod.
func (c *Controller) countTerminatedWithFinalizer(old, cur *corev1.Pod) {
	was := old != nil && isTerminal(old) && hasTrackingFinalizer(old)
	is := cur != nil && isTerminal(cur) && hasTrackingFinalizer(cur)
	switch {
	case is && !was:
		c.metrics.TerminatedPodsTrackingFinalizer.WithLabelValues(metrics.Add).Inc()
	case was && !is:
		c.metrics.TerminatedPodsTrackingFinalizer.WithLabelValues(metrics.Delete).Inc()
	}
}

// selectorOf returns the Job's selector, or nothing for an invalid one.
func selectorOf(job *batchv1.Job) (labels.Selector, bool) {
	s, err := metav1.LabelSelectorAsSelector(job.Spec.Selector)
	if err != nil {
		return nil, false
	}
	return s, true
}
