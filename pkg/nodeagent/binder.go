package nodeagent

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// BindParallelism is how many bindings are sent at once.
var BindParallelism = 16

// bindKey is the single key of the binder's queue: every event asks for
// one more pass over the pending pods.
const bindKey = "bind"

// binder plays the scheduler for the one local node: it binds pods that
// have no node and the default scheduler name, oldest first, while the
// node has room and once their claims are bound (volumebinding.go).
type binder struct {
	// a is the agent.
	a *Agent
	// factory watches unscheduled pods.
	factory informers.SharedInformerFactory
	// lister lists unscheduled pods.
	lister corelisters.PodLister
	// synced reports the informer synced.
	synced cache.InformerSynced
	// queue serialises binding passes.
	queue workqueue.TypedRateLimitingInterface[string]
	// volumeFactory watches claims, volumes and classes.
	volumeFactory informers.SharedInformerFactory
	// claims, volumes and classes list them.
	claims  corelisters.PersistentVolumeClaimLister
	volumes corelisters.PersistentVolumeLister
	classes storagelisters.StorageClassLister

	// mu guards assumed and unschedulable. Held with the agent's mu, it
	// is taken first.
	mu sync.Mutex
	// assumed are pods bound but not yet seen on the node.
	assumed map[types.UID]assumedPod
	// unschedulable holds, per pod marked PodScheduled=False, the message
	// it was marked with.
	unschedulable map[types.UID]string
}

// newBinder builds the binder and its informer.
func newBinder(a *Agent) (*binder, error) {
	b := &binder{
		a: a,
		factory: informers.NewSharedInformerFactoryWithOptions(a.client, 0, informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.AndSelectors(
				fields.OneTermEqualSelector("spec.nodeName", ""),
				fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
				fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)),
			).String()
		})),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodeagent_binder"}),
		assumed:       map[types.UID]assumedPod{},
		unschedulable: map[types.UID]string{},
		volumeFactory: informers.NewSharedInformerFactoryWithOptions(a.client, 0, informers.WithTransform(stripManagedFields)),
	}
	inf := b.factory.Core().V1().Pods()
	if err := inf.Informer().SetTransform(stripManagedFields); err != nil {
		return nil, err
	}
	b.lister = inf.Lister()
	claims := b.volumeFactory.Core().V1().PersistentVolumeClaims()
	volumes := b.volumeFactory.Core().V1().PersistentVolumes()
	classes := b.volumeFactory.Storage().V1().StorageClasses()
	b.claims, b.volumes, b.classes = claims.Lister(), volumes.Lister(), classes.Lister()
	synced := []cache.InformerSynced{inf.Informer().HasSynced}
	// A pod waiting for its claims is looked at again when they change.
	for _, i := range []cache.SharedIndexInformer{claims.Informer(), volumes.Informer(), classes.Informer()} {
		if _, err := i.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { b.enqueue() },
			UpdateFunc: func(any, any) { b.enqueue() },
			DeleteFunc: func(any) { b.enqueue() },
		}); err != nil {
			return nil, err
		}
		synced = append(synced, i.HasSynced)
	}
	b.synced = func() bool {
		for _, s := range synced {
			if !s() {
				return false
			}
		}
		return true
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { b.enqueue() },
		UpdateFunc: func(any, any) { b.enqueue() },
		DeleteFunc: func(obj any) {
			if pod, ok := obj.(*corev1.Pod); ok {
				b.mu.Lock()
				delete(b.unschedulable, pod.UID)
				b.mu.Unlock()
			}
		},
	}); err != nil {
		return nil, err
	}
	return b, nil
}

// start starts the informers.
func (b *binder) start(ctx context.Context) {
	b.factory.Start(ctx.Done())
	b.volumeFactory.Start(ctx.Done())
}

// enqueue asks for a binding pass.
func (b *binder) enqueue() { b.queue.Add(bindKey) }

// run binds until ctx is done.
func (b *binder) run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		b.queue.ShutDown()
	}()
	b.enqueue()
	for {
		key, quit := b.queue.Get()
		if quit {
			b.factory.Shutdown()
			b.volumeFactory.Shutdown()
			return
		}
		if err := b.sync(ctx); err != nil {
			klog.FromContext(ctx).V(2).Info("Binding pass failed, retrying", "err", err)
			b.queue.AddRateLimited(key)
		} else {
			b.queue.Forget(key)
		}
		b.queue.Done(key)
	}
}

// schedulable reports whether the binder is responsible for the pod.
func schedulable(pod *corev1.Pod) bool {
	return pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil &&
		(pod.Spec.SchedulerName == "" || pod.Spec.SchedulerName == corev1.DefaultSchedulerName) &&
		pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

// sync is one binding pass.
func (b *binder) sync(ctx context.Context) error {
	pending, err := b.lister.List(everything)
	if err != nil {
		return err
	}
	pending = filterPods(pending, schedulable)
	if len(pending) == 0 {
		return nil
	}
	sort.Slice(pending, func(i, j int) bool {
		ti, tj := pending[i].CreationTimestamp, pending[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		if pending[i].Namespace != pending[j].Namespace {
			return pending[i].Namespace < pending[j].Namespace
		}
		return pending[i].Name < pending[j].Name
	})
	used, usedPods, err := b.usage()
	if err != nil {
		return err
	}
	nodeLabels := nodeLabels(b.a.opts.NodeName)
	view := b.volumeView(nodeLabels)
	var toBind []*corev1.Pod
	var volumesFailed error
	for _, pod := range pending {
		if usedPods >= b.a.opts.MaxPods {
			break
		}
		if b.alreadyBound(pod.UID) {
			// Bound, and counted in used, but this informer has not seen
			// it leave yet: binding it again would only be refused.
			continue
		}
		if msg := neverFits(pod, nodeLabels, b.a.capacity); msg != "" {
			b.markUnschedulable(ctx, pod, msg)
			continue
		}
		r := podRequests(pod)
		if !fitsNow(r, used, usedPods, b.a.opts.MaxPods, b.a.capacity) {
			continue
		}
		d, err := decideVolumes(pod, view.view)
		if err != nil {
			volumesFailed = err
			continue
		}
		if d.unschedulable != "" {
			b.markUnschedulable(ctx, pod, d.unschedulable)
			continue
		}
		if !d.ready() {
			if err := b.bindVolumes(ctx, pod, d); err != nil {
				volumesFailed = err
			}
			continue
		}
		used, usedPods = used.add(r), usedPods+1
		view.add(pod)
		toBind = append(toBind, pod)
	}
	var failed bool
	var mu sync.Mutex
	workqueue.ParallelizeUntil(ctx, BindParallelism, len(toBind), func(i int) {
		if err := b.bind(ctx, toBind[i]); err != nil {
			klog.FromContext(ctx).V(2).Info("Binding failed", "pod", klog.KObj(toBind[i]), "err", err)
			mu.Lock()
			failed = true
			mu.Unlock()
		}
	})
	if failed {
		return fmt.Errorf("some bindings failed")
	}
	return volumesFailed
}

// AssumeTimeout is how long a bound pod counts against the node before
// its worker exists; after that the binder stops counting it (the pod was
// deleted before the agent saw it).
var AssumeTimeout = 30 * time.Second

// assumedPod is a pod bound by the binder and not yet seen by the agent.
type assumedPod struct {
	// requests is what the pod asks.
	requests requests
	// boundAt is when it was bound.
	boundAt time.Time
	// claims are the namespace/name of its persistentVolumeClaim volumes.
	claims []string
}

// alreadyBound reports whether the pod was bound by this binder (assumed) or
// is run by the agent, which sees a pod bound before the binder's informer
// sees it leave the unscheduled pods.
func (b *binder) alreadyBound(uid types.UID) bool {
	b.mu.Lock()
	_, assumed := b.assumed[uid]
	b.mu.Unlock()
	if assumed {
		return true
	}
	b.a.mu.Lock()
	defer b.a.mu.Unlock()
	_, running := b.a.workers[uid]
	return running
}

// seen stops counting an assumed pod: its worker now does.
func (b *binder) seen(uid types.UID) {
	b.mu.Lock()
	delete(b.assumed, uid)
	b.mu.Unlock()
}

// usage sums what the running pods and those just bound use.
//
// The two are read together: the agent starts a pod's worker and then
// stops the binder assuming it (seen), so read one after the other a pod
// whose worker starts in between would be counted in neither. An assumed
// pod that has its worker already is counted once, as the worker's.
func (b *binder) usage() (requests, int, error) {
	now := b.a.clock.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.a.mu.Lock()
	defer b.a.mu.Unlock()
	used, count := b.a.activeRequests, b.a.activePods
	for uid, p := range b.assumed {
		if now.Sub(p.boundAt) > AssumeTimeout {
			delete(b.assumed, uid)
			continue
		}
		if _, running := b.a.workers[uid]; running {
			continue
		}
		used, count = used.add(p.requests), count+1
	}
	return used, count, nil
}

// bind binds one pod through the binding subresource.
func (b *binder) bind(ctx context.Context, pod *corev1.Pod) error {
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: b.a.opts.NodeName},
	}
	// Count the pod before binding: its worker may start (and stop counting
	// it here) before Bind returns.
	b.mu.Lock()
	b.assumed[pod.UID] = assumedPod{requests: podRequests(pod), boundAt: b.a.clock.Now(), claims: podClaims(pod)}
	b.mu.Unlock()
	err := b.a.client.CoreV1().Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{FieldManager: FieldManager})
	if err != nil {
		b.seen(pod.UID)
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return fmt.Errorf("binding pod %s: %w", klog.KObj(pod), err)
	}
	b.a.schedulerEvent(pod, corev1.EventTypeNormal, "Scheduled", fmt.Sprintf("Successfully assigned %s/%s to %s", pod.Namespace, pod.Name, b.a.opts.NodeName))
	return nil
}

// markUnschedulable writes PodScheduled=False for a pod that cannot go to
// the node, once per message: a pod that can never fit is marked once, and
// one waiting for a claim again when the reason changes.
func (b *binder) markUnschedulable(ctx context.Context, pod *corev1.Pod, msg string) {
	b.mu.Lock()
	done := b.unschedulable[pod.UID] == msg
	b.unschedulable[pod.UID] = msg
	b.mu.Unlock()
	if done {
		return
	}
	cond := corev1.PodCondition{
		Type:               corev1.PodScheduled,
		Status:             corev1.ConditionFalse,
		Reason:             ReasonUnschedulable,
		Message:            msg,
		LastTransitionTime: metav1.NewTime(b.a.clock.Now()),
	}
	status := pod.Status.DeepCopy()
	if i := conditionIndex(status, corev1.PodScheduled); i >= 0 {
		status.Conditions[i] = cond
	} else {
		status.Conditions = append(status.Conditions, cond)
	}
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"uid": pod.UID}, "status": map[string]any{"conditions": status.Conditions}})
	if _, err := b.a.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: FieldManager}, "status"); err != nil {
		klog.FromContext(ctx).V(2).Info("Marking pod unschedulable failed", "pod", klog.KObj(pod), "err", err)
		b.mu.Lock()
		delete(b.unschedulable, pod.UID)
		b.mu.Unlock()
		return
	}
	b.a.schedulerEvent(pod, corev1.EventTypeWarning, "FailedScheduling", msg)
}

// filterPods keeps the pods for which keep is true.
func filterPods(pods []*corev1.Pod, keep func(*corev1.Pod) bool) []*corev1.Pod {
	out := pods[:0:0]
	for _, p := range pods {
		if keep(p) {
			out = append(out, p)
		}
	}
	return out
}
