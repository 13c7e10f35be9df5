package ttlafterfinished

import (
	"context"
	"sync"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// podCache is the controller's view of Pods. Given a shared informer of
// every pod, it is that informer. Given only the Job pods' informer
// (Options.JobPods, the pods with the Job label), it adds an informer of its
// own for the other pods, as narrow as the controller's needs allow:
//
//   - while no ready policy targets Pods, only the finished pods (phase
//     Succeeded or Failed, a field selector): a Pod's own TTL annotation
//     matters only once it finished, and the pods of a busy cluster's other
//     workloads, running, are never cached;
//   - while a ready policy targets Pods, every pod without the Job label,
//     since a policy's status counts the pods it selects, finished or not.
//
// Switching starts the new informer and stops the old one; the new one's
// initial list enqueues what it holds, as a new custom resource target's
// does.
type podCache struct {
	// shared is the shared informer's lister: every pod, or the Job pods.
	shared corelisters.PodLister
	// client, transform and handler build the informer of the other pods;
	// client is nil when shared holds every pod.
	client    kubernetes.Interface
	transform cache.TransformFunc
	handler   cache.ResourceEventHandler

	// mu guards the fields below.
	mu sync.RWMutex
	// ctx is the parent of the informers' contexts, set by run.
	ctx context.Context
	// others is the informer of the pods without the Job label.
	others cache.SharedIndexInformer
	// all says others holds every such pod (not only finished ones).
	all bool
	// cancel stops others.
	cancel context.CancelFunc
}

// finishedPods is the field selector of the finished pods.
const finishedPods = "status.phase!=" + string(corev1.PodPending) + ",status.phase!=" + string(corev1.PodRunning) + ",status.phase!=" + string(corev1.PodUnknown)

// withoutJobLabel is the label selector of the pods the Job pods' informer
// does not hold.
var withoutJobLabel = func() string {
	r, err := labels.NewRequirement(batchv1.ControllerUidLabel, selection.DoesNotExist, nil)
	if err != nil {
		panic(err)
	}
	return labels.NewSelector().Add(*r).String()
}()

// othersListOptions selects the pods without the Job label, finished ones
// only unless all.
func othersListOptions(all bool) func(*metav1.ListOptions) {
	return func(o *metav1.ListOptions) {
		o.LabelSelector = withoutJobLabel
		if !all {
			o.FieldSelector = finishedPods
		}
	}
}

// newOthers builds (does not start) the informer of the pods without the
// Job label: finished ones only unless all.
func (p *podCache) newOthers(all bool) cache.SharedIndexInformer {
	inf := coreinformers.NewFilteredPodInformer(p.client, metav1.NamespaceAll, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}, othersListOptions(all))
	if p.transform != nil {
		_ = inf.SetTransform(p.transform)
	}
	_, _ = inf.AddEventHandler(p.handler)
	return inf
}

// run starts the informer of the other pods, if the controller keeps one,
// and returns its HasSynced (nil when it keeps none).
func (p *podCache) run(ctx context.Context) cache.InformerSynced {
	if p.client == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ctx = ctx
	p.others = p.newOthers(false)
	ictx, cancel := context.WithCancel(ctx)
	p.cancel = cancel
	go p.others.RunWithContext(ictx)
	return p.others.HasSynced
}

// reconcile makes the informer of the other pods hold every such pod when
// all, only the finished ones otherwise. It reports whether it started a
// new informer (whose initial list enqueues its pods).
func (p *podCache) reconcile(all bool) bool {
	if p.client == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx == nil || p.all == all {
		return false
	}
	klog.FromContext(p.ctx).V(2).Info("Changing the pods the TTL controller watches outside the Job pods", "every", all)
	p.cancel()
	p.others = p.newOthers(all)
	p.all = all
	ictx, cancel := context.WithCancel(p.ctx)
	p.cancel = cancel
	go p.others.RunWithContext(ictx)
	return true
}

// get returns a cached pod (a NotFound error if none).
func (p *podCache) get(ns, name string) (*corev1.Pod, error) {
	pod, err := p.shared.Pods(ns).Get(name)
	if err == nil || p.client == nil {
		return pod, err
	}
	p.mu.RLock()
	others := p.others
	p.mu.RUnlock()
	if others == nil {
		return nil, err
	}
	obj, ok, gerr := others.GetStore().GetByKey(ns + "/" + name)
	if gerr != nil || !ok {
		return nil, err
	}
	return obj.(*corev1.Pod), nil
}

// list returns the cached pods of namespace ns (every namespace when ns is
// empty).
func (p *podCache) list(ns string) []*corev1.Pod {
	var out []*corev1.Pod
	if ns == "" {
		out, _ = p.shared.List(labels.Everything())
	} else {
		out, _ = p.shared.Pods(ns).List(labels.Everything())
	}
	if p.client == nil {
		return out
	}
	p.mu.RLock()
	others := p.others
	p.mu.RUnlock()
	if others == nil {
		return out
	}
	var objs []any
	if ns == "" {
		objs = others.GetStore().List()
	} else {
		objs, _ = others.GetIndexer().ByIndex(cache.NamespaceIndex, ns)
	}
	for _, o := range objs {
		out = append(out, o.(*corev1.Pod))
	}
	return out
}
