package ttlafterfinished

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"jobkeeper.dev/jobkeeper/pkg/controller/ttlafterfinished/policy"
)

// groupKey names one history-limit group of one policy: the objects of a
// namespace that share a group value (see policy.Policy.Group).
type groupKey struct {
	policy, namespace, group string
}

// noteHistory enqueues the history-limit groups an object belongs to, for
// every ready policy with a keepLast that selects it and under which it
// finished.
func (c *Controller) noteHistory(gvk schema.GroupVersionKind, obj runtime.Object, m metav1.Object) {
	if m.GetDeletionTimestamp() != nil {
		return
	}
	var nsLabels labels.Set
	for _, p := range c.policiesFor(gvk) {
		if !p.HasHistoryLimit() {
			continue
		}
		if p.HasNamespaceSelector && nsLabels == nil {
			nsLabels = c.namespaceLabelsFunc()(m.GetNamespace())
		}
		if !p.Matches(m, nsLabels, gvk == policy.PodGVK && controlledByJob(m)) {
			continue
		}
		g, ok := p.Group(m)
		if !ok || !p.Rule.Read(obj).Expirable() {
			continue
		}
		c.historyQueue.Add(groupKey{policy: p.Name, namespace: m.GetNamespace(), group: g})
	}
}

// syncGroup applies one policy's history limit to one group: it ranks the
// group's finished objects in the cache and deletes those beyond the limit.
//
// Exactness: the ranking depends only on the members (policy.Excess), and
// the cache can lag but not invent objects this controller deleted, so
// deleting what the cache ranks beyond the limit never removes one of the
// newest N; objects already deleted by this controller but still cached
// rank where they did and are not deleted twice (inFlight). A delete
// carries the UID as precondition, so a recreated object of the same name
// is never hit.
func (c *Controller) syncGroup(ctx context.Context, key groupKey) error {
	logger := klog.FromContext(ctx)
	c.mu.RLock()
	p := c.policies[key.policy]
	c.mu.RUnlock()
	if p == nil || !p.Ready || !p.HasHistoryLimit() {
		return nil
	}
	ops, objs := c.opsAndObjects(p, key.namespace)
	if ops == nil {
		return nil
	}
	nsLabels := c.namespaceLabelsFunc()(key.namespace)
	byUID := map[types.UID]runtime.Object{}
	var members []policy.Member
	for _, obj := range objs {
		m := accessor(obj)
		if m.GetDeletionTimestamp() != nil || !p.Matches(m, nsLabels, p.GVK == policy.PodGVK && controlledByJob(m)) {
			continue
		}
		if g, ok := p.Group(m); !ok || g != key.group {
			continue
		}
		st := p.Rule.Read(obj)
		if !st.Expirable() {
			continue
		}
		members = append(members, policy.Member{Name: m.GetName(), UID: m.GetUID(), Failed: st.Failed, At: st.At})
		byUID[m.GetUID()] = obj
	}
	now := c.clock.Now()
	var errs []error
	for _, e := range policy.Excess(members, p.KeepFor(false), p.KeepFor(true)) {
		obj := byUID[e.UID]
		v := &verdict{FinishedAt: e.At, Policy: p.Name, Failed: e.Failed, DryRun: p.DryRun || c.globalDryRun, Events: p.Events, Propagation: p.Propagation}
		if v.DryRun {
			c.reportDryRun(logger, ops.gvk, obj, v)
			continue
		}
		if !c.startDelete(e.UID) {
			continue
		}
		uid := e.UID
		err := ops.delete(ctx, key.namespace, e.Name, metav1.DeleteOptions{
			PropagationPolicy: &v.Propagation,
			Preconditions:     &metav1.Preconditions{UID: &uid},
		})
		switch {
		case err == nil:
			c.metrics.historyDeleted.WithLabelValues(ops.gvk.Group, ops.gvk.Kind).Inc()
			c.metrics.deleted.WithLabelValues(ops.gvk.Group, ops.gvk.Kind, modeDelete).Inc()
			c.countDeletion(p.Name, now, false)
			if v.Events || c.deletionEvents {
				c.recorder.Eventf(obj, corev1.EventTypeNormal, ReasonDeleted, "Deleted %s %s after it finished: beyond the last %d kept by TTLPolicy %s",
					outcome(e.Failed), now.Sub(e.At).Round(time.Second), *p.KeepFor(e.Failed), p.Name)
			}
			logger.V(2).Info("Deleted object beyond the history limit", "kind", ops.gvk.Kind, "object", klog.KRef(key.namespace, e.Name), "policy", p.Name)
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			// Gone, or replaced by a new object of the same name.
		default:
			c.endDelete(e.UID)
			err = fmt.Errorf("deleting %s %s/%s beyond the history limit of TTLPolicy %s: %w", ops.gvk.Kind, key.namespace, e.Name, p.Name, err)
			c.noteError(p.Name, err)
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// startDelete marks a history deletion in flight; it returns false when one
// already is for that UID.
func (c *Controller) startDelete(uid types.UID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.inFlight[uid]; ok {
		return false
	}
	c.inFlight[uid] = struct{}{}
	return true
}

// endDelete clears an in-flight mark (the delete failed, or the object is
// gone from the cache).
func (c *Controller) endDelete(uid types.UID) {
	c.mu.Lock()
	delete(c.inFlight, uid)
	c.mu.Unlock()
}

// opsAndObjects returns the operations of a policy's target kind and its
// cached objects in one namespace.
func (c *Controller) opsAndObjects(p *policy.Policy, ns string) (*kindOps, []runtime.Object) {
	var out []runtime.Object
	switch p.GVR {
	case jobResource:
		jobs, _ := c.jobLister.Jobs(ns).List(labels.Everything())
		for _, j := range jobs {
			out = append(out, j)
		}
		return c.jobOps(), out
	case podResource:
		for _, p := range c.pods.list(ns) {
			out = append(out, p)
		}
		return c.podOps(), out
	}
	c.mu.RLock()
	t := c.targets[p.GVR]
	c.mu.RUnlock()
	if t == nil {
		return nil, nil
	}
	items, _ := t.informer.GetIndexer().ByIndex(cache.NamespaceIndex, ns)
	for _, o := range items {
		out = append(out, o.(runtime.Object))
	}
	return c.dynamicOps(t), out
}
