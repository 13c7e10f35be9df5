package job

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// A finished Job (Complete or Failed) is never synced again, and everything
// the controller kept in memory for it is dropped as soon as the informer
// shows it finished: expectations, finalizer expectations, the backoff
// record, the read-your-writes record and the finished mark. What must
// still happen is cleanup: no pod of it may keep the tracking finalizer,
// whether the pod finished before or after the Job, was created from a
// stale cache after the Job finished, or was missed by a crash between the
// finishing write and the finalizer removals. syncFinished releases them.

// syncFinished handles a sync of a Job the cache shows finished: it queues
// for finalizer removal the Job's pods that still hold the finalizer (and
// whose removal is not already in flight), then forgets the Job.
func (c *Controller) syncFinished(logger klog.Logger, key string, job *batchv1.Job) {
	inFlight := c.finalizers.expected(key)
	objs, err := c.podIndexer.ByIndex(podControllerIndex, string(job.UID))
	if err != nil {
		logger.Error(err, "Listing pods of a finished job", "job", klog.KObj(job))
	}
	queued := 0
	for _, o := range objs {
		pod, ok := o.(*corev1.Pod)
		if !ok || pod.Namespace != job.Namespace || !hasTrackingFinalizer(pod) || inFlight.Has(pod.UID) {
			continue
		}
		c.enqueueOrphanPod(pod)
		queued++
	}
	if c.sources != nil {
		for _, m := range c.sources.outsidePodsOf(job.Namespace, job.UID) {
			if !inFlight.Has(m.UID) {
				c.orphanQueue.Add(orphanKey{namespace: m.Namespace, name: m.Name, live: true})
				queued++
			}
		}
	}
	if queued > 0 {
		logger.V(2).Info("Releasing finalizers of pods of a finished job", "job", klog.KObj(job), "pods", queued)
	}
	c.forgetJob(key, job.UID)
}

// forgetJob drops what the controller remembers of the Job key (of uid,
// or of any incarnation when uid is empty).
func (c *Controller) forgetJob(key string, uid types.UID) {
	c.expectations.forget(key)
	c.finalizers.forget(key)
	c.backoff.remove(key)
	c.writes.forget(key, uid)
	c.batches.forget(key)
	if uid != "" {
		c.finishedJobs.Delete(uid)
	}
}
