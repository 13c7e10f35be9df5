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

	"jobkeeper.dev/jobkeeper/pkg/controller/ttlafterfinished/policy"
)

// kindOps are the per-kind operations the shared expiry path needs.
type kindOps struct {
	// gvk is the kind handled.
	gvk schema.GroupVersionKind
	// evaluate decides whether and when obj expires.
	evaluate func(logger klog.Logger, obj runtime.Object) (evaluation, error)
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
		gvk:      policy.JobGVK,
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
		gvk:      policy.PodGVK,
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
		obj, err = c.pods.get(key.namespace, key.name)
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

// evaluation is what the controller decided for one object.
type evaluation struct {
	// live is the verdict of the object's own TTL or of the live policies;
	// nil when nothing deletes the object by age.
	live *verdict
	// reports are the verdicts of dry-run policies, each reported on its
	// own; they never change live.
	reports []*verdict
}

// evaluateJob applies a Job's own TTL, as upstream, or else the policies.
func (c *Controller) evaluateJob(logger klog.Logger, obj runtime.Object) (evaluation, error) {
	job, ok := obj.(*batchv1.Job)
	if !ok {
		return evaluation{}, fmt.Errorf("expected a Job, got %T", obj)
	}
	if job.DeletionTimestamp != nil {
		return evaluation{}, nil
	}
	if job.Spec.TTLSecondsAfterFinished != nil {
		v, err := jobOwnVerdict(job)
		return c.withGlobalDryRun(evaluation{live: v}), err
	}
	return c.withGlobalDryRun(c.evaluatePolicies(logger, policy.JobGVK, obj, job, false)), nil
}

// evaluatePod applies a Pod's TTL annotation, or else the policies. Pods
// controlled by a Job only go to policies that include them.
func (c *Controller) evaluatePod(logger klog.Logger, obj runtime.Object) (evaluation, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return evaluation{}, fmt.Errorf("expected a Pod, got %T", obj)
	}
	if pod.DeletionTimestamp != nil {
		return evaluation{}, nil
	}
	jobPod := controlledByJob(pod)
	if !jobPod {
		if _, has, err := annotationTTL(pod); has {
			if err != nil {
				c.recorder.Event(pod, corev1.EventTypeWarning, ReasonInvalidTTL, err.Error())
				return evaluation{}, nil
			}
			v, err := podOwnVerdict(pod)
			return c.withGlobalDryRun(evaluation{live: v}), err
		}
	}
	return c.withGlobalDryRun(c.evaluatePolicies(logger, policy.PodGVK, obj, pod, jobPod)), nil
}

// evaluatePolicies applies the ready policies that target gvk to one
// object: the live ones decide together (Choose), and each dry-run one is
// reported on its own. The object's own TTL (the annotation, else the
// ownTTL field of the first live policy, by name, that declares one the
// object sets) replaces the policies' TTLs.
func (c *Controller) evaluatePolicies(logger klog.Logger, gvk schema.GroupVersionKind, obj runtime.Object, m metav1.Object, jobPod bool) evaluation {
	policies := c.policiesFor(gvk)
	if len(policies) == 0 {
		return evaluation{}
	}
	nsLabels := c.namespaceLabelsFunc()
	var live, dry []policy.Candidate
	for _, p := range policies {
		if !p.Matches(m, nsLabels(m.GetNamespace()), jobPod) {
			continue
		}
		st := p.Rule.Read(obj)
		if st.Finished && st.Err != nil {
			logger.V(2).Info("Cannot read finish time", "policy", p.Name, "object", klog.KObj(m), "err", st.Err)
			c.recorder.Eventf(obj, corev1.EventTypeWarning, ReasonFinishTimeUnreadable, "TTLPolicy %s: %v", p.Name, st.Err)
			continue
		}
		if !st.Finished {
			continue
		}
		cand := policy.Candidate{Policy: p, State: st}
		if p.DryRun {
			dry = append(dry, cand)
		} else {
			live = append(live, cand)
		}
	}
	if len(live) == 0 && len(dry) == 0 {
		return evaluation{}
	}
	own := c.ownTTL(obj, m, live)
	var ev evaluation
	for i := range live {
		live[i].Own = own
	}
	ev.live = policy.Choose(live)
	for i := range dry {
		dry[i].Own = own
		if dry[i].HasTTL() {
			ev.reports = append(ev.reports, policy.VerdictFor(&dry[i]))
		}
	}
	return ev
}

// ownTTL is an object's own TTL: its annotation, else the ownTTL field of
// the first live candidate policy that declares one the object sets. An
// unreadable value is reported with an event and ignored.
func (c *Controller) ownTTL(obj runtime.Object, m metav1.Object, live []policy.Candidate) *int32 {
	if ttl, has, err := annotationTTL(m); err != nil {
		c.recorder.Event(obj, corev1.EventTypeWarning, ReasonInvalidTTL, err.Error())
	} else if has {
		return &ttl
	}
	for _, cand := range live {
		ttl, has, err := cand.Policy.OwnTTL(obj)
		if err != nil {
			c.recorder.Eventf(obj, corev1.EventTypeWarning, ReasonInvalidTTL, "TTLPolicy %s: %v", cand.Policy.Name, err)
			continue
		}
		if has {
			return &ttl
		}
	}
	return nil
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

// withGlobalDryRun applies Options.DryRun to an evaluation.
func (c *Controller) withGlobalDryRun(ev evaluation) evaluation {
	if ev.live != nil && c.globalDryRun {
		ev.live.DryRun = true
	}
	return ev
}

// accessor returns obj's metadata; every object the controller handles has it.
func accessor(obj runtime.Object) metav1.Object {
	m, err := meta.Accessor(obj)
	if err != nil {
		panic(fmt.Sprintf("object %T without metadata: %v", obj, err))
	}
	return m
}
