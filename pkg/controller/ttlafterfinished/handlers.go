package ttlafterfinished

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"jobkeeper.dev/jobkeeper/pkg/apis/jobkeeper/v1alpha1"
	"jobkeeper.dev/jobkeeper/pkg/controller/ttlafterfinished/policy"
)

// onJob enqueues a Job that is finished, not being deleted, and has a TTL
// of its own or may be selected by a policy.
func (c *Controller) onJob(logger klog.Logger, obj interface{}) {
	job, ok := obj.(*batchv1.Job)
	if !ok || job.DeletionTimestamp != nil || !jobFinished(job) {
		return
	}
	if job.Spec.TTLSecondsAfterFinished == nil && !c.hasPolicies(policy.JobGVK) {
		return
	}
	logger.V(4).Info("Add job to cleanup", "job", klog.KObj(job))
	c.enqueueJob(job.Namespace, job.Name)
}

// enqueueJob adds a Job key.
func (c *Controller) enqueueJob(ns, name string) {
	c.jobQueue.Add(ns + "/" + name)
}

// onPod enqueues a finished Pod that is not being deleted and carries the
// TTL annotation or may be selected by a policy.
func (c *Controller) onPod(logger klog.Logger, obj interface{}) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.DeletionTimestamp != nil {
		return
	}
	if finished, _ := policy.PodFinished(pod); !finished {
		return
	}
	if _, has := pod.Annotations[v1alpha1.TTLAnnotation]; !has && !c.hasPolicies(policy.PodGVK) {
		return
	}
	logger.V(4).Info("Add pod to cleanup", "pod", klog.KObj(pod))
	c.objectQueue.Add(objectKey{resource: podResource, namespace: pod.Namespace, name: pod.Name})
}

// onDynamic returns the handler that enqueues objects of a custom resource.
func (c *Controller) onDynamic(gvr schema.GroupVersionResource, gvk schema.GroupVersionKind) cache.ResourceEventHandler {
	add := func(obj interface{}) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok || u.GetDeletionTimestamp() != nil {
			return
		}
		c.objectQueue.Add(objectKey{resource: gvr, namespace: u.GetNamespace(), name: u.GetName()})
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    add,
		UpdateFunc: func(_, obj interface{}) { add(obj) },
		DeleteFunc: c.onDeleteOf(gvk),
	}
}

// onNamespaceUpdate re-enqueues a namespace's objects when its labels
// changed and a policy selects namespaces by label, since that may change
// which policy applies to them.
func (c *Controller) onNamespaceUpdate(oldObj, newObj interface{}) {
	o, ok1 := oldObj.(*corev1.Namespace)
	n, ok2 := newObj.(*corev1.Namespace)
	if !ok1 || !ok2 || labels.Equals(o.Labels, n.Labels) {
		return
	}
	c.mu.RLock()
	var affected []*policy.Policy
	for _, p := range c.policies {
		if p.Ready && p.HasNamespaceSelector {
			affected = append(affected, p)
		}
	}
	c.mu.RUnlock()
	for _, p := range affected {
		c.enqueueTargetObjects(p, n.Name)
	}
}

// onDeleteOf returns the delete handler of a kind: it forgets the object's
// dry-run reports, its in-flight history deletion and its pending expiry.
// Deleting a finished object can also let a history-limit group keep one
// more, which needs no action: nothing was deleted for it.
func (c *Controller) onDeleteOf(gvk schema.GroupVersionKind) func(obj interface{}) {
	return func(obj interface{}) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			return
		}
		c.mu.Lock()
		delete(c.reported, m.GetUID())
		delete(c.inFlight, m.GetUID())
		c.mu.Unlock()
		c.pending.forget(pendingRef{group: gvk.Group, kind: gvk.Kind, namespace: m.GetNamespace(), name: m.GetName()})
	}
}

// onPolicy enqueues a policy that was added or deleted.
func (c *Controller) onPolicy(obj interface{}) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		c.policyQueue.Add(key)
	}
}

// onPolicyUpdate enqueues a policy whose spec changed; status-only updates
// (the controller's own writes) are ignored.
func (c *Controller) onPolicyUpdate(oldObj, newObj interface{}) {
	o, err1 := meta.Accessor(oldObj)
	n, err2 := meta.Accessor(newObj)
	if err1 != nil || err2 != nil || o.GetGeneration() == n.GetGeneration() {
		return
	}
	c.onPolicy(newObj)
}

// hasPolicies reports whether a ready policy targets gvk.
func (c *Controller) hasPolicies(gvk schema.GroupVersionKind) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.byKind[gvk]) > 0
}

// policiesFor returns the ready policies that target gvk, sorted by name.
func (c *Controller) policiesFor(gvk schema.GroupVersionKind) []*policy.Policy {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.byKind[gvk]
}
