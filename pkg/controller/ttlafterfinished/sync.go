package ttlafterfinished

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// kindOps are the per-kind operations the shared expiry path needs.
type kindOps struct {
	// gvk is the kind handled.
	gvk schema.GroupVersionKind
	// evaluate decides whether and when obj expires; nil when it does not.
	evaluate func(logger klog.Logger, obj runtime.Object) (*verdict, error)
	// get reads the live object from the apiserver.
	get func(ctx context.Context, ns, name string) (runtime.Object, error)
	// delete deletes with the given options.
	delete func(ctx context.Context, ns, name string, opts metav1.DeleteOptions) error
	// requeueAfter enqueues the object again after d.
	requeueAfter func(ns, name string, d time.Duration)
}

// jobOps handles batch/v1 Jobs through the typed client.
func (c *Controller) jobOps() *kindOps {
	return &kindOps{
		gvk:      jobGVK,
		evaluate: c.evaluateJob,
		get: func(ctx context.Context, ns, name string) (runtime.Object, error) {
			return c.client.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		},
		delete: func(ctx context.Context, ns, name string, opts metav1.DeleteOptions) error {
			return c.client.BatchV1().Jobs(ns).Delete(ctx, name, opts)
		},
		requeueAfter: func(ns, name string, d time.Duration) { c.jobQueue.AddAfter(ns+"/"+name, d) },
	}
}

// podOps handles v1 Pods through the typed client.
func (c *Controller) podOps() *kindOps {
	return &kindOps{
		gvk:      podGVK,
		evaluate: c.evaluatePod,
		get: func(ctx context.Context, ns, name string) (runtime.Object, error) {
			return c.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		},
		delete: func(ctx context.Context, ns, name string, opts metav1.DeleteOptions) error {
			return c.client.CoreV1().Pods(ns).Delete(ctx, name, opts)
		},
		requeueAfter: func(ns, name string, d time.Duration) {
			c.objectQueue.AddAfter(objectKey{resource: podResource, namespace: ns, name: name}, d)
		},
	}
}

// syncJob checks one Job and deletes it when its TTL has expired; before
// that, it requeues the Job for exactly the remaining time.
func (c *Controller) syncJob(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return err
	}
	logger := klog.FromContext(ctx)
	logger.V(4).Info("Checking if Job is ready for cleanup", "job", klog.KRef(ns, name))
	job, err := c.jobLister.Jobs(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	return c.expire(ctx, c.jobOps(), job)
}

// syncObject checks one Pod or custom resource.
func (c *Controller) syncObject(ctx context.Context, key objectKey) error {
	var (
		ops *kindOps
		obj runtime.Object
		err error
	)
	if key.resource == podResource {
		ops = c.podOps()
		obj, err = c.podLister.Pods(key.namespace).Get(key.name)
	} else {
		c.mu.RLock()
		t := c.targets[key.resource]
		c.mu.RUnlock()
		if t == nil {
			return nil // no policy targets this resource any more
		}
		ops = c.dynamicOps(t)
		obj, err = t.cached(key.namespace, key.name)
	}
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	return c.expire(ctx, ops, obj)
}

// evaluateJob applies a Job's own TTL, as upstream, or else the policies.
func (c *Controller) evaluateJob(logger klog.Logger, obj runtime.Object) (*verdict, error) {
	job, ok := obj.(*batchv1.Job)
	if !ok {
		return nil, fmt.Errorf("expected a Job, got %T", obj)
	}
	if job.DeletionTimestamp != nil {
		return nil, nil
	}
	if job.Spec.TTLSecondsAfterFinished != nil {
		return c.withGlobalDryRun(jobOwnVerdict(job))
	}
	return c.withGlobalDryRun(c.evaluatePolicies(logger, jobGVK, obj, job, false))
}

// evaluatePod applies a Pod's TTL annotation, or else the policies. Pods
// controlled by a Job only go to policies that include them.
func (c *Controller) evaluatePod(logger klog.Logger, obj runtime.Object) (*verdict, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, fmt.Errorf("expected a Pod, got %T", obj)
	}
	if pod.DeletionTimestamp != nil {
		return nil, nil
	}
	jobPod := controlledByJob(pod)
	if !jobPod {
		if _, has, err := annotationTTL(pod); has {
			if err != nil {
				c.recorder.Event(pod, corev1.EventTypeWarning, ReasonInvalidTTL, err.Error())
				return nil, nil
			}
			return c.withGlobalDryRun(podOwnVerdict(pod))
		}
	}
	return c.withGlobalDryRun(c.evaluatePolicies(logger, podGVK, obj, pod, jobPod))
}

// evaluatePolicies applies the ready policies that target gvk to one object
// and picks the winner with choose. The object's TTL annotation, if any,
// overrides the winner's TTL.
func (c *Controller) evaluatePolicies(logger klog.Logger, gvk schema.GroupVersionKind, obj runtime.Object, m metav1.Object, jobPod bool) (*verdict, error) {
	policies := c.policiesFor(gvk)
	if len(policies) == 0 {
		return nil, nil
	}
	nsLabels := c.namespaceLabelsFunc()
	var cands []candidate
	for _, p := range policies {
		if !p.matches(m, nsLabels(m.GetNamespace()), jobPod) {
			continue
		}
		st, err := p.rule.read(obj)
		if err != nil {
			logger.V(2).Info("Cannot read finish state", "policy", p.name, "object", klog.KObj(m), "err", err)
			c.recorder.Eventf(obj, corev1.EventTypeWarning, ReasonFinishTimeUnreadable, "CleanupPolicy %s: %v", p.name, err)
			continue
		}
		cands = append(cands, candidate{policy: p, state: st})
	}
	var own *int32
	if ttl, has, err := annotationTTL(m); err != nil {
		c.recorder.Event(obj, corev1.EventTypeWarning, ReasonInvalidTTL, err.Error())
	} else if has {
		own = &ttl
	}
	return choose(cands, own), nil
}

// namespaceLabelsFunc returns a memoising lookup of namespace labels.
func (c *Controller) namespaceLabelsFunc() func(ns string) labels.Set {
	memo := map[string]labels.Set{}
	return func(ns string) labels.Set {
		if l, ok := memo[ns]; ok {
			return l
		}
		var l labels.Set
		if n, err := c.nsLister.Get(ns); err == nil {
			l = labels.Set(n.Labels)
		}
		memo[ns] = l
		return l
	}
}

// withGlobalDryRun applies Options.DryRun to a verdict.
func (c *Controller) withGlobalDryRun(v *verdict, err error) (*verdict, error) {
	if v != nil && c.globalDryRun {
		v.dryRun = true
	}
	return v, err
}

// accessor returns obj's metadata; every object the controller handles has it.
func accessor(obj runtime.Object) metav1.Object {
	m, err := meta.Accessor(obj)
	if err != nil {
		panic(fmt.Sprintf("object %T without metadata: %v", obj, err))
	}
	return m
}
