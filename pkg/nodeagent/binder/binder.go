package binder

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// BindParallelism is how many bindings are sent at once.
var BindParallelism = 16

// bindKey is the single key of the binder's queue: every event asks for
// one more pass over the pending pods.
const bindKey = "bind"

// Binder plays the scheduler for the one local node: it binds pods that
// have no node and the default scheduler name, oldest first, while the
// node has room and once their claims are bound (volumebinding.go).
type Binder struct {
	// cfg is what the binder needs from the agent.
	cfg Config
	// factory watches unscheduled pods.
	factory informers.SharedInformerFactory
	// lister lists unscheduled pods.
	lister corelisters.PodLister
	// Synced reports the informer synced.
	Synced cache.InformerSynced
	// queue serialises binding passes.
	queue workqueue.TypedRateLimitingInterface[string]
	// volumeFactory watches claims, volumes and classes.
	volumeFactory informers.SharedInformerFactory
	// claims, volumes and classes list them.
	claims  corelisters.PersistentVolumeClaimLister
	volumes corelisters.PersistentVolumeLister
	classes storagelisters.StorageClassLister
	// nodeFactory watches the node, and nodes lists it.
	nodeFactory informers.SharedInformerFactory
	nodes       corelisters.NodeLister

	// mu guards assumed and unschedulable. Held with the agent's mu, it
	// is taken first.
	mu sync.Mutex
	// assumed are pods bound but not yet seen on the node.
	assumed map[types.UID]assumedPod
	// unschedulable holds, per pod marked PodScheduled=False, the message
	// it was marked with.
	unschedulable map[types.UID]string

	// gang is the view of PodGroups (gang.go); nil without
	// Config.GangScheduling.
	gang *gangState
}

// everything selects all objects.
var everything = labels.Everything()

// Config is what the binder needs from the agent.
type Config struct {
	// Client binds pods and writes their PodScheduled condition.
	Client kubernetes.Interface
	// NodeName is the node pods are bound to.
	NodeName string
	// MaxPods is the node's pod capacity.
	MaxPods int
	// Capacity is the node's allocatable CPU and memory.
	Capacity corev1.ResourceList
	// Clock times assumed pods and conditions.
	Clock clock.PassiveClock
	// Pods lists the pods bound to the node (the agent's informer).
	Pods corelisters.PodLister
	// FieldManager is the field manager of every write.
	FieldManager string
	// Transform is applied to the objects the binder's informers cache.
	Transform cache.TransformFunc
	// Event records a scheduler event on a pod.
	Event func(pod *corev1.Pod, eventType, reason, message string)
	// GangScheduling turns on gang scheduling (the gate of that name,
	// alpha in v1.36, gang.go): pods naming a PodGroup are bound as the
	// scheduler's GangScheduling plugin would let them.
	GangScheduling bool
	// Workers calls f, under the lock of the agent's pod workers, with
	// what the pods that have a worker and have not finished request, how
	// many they are, and whether a pod has a worker.
	Workers func(f func(active Requests, pods int, hasWorker func(types.UID) bool))
}

// New builds the binder and its informer.
func New(cfg Config) (*Binder, error) {
	b := &Binder{
		cfg: cfg,
		factory: informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
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
		volumeFactory: informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, informers.WithTransform(cfg.Transform)),
	}
	inf := b.factory.Core().V1().Pods()
	if err := inf.Informer().SetTransform(cfg.Transform); err != nil {
		return nil, err
	}
	b.lister = inf.Lister()
	// The node itself, for its labels as users set them (kubectl label
	// node): a pod whose nodeSelector or affinity a new label satisfies
	// is looked at again.
	b.nodeFactory = informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
		lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", cfg.NodeName).String()
	}))
	nodes := b.nodeFactory.Core().V1().Nodes()
	b.nodes = nodes.Lister()
	if _, err := nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { b.Enqueue() },
		UpdateFunc: func(old, cur any) {
			if o, ok := old.(*corev1.Node); ok {
				if c, ok := cur.(*corev1.Node); ok && !maps.Equal(o.Labels, c.Labels) {
					b.Enqueue()
				}
			}
		},
	}); err != nil {
		return nil, err
	}
	claims := b.volumeFactory.Core().V1().PersistentVolumeClaims()
	volumes := b.volumeFactory.Core().V1().PersistentVolumes()
	classes := b.volumeFactory.Storage().V1().StorageClasses()
	b.claims, b.volumes, b.classes = claims.Lister(), volumes.Lister(), classes.Lister()
	synced := []cache.InformerSynced{inf.Informer().HasSynced, nodes.Informer().HasSynced}
	// A pod waiting for its claims is looked at again when they change.
	for _, i := range []cache.SharedIndexInformer{claims.Informer(), volumes.Informer(), classes.Informer()} {
		if _, err := i.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { b.Enqueue() },
			UpdateFunc: func(any, any) { b.Enqueue() },
			DeleteFunc: func(any) { b.Enqueue() },
		}); err != nil {
			return nil, err
		}
		synced = append(synced, i.HasSynced)
	}
	if cfg.GangScheduling {
		pgs := b.volumeFactory.Scheduling().V1alpha2().PodGroups()
		b.gang = &gangState{podGroups: pgs.Lister(), waitingSince: map[groupKey]time.Time{}}
		// A gang waiting for its PodGroup is looked at again when it comes.
		if _, err := pgs.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(any) { b.Enqueue() },
		}); err != nil {
			return nil, err
		}
		synced = append(synced, pgs.Informer().HasSynced)
	}
	b.Synced = func() bool {
		for _, s := range synced {
			if !s() {
				return false
			}
		}
		return true
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { b.Enqueue() },
		UpdateFunc: func(any, any) { b.Enqueue() },
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

// Start starts the informers.
func (b *Binder) Start(ctx context.Context) {
	b.factory.Start(ctx.Done())
	b.volumeFactory.Start(ctx.Done())
	b.nodeFactory.Start(ctx.Done())
}

// Enqueue asks for a binding pass.
func (b *Binder) Enqueue() { b.queue.Add(bindKey) }

// Run binds until ctx is done.
func (b *Binder) Run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		b.queue.ShutDown()
	}()
	b.Enqueue()
	for {
		key, quit := b.queue.Get()
		if quit {
			b.factory.Shutdown()
			b.volumeFactory.Shutdown()
			b.nodeFactory.Shutdown()
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
func (b *Binder) sync(ctx context.Context) error {
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
	inGang := func(*corev1.Pod) *gang { return nil }
	if b.gang != nil {
		bound, err := b.cfg.Pods.List(everything)
		if err != nil {
			return err
		}
		plain, gangs, err := b.gang.groupPods(pending, bound)
		if err != nil {
			return err
		}
		b.mu.Lock()
		b.gang.forgetGone(gangs)
		b.mu.Unlock()
		isPlain := make(map[types.UID]bool, len(plain))
		for _, p := range plain {
			isPlain[p.UID] = true
		}
		inGang = func(pod *corev1.Pod) *gang {
			if isPlain[pod.UID] {
				return nil
			}
			key, _ := groupOf(pod)
			if g := gangs[key]; g != nil {
				return g
			}
			// Its PodGroup does not exist yet: not tried.
			return &gang{handled: true}
		}
	}
	var cached *corev1.Node
	if n, err := b.nodes.Get(b.cfg.NodeName); err == nil {
		cached = n
	}
	node := nodeOf(b.cfg.NodeName, cached)
	view := b.volumeView(node.Labels)
	// The host ports held: by the pods bound to the node, then by those
	// this pass places.
	var held []hostPort
	if bound, err := b.cfg.Pods.List(everything); err == nil {
		held = heldPorts(bound)
	}
	var toBind []*corev1.Pod
	var volumesFailed error
	// fits decides one pod against what the pass placed so far: whether
	// it fits, with its requests, and the claims that must be bound first
	// (nil: none; the pod is bound only in a later pass, once they are).
	fits := func(pod *corev1.Pod, used Requests, usedPods int) fit {
		if usedPods >= b.cfg.MaxPods || b.alreadyBound(pod.UID) {
			// Bound, and counted in used, but this informer has not seen
			// it leave yet: binding it again would only be refused.
			return fit{}
		}
		if msg := neverFits(pod, node, b.cfg.Capacity); msg != "" {
			b.markUnschedulable(ctx, pod, msg)
			return fit{}
		}
		r := PodRequests(pod)
		if !fitsNow(r, used, usedPods, b.cfg.MaxPods, b.cfg.Capacity) {
			return fit{requests: r}
		}
		if !portsFree(pod, held) {
			// It waits, as the scheduler leaves it, until the port is
			// free.
			b.markUnschedulable(ctx, pod, hostPortsTaken)
			return fit{requests: r}
		}
		d, err := decideVolumes(pod, view.view)
		if err != nil {
			volumesFailed = err
			return fit{requests: r}
		}
		if d.unschedulable != "" {
			b.markUnschedulable(ctx, pod, d.unschedulable)
			return fit{requests: r}
		}
		if !d.ready() {
			return fit{ok: true, requests: r, claims: &d}
		}
		return fit{ok: true, requests: r}
	}
	bindClaims := func(pod *corev1.Pod, d *volumeDecision) {
		if err := b.bindVolumes(ctx, pod, *d); err != nil {
			volumesFailed = err
		}
	}
	for _, pod := range pending {
		if usedPods >= b.cfg.MaxPods {
			break
		}
		if g := inGang(pod); g != nil {
			if !g.handled {
				g.handled = true
				used, usedPods, toBind = b.placeGang(ctx, pod, g, fits, bindClaims, view, used, usedPods, toBind)
			}
			continue
		}
		f := fits(pod, used, usedPods)
		if !f.ok {
			continue
		}
		if f.claims != nil {
			bindClaims(pod, f.claims)
			continue
		}
		used, usedPods = used.Add(f.requests), usedPods+1
		view.add(pod)
		held = append(held, hostPortsOf(pod)...)
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

// fit is what a binding pass decides of one pod.
type fit struct {
	// ok: the pod fits beside what the pass placed so far.
	ok bool
	// requests is what it asks of the node.
	requests Requests
	// claims, when set, are claims to bind before the pod (it is bound in
	// a later pass, once they are).
	claims *volumeDecision
}

// AssumeTimeout is how long a bound pod counts against the node before
// its worker exists; after that the binder stops counting it (the pod was
// deleted before the agent saw it).
var AssumeTimeout = 30 * time.Second

// assumedPod is a pod bound by the binder and not yet seen by the agent.
type assumedPod struct {
	// requests is what the pod asks.
	requests Requests
	// boundAt is when it was bound.
	boundAt time.Time
	// claims are the namespace/name of its persistentVolumeClaim volumes.
	claims []string
}

// alreadyBound reports whether the pod was bound by this binder (assumed) or
// is run by the agent, which sees a pod bound before the binder's informer
// sees it leave the unscheduled pods.
func (b *Binder) alreadyBound(uid types.UID) bool {
	b.mu.Lock()
	_, assumed := b.assumed[uid]
	b.mu.Unlock()
	if assumed {
		return true
	}
	running := false
	b.cfg.Workers(func(_ Requests, _ int, has func(types.UID) bool) { running = has(uid) })
	return running
}

// Seen stops counting an assumed pod: its worker now does.
func (b *Binder) Seen(uid types.UID) {
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
func (b *Binder) usage() (Requests, int, error) {
	now := b.cfg.Clock.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	var used Requests
	var count int
	b.cfg.Workers(func(active Requests, pods int, has func(types.UID) bool) {
		used, count = active, pods
		for uid, p := range b.assumed {
			if now.Sub(p.boundAt) > AssumeTimeout {
				delete(b.assumed, uid)
				continue
			}
			if has(uid) {
				continue
			}
			used, count = used.Add(p.requests), count+1
		}
	})
	return used, count, nil
}

// bind binds one pod through the binding subresource.
func (b *Binder) bind(ctx context.Context, pod *corev1.Pod) error {
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: b.cfg.NodeName},
	}
	// Count the pod before binding: its worker may start (and stop counting
	// it here) before Bind returns.
	b.mu.Lock()
	b.assumed[pod.UID] = assumedPod{requests: PodRequests(pod), boundAt: b.cfg.Clock.Now(), claims: podClaims(pod)}
	b.mu.Unlock()
	err := b.cfg.Client.CoreV1().Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{FieldManager: b.cfg.FieldManager})
	if err != nil {
		b.Seen(pod.UID)
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return fmt.Errorf("binding pod %s: %w", klog.KObj(pod), err)
	}
	b.cfg.Event(pod, corev1.EventTypeNormal, "Scheduled", fmt.Sprintf("Successfully assigned %s/%s to %s", pod.Namespace, pod.Name, b.cfg.NodeName))
	return nil
}

// markUnschedulable writes PodScheduled=False for a pod that cannot go to
// the node, once per message: a pod that can never fit is marked once, and
// one waiting for a claim again when the reason changes.
func (b *Binder) markUnschedulable(ctx context.Context, pod *corev1.Pod, msg string) {
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
		LastTransitionTime: metav1.NewTime(b.cfg.Clock.Now()),
	}
	status := pod.Status.DeepCopy()
	if i := slices.IndexFunc(status.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodScheduled }); i >= 0 {
		status.Conditions[i] = cond
	} else {
		status.Conditions = append(status.Conditions, cond)
	}
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"uid": pod.UID}, "status": map[string]any{"conditions": status.Conditions}})
	if _, err := b.cfg.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: b.cfg.FieldManager}, "status"); err != nil {
		klog.FromContext(ctx).V(2).Info("Marking pod unschedulable failed", "pod", klog.KObj(pod), "err", err)
		b.mu.Lock()
		delete(b.unschedulable, pod.UID)
		b.mu.Unlock()
		return
	}
	b.cfg.Event(pod, corev1.EventTypeWarning, "FailedScheduling", msg)
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
