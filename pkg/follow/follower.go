package follow

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Sink receives what Follow sees. State is called from one goroutine, in
// order; Log is called from the log streams' goroutines, concurrently with
// State and with itself.
type Sink interface {
	// State is called with the first State once the caches are synced,
	// then with each new one (at most one per Options.MinInterval), and
	// last with the finished State.
	State(State)
	// Log is called with each log line, with Options.Logs.
	Log(Line)
}

// Options tell Follow what to follow and how. The zero value of each
// optional field means its documented default.
type Options struct {
	// Namespace and Name name the Job.
	Namespace, Name string
	// UID, if set, is the Job to follow: a Job of the same name with
	// another UID counts as the followed one deleted (`run` sets it to the
	// Job it created).
	UID types.UID
	// Logs streams the logs of the Job's containers to Sink.Log.
	Logs bool
	// MaxLogStreams caps the log streams open at once; pods beyond it wait
	// for a free one. Default 32.
	MaxLogStreams int
	// LogDrainTimeout bounds how long Follow waits, once the Job finished,
	// for the rest of its pods' logs. Default 10s.
	LogDrainTimeout time.Duration
	// LogRetry is the pause before a cut log stream is reopened. Default 1s.
	LogRetry time.Duration
	// MinInterval is the shortest time between two States, so that a Job
	// with thousands of pods does not rebuild its state at every pod
	// event. Default 100ms; negative: no minimum (tests).
	MinInterval time.Duration
	// Clock is the clock for elapsed times and pauses. Default: the real one.
	Clock clock.Clock
}

// withDefaults fills the optional fields.
func (o Options) withDefaults() Options {
	if o.MaxLogStreams <= 0 {
		o.MaxLogStreams = 32
	}
	if o.LogDrainTimeout <= 0 {
		o.LogDrainTimeout = 10 * time.Second
	}
	if o.LogRetry <= 0 {
		o.LogRetry = time.Second
	}
	if o.MinInterval == 0 {
		o.MinInterval = 100 * time.Millisecond
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return o
}

// ErrNotFound is returned (wrapped) by Follow when the Job does not exist.
var ErrNotFound = fmt.Errorf("not found")

// Follow watches the Job until it is Complete, Failed or deleted, handing
// each new State to sink, and returns the last one. When ctx ends first it
// returns the last State and ctx's error.
//
// Steps:
//  1. GET the Job: a missing Job is an error wrapping ErrNotFound.
//  2. Start three informers in the Job's namespace: the Job (field selector
//     on its name), its pods (the Job's label selector) and Warning events
//     (field selector type=Warning). The pods and events of other objects
//     are ignored by Build.
//  3. After the caches sync, build a State at every change (coalesced, at
//     most one per MinInterval) and hand it to sink; with Logs, open a log
//     stream for each container that started.
//  4. Once the State is finished, if the Job failed or with Logs: list the
//     pods once more from the API (a pod's last update may not have reached
//     the informer yet) and build the last State from them, which names the
//     failed pods of a Failed Job (State.FailedPods); with Logs, stream the
//     logs not streamed yet, and wait for the streams to end, at most
//     LogDrainTimeout. A failed LIST leaves the cached pods in its place.
func Follow(ctx context.Context, client kubernetes.Interface, opts Options, sink Sink) (State, error) {
	opts = opts.withDefaults()
	ns, name := opts.Namespace, opts.Name
	job, err := client.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return State{}, fmt.Errorf("job %s/%s: %w", ns, name, ErrNotFound)
	}
	if err != nil {
		return State{}, fmt.Errorf("getting job %s/%s: %w", ns, name, err)
	}
	if opts.UID != "" && job.UID != opts.UID {
		// The Job was replaced before we could see it.
		job.UID = opts.UID
		st := Build(Input{Job: job, Deleted: true}, opts.Clock.Now())
		sink.State(st)
		return st, nil
	}
	selector := labels.SelectorFromSet(labels.Set{batchv1.JobNameLabel: name})
	if job.Spec.Selector != nil {
		if selector, err = metav1.LabelSelectorAsSelector(job.Spec.Selector); err != nil {
			return State{}, fmt.Errorf("selector of job %s/%s: %w", ns, name, err)
		}
	}

	f := &follower{opts: opts, client: client, uid: job.UID, job: job, changed: make(chan struct{}, 1)}
	informerCtx, stopInformers := context.WithCancel(ctx)
	defer stopInformers()
	factories := []informers.SharedInformerFactory{
		f.factory(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}),
		f.factory(func(o *metav1.ListOptions) { o.LabelSelector = selector.String() }),
		f.factory(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("type", corev1.EventTypeWarning).String()
		}),
	}
	defer func() {
		stopInformers()
		for _, fac := range factories {
			fac.Shutdown()
		}
	}()
	f.jobs = factories[0].Batch().V1().Jobs().Informer()
	f.pods = factories[1].Core().V1().Pods().Informer()
	f.events = factories[2].Core().V1().Events().Informer()
	for _, inf := range []cache.SharedIndexInformer{f.jobs, f.pods, f.events} {
		if err := inf.SetTransform(stripManagedFields); err != nil {
			return State{}, err
		}
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { f.poke() },
			UpdateFunc: func(any, any) { f.poke() },
			DeleteFunc: func(any) { f.poke() },
		}); err != nil {
			return State{}, err
		}
	}
	for _, fac := range factories {
		fac.StartWithContext(informerCtx)
	}
	for _, fac := range factories {
		for typ, ok := range fac.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return State{}, fmt.Errorf("watching %v of job %s/%s: %w", typ, ns, name, context.Cause(ctx))
			}
		}
	}

	var logs *logStreamer
	if opts.Logs {
		logs = newLogStreamer(ctx, client, opts, sink)
		defer logs.stop()
	}
	var st State
	for {
		pods := f.cachedPods()
		st = f.build(pods)
		if st.Finished() && (st.Outcome == Failed || logs != nil) {
			// The one LIST of the Job's pods (see step 4).
			if listed, err := f.listPods(ctx, selector); err == nil {
				pods = listed
				st = f.build(pods)
			} else {
				klog.FromContext(ctx).V(2).Info("Listing the pods of the finished Job, using the cached ones", "job", klog.KRef(ns, name), "err", err)
			}
		}
		sink.State(st)
		if logs != nil {
			logs.observe(podsOf(f.job, pods))
		}
		if st.Finished() {
			break
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-f.changed:
		}
		if opts.MinInterval > 0 {
			select {
			case <-ctx.Done():
				return st, ctx.Err()
			case <-opts.Clock.After(opts.MinInterval):
			}
		}
	}
	if logs != nil {
		logs.drain(opts.LogDrainTimeout)
	}
	return st, nil
}

// follower holds what Follow gathers while it runs.
type follower struct {
	// opts are Follow's options, with defaults.
	opts Options
	// client is the clientset the informers use.
	client kubernetes.Interface
	// uid is the followed Job's UID.
	uid types.UID
	// job is the latest version of the Job seen (kept after its deletion).
	job *batchv1.Job
	// deleted is set once the Job was seen gone or replaced; it stays set.
	deleted bool
	// jobs, pods and events are the three informers.
	jobs, pods, events cache.SharedIndexInformer
	// changed has an element when an informer saw a change since the last build.
	changed chan struct{}
}

// factory returns an informer factory on the Job's namespace whose lists
// and watches are narrowed by tweak.
func (f *follower) factory(tweak func(*metav1.ListOptions)) informers.SharedInformerFactory {
	return informers.NewSharedInformerFactoryWithOptions(f.client, 0,
		informers.WithNamespace(f.opts.Namespace), informers.WithTweakListOptions(tweak))
}

// poke records that something changed, without blocking.
func (f *follower) poke() {
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

// cachedPods returns the pods in the pod informer's cache.
func (f *follower) cachedPods() []*corev1.Pod {
	var pods []*corev1.Pod
	for _, o := range f.pods.GetStore().List() {
		if p, ok := o.(*corev1.Pod); ok {
			pods = append(pods, p)
		}
	}
	return pods
}

// listPods lists the pods of the Job's selector from the API.
func (f *follower) listPods(ctx context.Context, selector labels.Selector) ([]*corev1.Pod, error) {
	list, err := f.client.CoreV1().Pods(f.opts.Namespace).List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
	if err != nil {
		return nil, err
	}
	pods := make([]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		pods[i] = &list.Items[i]
	}
	return pods, nil
}

// build reads the Job and events caches and returns the current State,
// built with pods.
func (f *follower) build(pods []*corev1.Pod) State {
	found := false
	for _, o := range f.jobs.GetStore().List() {
		if j, ok := o.(*batchv1.Job); ok && j.Name == f.opts.Name && j.UID == f.uid {
			f.job, found = j, true
		}
	}
	if !found {
		f.deleted = true
	}
	var events []*corev1.Event
	for _, o := range f.events.GetStore().List() {
		if e, ok := o.(*corev1.Event); ok {
			events = append(events, e)
		}
	}
	return Build(Input{Job: f.job, Deleted: f.deleted, Pods: pods, Events: events}, f.opts.Clock.Now())
}

// stripManagedFields drops managed fields from cached objects: follow never
// reads them, and they are a large part of a pod.
func stripManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}
