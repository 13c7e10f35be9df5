package ttlafterfinished

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
)

// expire is the expiry path shared by every kind. Given an object read from
// the informer cache it:
//
//  1. evaluates the object; if it does not qualify (not finished, no TTL,
//     being deleted), there is nothing to do;
//  2. if the TTL has not expired, requeues the object for exactly the
//     remaining time (a finish time in the future, i.e. clock skew, is
//     logged and simply defers deletion);
//  3. in dry-run, records a WouldDelete event once per object;
//  4. otherwise deletes it with the cached UID and resourceVersion as
//     preconditions: one API call in the common case.
//  5. Only if the apiserver refuses the preconditions (the object changed or
//     was replaced since the cache saw it) does it GET the live object and go
//     through 1-4 once more with the live object's UID and resourceVersion.
//
// Invariant: an object is deleted only if the exact version that was
// evaluated as expired is the one stored, because the resourceVersion
// precondition is checked atomically by the storage layer.
func (c *Controller) expire(ctx context.Context, ops *kindOps, cached runtime.Object) error {
	done, err := c.tryExpire(ctx, ops, cached)
	if done || err != nil {
		return err
	}
	m := accessor(cached)
	c.metrics.conflicts.WithLabelValues(ops.gvk.Group, ops.gvk.Kind).Inc()
	klog.FromContext(ctx).V(2).Info("Object changed since cached, re-reading", "kind", ops.gvk.Kind, "object", klog.KObj(m))
	live, err := ops.get(ctx, m.GetNamespace(), m.GetName())
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %s %s/%s after a delete conflict: %w", ops.gvk.Kind, m.GetNamespace(), m.GetName(), err)
	}
	done, err = c.tryExpire(ctx, ops, live)
	if err != nil || done {
		return err
	}
	c.metrics.conflicts.WithLabelValues(ops.gvk.Group, ops.gvk.Kind).Inc()
	return fmt.Errorf("deleting %s %s/%s: object keeps changing", ops.gvk.Kind, m.GetNamespace(), m.GetName())
}

// tryExpire runs steps 1-4 of expire on obj. done is false only when the
// delete was refused by a precondition.
func (c *Controller) tryExpire(ctx context.Context, ops *kindOps, obj runtime.Object) (done bool, err error) {
	logger := klog.FromContext(ctx)
	m := accessor(obj)
	v, err := ops.evaluate(logger, obj)
	if err != nil || v == nil {
		return true, err
	}
	now := c.clock.Now()
	if v.finishedInFuture(now) {
		logger.Info("Warning: Found object finished in the future. This is likely due to time skew in the cluster. Cleanup will be deferred.",
			"kind", ops.gvk.Kind, "object", klog.KObj(m), "finishTime", v.finishedAt.UTC(), "now", now.UTC())
	}
	if d := v.remaining(now); d > 0 {
		logger.V(4).Info("Found finished object, TTL not expired", "kind", ops.gvk.Kind, "object", klog.KObj(m),
			"finishTime", v.finishedAt.UTC(), "remainingTTL", d, "policy", v.policy)
		ops.requeueAfter(m.GetNamespace(), m.GetName(), d)
		return true, nil
	}
	if v.dryRun {
		c.reportDryRun(logger, ops, obj, v)
		return true, nil
	}
	uid, rv := m.GetUID(), m.GetResourceVersion()
	opts := metav1.DeleteOptions{
		PropagationPolicy: &v.propagation,
		Preconditions:     &metav1.Preconditions{UID: &uid, ResourceVersion: &rv},
	}
	logger.V(4).Info("Cleaning up", "kind", ops.gvk.Kind, "object", klog.KObj(m), "policy", v.policy)
	err = ops.delete(ctx, m.GetNamespace(), m.GetName(), opts)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case apierrors.IsConflict(err):
		return false, nil
	case err != nil:
		return true, fmt.Errorf("deleting %s %s/%s: %w", ops.gvk.Kind, m.GetNamespace(), m.GetName(), err)
	}
	c.metrics.observeDeletion(ops.gvk, false, c.clock.Since(v.expireAt()))
	if v.events || c.deletionEvents {
		c.recorder.Eventf(obj, corev1.EventTypeNormal, ReasonDeleted, "Deleted %s %s", v.outcome(), v.describe())
	}
	if v.policy != "" {
		c.countDeletion(v.policy, now)
	}
	logger.V(2).Info("Deleted expired object", "kind", ops.gvk.Kind, "object", klog.KObj(m), "policy", v.policy)
	return true, nil
}

// reportDryRun records one WouldDelete event per object and counts it.
func (c *Controller) reportDryRun(logger klog.Logger, ops *kindOps, obj runtime.Object, v *verdict) {
	m := accessor(obj)
	c.mu.Lock()
	_, seen := c.reported[m.GetUID()]
	c.reported[m.GetUID()] = struct{}{}
	c.mu.Unlock()
	if seen {
		return
	}
	c.metrics.observeDeletion(ops.gvk, true, 0)
	c.recorder.Eventf(obj, corev1.EventTypeNormal, ReasonWouldDelete, "Would delete %s %s (dry-run)", v.outcome(), v.describe())
	if v.policy != "" {
		c.countDeletion(v.policy, c.clock.Now())
	}
	logger.V(2).Info("Dry-run: would delete expired object", "kind", ops.gvk.Kind, "object", klog.KObj(m), "policy", v.policy)
}

// outcome names the verdict's outcome for messages.
func (v *verdict) outcome() string {
	if v.failed {
		return "failed object"
	}
	return "succeeded object"
}

// describe says which TTL expired, for event messages.
func (v *verdict) describe() string {
	if v.policy == "" {
		return fmt.Sprintf("%s after it finished (own TTL)", v.ttl)
	}
	return fmt.Sprintf("%s after it finished (CleanupPolicy %s)", v.ttl, v.policy)
}
