package ttlafterfinished

import (
	"context"
	"fmt"
	"strings"
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
	"jobkeeper.dev/jobkeeper/pkg/controller/ttlafterfinished/policy"
)

// policyStats are a policy's deletions not yet written to its status, and
// its last error.
type policyStats struct {
	// deleted counts deletions; wouldDelete dry-run reports.
	deleted, wouldDelete int64
	// last is the time of the latest one.
	last time.Time
	// lastError is the latest error met applying the policy, if any.
	lastError string
}

// countDeletion records a deletion (or a dry-run report) for a policy and
// schedules a status write, paced (see statusPacer): promptly after a quiet
// spell, at most once per StatusWriteInterval during a burst.
func (c *Controller) countDeletion(policy string, at time.Time, dryRun bool) {
	c.mu.Lock()
	s := c.statsFor(policy)
	if dryRun {
		s.wouldDelete++
	} else {
		s.deleted++
	}
	s.last = at
	c.mu.Unlock()
	c.schedulePolicyStatus(policy)
}

// schedulePolicyStatus asks for a status sync of policy, to write stats
// just recorded, when the pacer allows it.
func (c *Controller) schedulePolicyStatus(policy string) {
	c.policyQueue.AddAfter(policy, c.pacer.delay(policy, StatusSettleDelay, StatusWriteInterval))
}

// noteError records the last error of a policy (empty name: none).
func (c *Controller) noteError(policy string, err error) {
	if policy == "" {
		return
	}
	msg := err.Error()
	if len(msg) > 1024 {
		msg = msg[:1024]
	}
	c.mu.Lock()
	c.statsFor(policy).lastError = msg
	c.mu.Unlock()
	c.schedulePolicyStatus(policy)
}

// statsFor returns a policy's pending stats, creating them. Callers hold
// c.mu.
func (c *Controller) statsFor(policy string) *policyStats {
	s := c.stats[policy]
	if s == nil {
		s = &policyStats{}
		c.stats[policy] = s
	}
	return s
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

// hasStats reports whether a policy has stats not yet written.
func (c *Controller) hasStats(policy string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.stats[policy] != nil
}

// returnStats puts back stats that could not be written.
func (c *Controller) returnStats(policy string, s policyStats) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := c.statsFor(policy)
	cur.deleted += s.deleted
	cur.wouldDelete += s.wouldDelete
	if s.last.After(cur.last) {
		cur.last = s.last
	}
	if cur.lastError == "" {
		cur.lastError = s.lastError
	}
}

// syncPolicy compiles one TTLPolicy, starts or stops the informers its
// target needs, re-enqueues the target's objects when the policy changed,
// and writes the policy's status (Ready, matched and deleted objects).
// After writing deletions it checks the status once more
// StatusWriteInterval later, which writes only if something changed since:
// the end of a burst, or an object whose deletion the informers had not
// seen yet.
func (c *Controller) syncPolicy(ctx context.Context, name string) error {
	logger := klog.FromContext(ctx)
	obj, exists, err := c.policyInformer.GetStore().GetByKey(name)
	if err != nil {
		return err
	}
	if !exists {
		logger.V(2).Info("TTLPolicy removed", "policy", name)
		c.pacer.forget(name)
		c.mu.Lock()
		old := c.policies[name]
		delete(c.policies, name)
		delete(c.stats, name)
		c.rebuildIndex()
		c.reconcileTargets(ctx)
		c.mu.Unlock()
		if old != nil && old.Ready {
			// Objects that policy selected may now fall to another one.
			c.enqueueTargetObjects(old, "")
		}
		return nil
	}
	pol := &v1alpha1.TTLPolicy{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.(*unstructured.Unstructured).UnstructuredContent(), pol); err != nil {
		// The CRD's schema should make this impossible; say so on the
		// policy rather than retrying forever.
		logger.Info("TTLPolicy cannot be decoded", "policy", name, "err", err)
		return nil
	}
	cp := policy.Compile(pol, c.mapper)
	c.mu.RLock()
	old := c.policies[name]
	c.mu.RUnlock()
	if old == nil || old.UID != cp.UID || old.Generation != cp.Generation || !old.Ready {
		// The schema is read only when the policy is new, changed or was not
		// usable, not on every resync.
		s, err := c.schemas(ctx, cp.GVR)
		if err != nil {
			return fmt.Errorf("reading the schema of %s: %w", cp.GVR.GroupResource(), err)
		}
		cp.CheckSchema(s)
	}

	c.mu.Lock()
	changed := old == nil || old.UID != cp.UID || old.Generation != cp.Generation || old.Ready != cp.Ready
	c.policies[name] = cp
	c.rebuildIndex()
	started := c.reconcileTargets(ctx)
	c.mu.Unlock()
	if changed {
		logger.V(2).Info("TTLPolicy compiled", "policy", name, "ready", cp.Ready, "reason", cp.Reason, "message", cp.Message)
		if cp.Ready && !started[cp.GVR] {
			c.enqueueTargetObjects(cp, "")
		}
		if old != nil && old.Ready && (!cp.Ready || old.GVR != cp.GVR) {
			c.enqueueTargetObjects(old, "")
		}
	}

	c.pacer.syncing(name)
	flushing := c.hasStats(name)
	if err := c.updatePolicyStatus(ctx, pol, cp); err != nil {
		return err
	}
	if cp.Ready {
		c.policyQueue.AddAfter(name, PolicyResyncPeriod)
	} else {
		c.policyQueue.AddAfter(name, UnreadyPolicyRetryPeriod)
	}
	if flushing {
		logger.V(4).Info("TTLPolicy status written with deletions, checking again", "policy", name, "after", StatusWriteInterval)
		c.policyQueue.AddAfter(name, StatusWriteInterval)
	}
	return nil
}

// rebuildIndex recomputes byKind from policies. Callers hold c.mu.
func (c *Controller) rebuildIndex() {
	byKind := map[schema.GroupVersionKind][]*policy.Policy{}
	for _, p := range c.policies {
		if p.Ready {
			byKind[p.GVK] = append(byKind[p.GVK], p)
		}
	}
	for _, ps := range byKind {
		policy.SortByName(ps)
	}
	c.byKind = byKind
}

// targetObjects lists the cached objects of a policy's target resource.
func (c *Controller) targetObjects(p *policy.Policy) []runtime.Object {
	var out []runtime.Object
	switch p.GVR {
	case jobResource:
		jobs, _ := c.jobLister.List(labels.Everything())
		for _, j := range jobs {
			out = append(out, j)
		}
	case podResource:
		for _, p := range c.pods.list("") {
			out = append(out, p)
		}
	default:
		c.mu.RLock()
		t := c.targets[p.GVR]
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
func (c *Controller) enqueueTargetObjects(p *policy.Policy, ns string) {
	for _, obj := range c.targetObjects(p) {
		m := accessor(obj)
		if ns != "" && m.GetNamespace() != ns {
			continue
		}
		if p.GVR == jobResource {
			c.enqueueJob(m.GetNamespace(), m.GetName())
			continue
		}
		c.objectQueue.Add(objectKey{resource: p.GVR, namespace: m.GetNamespace(), name: m.GetName()})
	}
}

// policyCounts are the current counts a policy's status shows.
type policyCounts struct {
	matched, finished, noTTL, unreadable int32
	// nextExpiry is the earliest future expiry under the policy, or zero.
	nextExpiry time.Time
	// neverSet lists field-matcher paths no matched object has a value at.
	neverSet []string
}

// countObjects walks the cached objects a ready policy targets (not those
// being deleted) and counts what its status shows. An object finished "with no applicable TTL" is one
// this policy selects and that finished, for which it has no TTL for the
// outcome, the object has no own TTL, and no history limit covers the
// outcome: nothing this policy does will ever delete it.
func (c *Controller) countObjects(p *policy.Policy) policyCounts {
	var pc policyCounts
	if !p.Ready {
		return pc
	}
	now := c.clock.Now()
	nsLabels := c.namespaceLabelsFunc()
	paths := p.FieldMatcherPaths()
	seen := make([]bool, len(paths))
	for _, obj := range c.targetObjects(p) {
		m := accessor(obj)
		if m.GetDeletionTimestamp() != nil || !p.Matches(m, nsLabels(m.GetNamespace()), p.GVR == podResource && controlledByJob(m)) {
			continue
		}
		pc.matched++
		if len(paths) > 0 {
			if content, err := toContent(obj); err == nil {
				for i, path := range paths {
					if !seen[i] {
						_, found, _ := unstructured.NestedFieldNoCopy(content, path...)
						seen[i] = found
					}
				}
			}
		}
		st := p.Rule.Read(obj)
		if !st.Finished {
			continue
		}
		pc.finished++
		if st.Err != nil {
			pc.unreadable++
			continue
		}
		own, hasOwn, _ := p.OwnTTL(obj)
		if a, hasAnn, err := annotationTTL(m); hasAnn && err == nil {
			own, hasOwn = a, true
		}
		ttl := p.TTLFor(st.Failed)
		if hasOwn {
			ttl = &own
		}
		if ttl == nil {
			if p.KeepFor(st.Failed) == nil {
				pc.noTTL++
			}
			continue
		}
		if at := st.At.Add(secondsToDuration(*ttl)); at.After(now) && (pc.nextExpiry.IsZero() || at.Before(pc.nextExpiry)) {
			pc.nextExpiry = at
		}
	}
	if pc.matched > 0 {
		for i, path := range paths {
			if !seen[i] {
				pc.neverSet = append(pc.neverSet, strings.Join(path, "."))
			}
		}
	}
	return pc
}

// toContent returns obj's content as a map.
func toContent(obj runtime.Object) (map[string]interface{}, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return u.Object, nil
	}
	return runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
}

// updatePolicyStatus writes the policy's status if it changed. The write
// carries the cached resourceVersion, so a stale cache cannot overwrite the
// deletion counts: the write conflicts and is retried with pending stats
// kept.
func (c *Controller) updatePolicyStatus(ctx context.Context, pol *v1alpha1.TTLPolicy, cp *policy.Policy) error {
	st := pol.Status.DeepCopy()
	st.ObservedGeneration = pol.Generation
	now := metav1.NewTime(c.clock.Now())
	cond := metav1.Condition{
		Type:               v1alpha1.PolicyReady,
		Status:             metav1.ConditionTrue,
		Reason:             cp.Reason,
		Message:            cp.Message,
		ObservedGeneration: pol.Generation,
		LastTransitionTime: now,
	}
	if !cp.Ready {
		cond.Status = metav1.ConditionFalse
	}
	apimeta.SetStatusCondition(&st.Conditions, cond)
	if cp.GVK.Kind != "" {
		st.Target = cp.TargetString()
	}
	counts := c.countObjects(cp)
	st.Matched, st.Finished, st.NoApplicableTTL, st.UnreadableFinishTime = counts.matched, counts.finished, counts.noTTL, counts.unreadable
	st.NextExpiry = nil
	if !counts.nextExpiry.IsZero() {
		st.NextExpiry = &metav1.Time{Time: counts.nextExpiry}
	}
	warnings := append([]string{}, cp.Warnings...)
	if len(counts.neverSet) > 0 {
		warnings = append(warnings, fmt.Sprintf("none of the %d matched objects has a value at %s: check the path against the objects", counts.matched, strings.Join(counts.neverSet, ", ")))
	}
	if cp.Ready && len(warnings) > 0 {
		reason := v1alpha1.WarningNeverMatches
		if len(cp.Warnings) == 0 {
			reason = v1alpha1.WarningFieldNeverSet
		}
		apimeta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: v1alpha1.PolicyWarning, Status: metav1.ConditionTrue, Reason: reason,
			Message: strings.Join(warnings, "; "), ObservedGeneration: pol.Generation, LastTransitionTime: now,
		})
	} else {
		apimeta.RemoveStatusCondition(&st.Conditions, v1alpha1.PolicyWarning)
	}
	stats := c.takeStats(pol.Name)
	st.Deleted += stats.deleted
	st.WouldDelete += stats.wouldDelete
	if !stats.last.IsZero() {
		st.LastDeletionTime = &metav1.Time{Time: stats.last}
	}
	if stats.lastError != "" {
		st.LastError = stats.lastError
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
	u.SetGroupVersionKind(v1alpha1.TTLPolicyKind)
	if _, err := c.dynamic.Resource(v1alpha1.TTLPolicyResource).UpdateStatus(ctx, u, metav1.UpdateOptions{FieldManager: c.fieldManager}); err != nil {
		c.returnStats(pol.Name, stats)
		return fmt.Errorf("updating status of TTLPolicy %s: %w", pol.Name, err)
	}
	return nil
}
