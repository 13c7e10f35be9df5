package ttlafterfinished

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	"jobkeeper.dev/jobkeeper/pkg/apis/jobkeeper/v1alpha1"
)

// policyStats are a policy's deletions not yet written to its status.
type policyStats struct {
	// deleted counts deletions (or dry-run reports).
	deleted int64
	// last is the time of the latest one.
	last time.Time
}

// countDeletion records a deletion for a policy and schedules a status write.
func (c *Controller) countDeletion(policy string, at time.Time) {
	c.mu.Lock()
	s := c.stats[policy]
	if s == nil {
		s = &policyStats{}
		c.stats[policy] = s
	}
	s.deleted++
	s.last = at
	c.mu.Unlock()
	c.policyQueue.AddAfter(policy, StatusBatchPeriod)
}

// takeStats removes and returns a policy's pending stats.
func (c *Controller) takeStats(policy string) policyStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats[policy]
	delete(c.stats, policy)
	if s == nil {
		return policyStats{}
	}
	return *s
}

// returnStats puts back stats that could not be written.
func (c *Controller) returnStats(policy string, s policyStats) {
	if s.deleted == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := c.stats[policy]
	if cur == nil {
		cur = &policyStats{}
		c.stats[policy] = cur
	}
	cur.deleted += s.deleted
	if s.last.After(cur.last) {
		cur.last = s.last
	}
}

// syncPolicy compiles one CleanupPolicy, starts or stops the informers its
// target needs, re-enqueues the target's objects when the policy changed,
// and writes the policy's status (Ready, matched and deleted objects).
func (c *Controller) syncPolicy(ctx context.Context, name string) error {
	logger := klog.FromContext(ctx)
	obj, exists, err := c.policyInformer.GetStore().GetByKey(name)
	if err != nil {
		return err
	}
	if !exists {
		logger.V(2).Info("CleanupPolicy removed", "policy", name)
		c.mu.Lock()
		old := c.policies[name]
		delete(c.policies, name)
		delete(c.stats, name)
		c.rebuildIndex()
		c.reconcileTargets(ctx)
		c.mu.Unlock()
		if old != nil && old.ready {
			// Objects that policy selected may now fall to another one.
			c.enqueueTargetObjects(old, "")
		}
		return nil
	}
	pol := &v1alpha1.CleanupPolicy{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.(*unstructured.Unstructured).UnstructuredContent(), pol); err != nil {
		return fmt.Errorf("decoding CleanupPolicy %s: %w", name, err)
	}
	cp := compilePolicy(pol, c.mapper)
	c.mu.RLock()
	old := c.policies[name]
	c.mu.RUnlock()
	if old == nil || old.uid != cp.uid || old.generation != cp.generation || !old.ready {
		// The schema is read only when the policy is new, changed or was not
		// usable, not on every resync.
		s, err := c.schemas(ctx, cp.gvr)
		if err != nil {
			return fmt.Errorf("reading the schema of %s: %w", cp.gvr.GroupResource(), err)
		}
		cp.checkFieldPaths(s)
	}

	c.mu.Lock()
	changed := old == nil || old.uid != cp.uid || old.generation != cp.generation || old.ready != cp.ready
	c.policies[name] = cp
	c.rebuildIndex()
	started := c.reconcileTargets(ctx)
	c.mu.Unlock()
	if changed {
		logger.V(2).Info("CleanupPolicy compiled", "policy", name, "ready", cp.ready, "reason", cp.reason, "message", cp.message)
		if cp.ready && !started[cp.gvr] {
			c.enqueueTargetObjects(cp, "")
		}
		if old != nil && old.ready && (!cp.ready || old.gvr != cp.gvr) {
			c.enqueueTargetObjects(old, "")
		}
	}

	if err := c.updatePolicyStatus(ctx, pol, cp); err != nil {
		return err
	}
	if cp.ready {
		c.policyQueue.AddAfter(name, PolicyResyncPeriod)
	} else {
		c.policyQueue.AddAfter(name, UnreadyPolicyRetryPeriod)
	}
	return nil
}

// rebuildIndex recomputes byKind from policies. Callers hold c.mu.
func (c *Controller) rebuildIndex() {
	byKind := map[schema.GroupVersionKind][]*compiledPolicy{}
	for _, p := range c.policies {
		if p.ready {
			byKind[p.gvk] = append(byKind[p.gvk], p)
		}
	}
	for _, ps := range byKind {
		sortPolicies(ps)
	}
	c.byKind = byKind
}

// targetObjects lists the cached objects of a policy's target resource.
func (c *Controller) targetObjects(p *compiledPolicy) []runtime.Object {
	var out []runtime.Object
	switch p.gvr {
	case jobResource:
		jobs, _ := c.jobLister.List(labels.Everything())
		for _, j := range jobs {
			out = append(out, j)
		}
	case podResource:
		pods, _ := c.podLister.List(labels.Everything())
		for _, p := range pods {
			out = append(out, p)
		}
	default:
		c.mu.RLock()
		t := c.targets[p.gvr]
		c.mu.RUnlock()
		if t != nil {
			for _, o := range t.informer.GetStore().List() {
				out = append(out, o.(runtime.Object))
			}
		}
	}
	return out
}

// enqueueTargetObjects enqueues the cached objects of a policy's target, in
// namespace ns or, when ns is empty, in every namespace.
func (c *Controller) enqueueTargetObjects(p *compiledPolicy, ns string) {
	for _, obj := range c.targetObjects(p) {
		m := accessor(obj)
		if ns != "" && m.GetNamespace() != ns {
			continue
		}
		if p.gvr == jobResource {
			c.enqueueJob(m.GetNamespace(), m.GetName())
			continue
		}
		c.objectQueue.Add(objectKey{resource: p.gvr, namespace: m.GetNamespace(), name: m.GetName()})
	}
}

// countMatches counts the cached objects a ready policy selects.
func (c *Controller) countMatches(p *compiledPolicy) int32 {
	if !p.ready {
		return 0
	}
	nsLabels := c.namespaceLabelsFunc()
	var n int32
	for _, obj := range c.targetObjects(p) {
		m := accessor(obj)
		if p.matches(m, nsLabels(m.GetNamespace()), p.gvr == podResource && controlledByJob(m)) {
			n++
		}
	}
	return n
}

// updatePolicyStatus writes the policy's status if it changed. The write
// carries the cached resourceVersion, so a stale cache cannot overwrite the
// deletion count: the write conflicts and is retried with pending stats kept.
func (c *Controller) updatePolicyStatus(ctx context.Context, pol *v1alpha1.CleanupPolicy, cp *compiledPolicy) error {
	st := pol.Status.DeepCopy()
	st.ObservedGeneration = pol.Generation
	cond := metav1.Condition{
		Type:               v1alpha1.PolicyReady,
		Status:             metav1.ConditionTrue,
		Reason:             cp.reason,
		Message:            cp.message,
		ObservedGeneration: pol.Generation,
		LastTransitionTime: metav1.NewTime(c.clock.Now()),
	}
	if !cp.ready {
		cond.Status = metav1.ConditionFalse
	}
	apimeta.SetStatusCondition(&st.Conditions, cond)
	st.MatchedObjects = c.countMatches(cp)
	stats := c.takeStats(pol.Name)
	st.DeletedObjects += stats.deleted
	if !stats.last.IsZero() {
		st.LastDeletionTime = &metav1.Time{Time: stats.last}
	}
	if equality.Semantic.DeepEqual(&pol.Status, st) {
		return nil
	}
	upd := pol.DeepCopy()
	upd.Status = *st
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(upd)
	if err != nil {
		c.returnStats(pol.Name, stats)
		return err
	}
	u := &unstructured.Unstructured{Object: content}
	u.SetGroupVersionKind(v1alpha1.CleanupPolicyKind)
	if _, err := c.dynamic.Resource(v1alpha1.CleanupPolicyResource).UpdateStatus(ctx, u, metav1.UpdateOptions{FieldManager: c.fieldManager}); err != nil {
		c.returnStats(pol.Name, stats)
		return fmt.Errorf("updating status of CleanupPolicy %s: %w", pol.Name, err)
	}
	return nil
}
