package ttlafterfinished

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
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
//  3. in dry run, records a TTLExpiredDryRun event once per object and
//     policy;
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
// delete was refused by a precondition. Dry-run policies' verdicts are
// reported first, each on its own; they never change the live verdict.
func (c *Controller) tryExpire(ctx context.Context, ops *kindOps, obj runtime.Object) (done bool, err error) {
	logger := klog.FromContext(ctx)
	m := accessor(obj)
	ref := pendingRef{group: ops.gvk.Group, kind: ops.gvk.Kind, namespace: m.GetNamespace(), name: m.GetName()}
	ev, err := ops.evaluate(logger, obj)
	if err != nil {
		return true, err
	}
	c.noteHistory(ops.gvk, obj, m)
	now := c.clock.Now()
	for _, r := range ev.reports {
		if d := r.Remaining(now); d > 0 {
			ops.requeueAfter(m.GetNamespace(), m.GetName(), d)
		} else {
			c.reportDryRun(logger, ops.gvk, obj, r)
		}
	}
	v := ev.live
	if v == nil {
		c.pending.forget(ref)
		return true, nil
	}
	if v.FinishedAt.After(now) {
		logger.Info("Warning: Found object finished in the future. This is likely due to time skew in the cluster. Cleanup will be deferred.",
			"kind", ops.gvk.Kind, "object", klog.KObj(m), "finishTime", v.FinishedAt.UTC(), "now", now.UTC())
	}
	if d := v.Remaining(now); d > 0 {
		logger.V(4).Info("Found finished object, TTL not expired", "kind", ops.gvk.Kind, "object", klog.KObj(m),
			"finishTime", v.FinishedAt.UTC(), "remainingTTL", d, "policy", v.Policy)
		c.pending.set(ref, v.ExpireAt())
		ops.requeueAfter(m.GetNamespace(), m.GetName(), d)
		return true, nil
	}
	if v.DryRun {
		c.pending.forget(ref)
		c.reportDryRun(logger, ops.gvk, obj, v)
		return true, nil
	}
	c.pending.set(ref, v.ExpireAt())
	uid, rv := m.GetUID(), m.GetResourceVersion()
	opts := metav1.DeleteOptions{
		PropagationPolicy: &v.Propagation,
		Preconditions:     &metav1.Preconditions{UID: &uid, ResourceVersion: &rv},
	}
	logger.V(4).Info("Cleaning up", "kind", ops.gvk.Kind, "object", klog.KObj(m), "policy", v.Policy)
	err = ops.delete(ctx, m.GetNamespace(), m.GetName(), opts)
	switch {
	case apierrors.IsNotFound(err):
		c.pending.forget(ref)
		return true, nil
	case apierrors.IsConflict(err):
		return false, nil
	case err != nil:
		err = fmt.Errorf("deleting %s %s/%s: %w", ops.gvk.Kind, m.GetNamespace(), m.GetName(), err)
		c.noteError(v.Policy, err)
		return true, err
	}
	c.pending.forget(ref)
	c.metrics.observeDeletion(ops.gvk, false, c.clock.Since(v.ExpireAt()))
	if v.Events || c.deletionEvents {
		c.recorder.Eventf(obj, corev1.EventTypeNormal, ReasonDeleted, "Deleted %s %s", outcome(v.Failed), describe(v, now))
	}
	if v.Policy != "" {
		c.countDeletion(v.Policy, now, false)
	}
	logger.V(2).Info("Deleted expired object", "kind", ops.gvk.Kind, "object", klog.KObj(m), "policy", v.Policy)
	return true, nil
}

// reportDryRun records one TTLExpiredDryRun event per object and dry-run
// policy, and counts it.
func (c *Controller) reportDryRun(logger klog.Logger, gvk schema.GroupVersionKind, obj runtime.Object, v *verdict) {
	m := accessor(obj)
	if !c.markReported(m.GetUID(), v.Policy) {
		return
	}
	now := c.clock.Now()
	c.metrics.observeDeletion(gvk, true, 0)
	c.recorder.Eventf(obj, corev1.EventTypeNormal, ReasonWouldDelete, "Would delete %s %s (dry run)", outcome(v.Failed), describe(v, now))
	if v.Policy != "" {
		c.countDeletion(v.Policy, now, true)
	}
	logger.V(2).Info("Dry run: would delete expired object", "kind", gvk.Kind, "object", klog.KObj(m), "policy", v.Policy)
}

// markReported records that a dry-run report was made for an object under
// a policy; it returns false when one already was.
func (c *Controller) markReported(uid types.UID, policy string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	byPolicy := c.reported[uid]
	if byPolicy == nil {
		byPolicy = map[string]struct{}{}
		c.reported[uid] = byPolicy
	}
	if _, seen := byPolicy[policy]; seen {
		return false
	}
	byPolicy[policy] = struct{}{}
	return true
}

// outcome names an outcome for messages.
func outcome(failed bool) string {
	if failed {
		return "failed object"
	}
	return "succeeded object"
}

// describe says how old the object is and which TTL expired, for event
// messages.
func describe(v *verdict, now time.Time) string {
	age := now.Sub(v.FinishedAt).Round(time.Second)
	if v.Policy == "" {
		return fmt.Sprintf("%s after it finished (own TTL %s)", age, v.TTL)
	}
	return fmt.Sprintf("%s after it finished (TTL %s, TTLPolicy %s)", age, v.TTL, v.Policy)
}
