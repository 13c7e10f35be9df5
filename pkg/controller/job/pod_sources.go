package job

import (
	"context"
	"slices"
	"sync"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// With Options.JobPodsOnly the shared pod informer lists and watches only
// the pods carrying batchv1.ControllerUidLabel, which the apiserver puts
// on the pod template of every Job that does not set manualSelector: the
// other pods of a cluster (Deployments', bare pods, other workloads') are
// never decoded into the cache. What that informer cannot see is served
// here:
//
//   - the pods of Jobs with manualSelector: true, whose template need not
//     carry the label: one narrow informer per such Job's namespace and
//     selector (with the label's absence added, so it never holds a pod the
//     shared informer holds), started when the Job appears and stopped when
//     it is deleted;
//   - every other pod's metadata, trimmed to its name and version, and for
//     the pods holding the tracking finalizer to what decides whether it
//     must be released (UID, controller reference, labels, creation and
//     deletion times): a pod holding batch.kubernetes.io/job-tracking whose Job is gone
//     or finished, that has no controller, or that no longer matches its
//     Job's selector (a label removed) is released as upstream, which
//     watches every pod, releases it. That watch costs one list and one
//     watch whatever the number of pods, and a few hundred bytes per pod.

// outsideLabel is the requirement the label does not exist, added to the
// narrow informers' and the metadata informer's selectors.
var outsideLabel = func() labels.Requirement {
	r, err := labels.NewRequirement(batchv1.ControllerUidLabel, selection.DoesNotExist, nil)
	if err != nil {
		panic(err)
	}
	return *r
}()

// podsResourceGVR is the pods resource, for the metadata informer.
var podsResourceGVR = corev1.SchemeGroupVersion.WithResource("pods")

// manualPods is the narrow informer of the pods selected by Jobs with
// manualSelector in one namespace, with one selector.
type manualPods struct {
	// informer holds the selected pods without the Job label.
	informer cache.SharedIndexInformer
	// cancel stops it.
	cancel context.CancelFunc
	// jobs are the UIDs of the Jobs it serves.
	jobs map[types.UID]bool
}

// podSources are the pod caches beside the shared (Job-label) informer.
type podSources struct {
	c *Controller
	// ctx is the parent of the narrow informers' contexts.
	ctx context.Context
	// others is the trimmed metadata informer of the pods without the label.
	others cache.SharedIndexInformer

	// mu guards manual and byJob.
	mu sync.RWMutex
	// manual are the narrow informers by manualKey.
	manual map[string]*manualPods
	// byJob maps a Job key to its narrow informer's manualKey.
	byJob map[string]string
}

// newPodSources builds the metadata informer of the pods without the Job
// label and registers its handler; Run starts it.
func newPodSources(ctx context.Context, c *Controller) (*podSources, error) {
	s := &podSources{c: c, ctx: ctx, manual: map[string]*manualPods{}, byJob: map[string]string{}}
	sel := labels.NewSelector().Add(outsideLabel).String()
	s.others = metadatainformer.NewFilteredMetadataInformer(c.opts.Metadata, podsResourceGVR, metav1.NamespaceAll, 0,
		cache.Indexers{podFinalizerIndex: indexFinalizerPodByController},
		func(o *metav1.ListOptions) { o.LabelSelector = sel }).Informer()
	if err := s.others.SetTransform(trimOutsidePod); err != nil {
		return nil, err
	}
	logger := klog.FromContext(ctx)
	if _, err := s.others.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.checkOutsidePod(logger, obj) },
		UpdateFunc: func(_, obj any) { s.checkOutsidePod(logger, obj) },
	}); err != nil {
		return nil, err
	}
	return s, nil
}

// trimOutsidePod is the metadata informer's transform: it keeps what
// decides whether the pod's tracking finalizer must be released.
func trimOutsidePod(obj any) (any, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	// A pod without the finalizer is kept by name only: most of a busy
	// cluster's pods, and nothing is decided for them.
	out := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Name: m.Name, Namespace: m.Namespace, ResourceVersion: m.ResourceVersion,
	}}
	if slices.Contains(m.Finalizers, batchv1.JobTrackingFinalizer) {
		out.TypeMeta, out.UID, out.DeletionTimestamp = m.TypeMeta, m.UID, m.DeletionTimestamp
		if ref := metav1.GetControllerOfNoCopy(m); ref != nil {
			out.OwnerReferences = []metav1.OwnerReference{*ref}
		}
		out.Finalizers = []string{batchv1.JobTrackingFinalizer}
		out.Labels = m.Labels
		// The stale finalizer gauge dates a pod of a finished Job from its
		// creation when it is younger than the Job's finish.
		out.CreationTimestamp = m.CreationTimestamp
	}
	return out, nil
}

// run runs the metadata informer until ctx is done.
func (s *podSources) run(ctx context.Context) { s.others.RunWithContext(ctx) }

// checkOutsidePod queues the release of the tracking finalizer of a pod
// without the Job label when no managed, unfinished Job counts it: no
// controller, a Job that is gone or finished, or a Job whose selector it
// no longer matches. The orphan worker reads the pod from the apiserver
// and decides again before it writes.
func (s *podSources) checkOutsidePod(logger klog.Logger, obj any) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok || !slices.Contains(m.Finalizers, batchv1.JobTrackingFinalizer) {
		return
	}
	if ref := metav1.GetControllerOfNoCopy(m); ref != nil {
		if ref.Kind != "Job" || ref.APIVersion != batchGroupVersion {
			return
		}
		job := s.c.resolveControllerRef(m.Namespace, ref)
		if job != nil && !s.c.manages(job) {
			return
		}
		if job != nil && !isFinished(job) {
			if sel, ok := selectorOf(job); ok && sel.Matches(labels.Set(m.Labels)) {
				// Its Job counts it, through the Job's narrow informer.
				return
			}
		}
	}
	logger.V(4).Info("Pod outside the Job label holds the tracking finalizer", "pod", klog.KObj(m))
	s.c.orphanQueue.Add(orphanKey{namespace: m.Namespace, name: m.Name, live: true})
}

// outsidePodsOf returns the names of the pods without the Job label that
// the Job with uid controls and that hold the tracking finalizer.
func (s *podSources) outsidePodsOf(ns string, uid types.UID) []*metav1.PartialObjectMetadata {
	objs, err := s.others.GetIndexer().ByIndex(podFinalizerIndex, string(uid))
	if err != nil {
		return nil
	}
	var out []*metav1.PartialObjectMetadata
	for _, o := range objs {
		if m, ok := o.(*metav1.PartialObjectMetadata); ok && m.Namespace == ns && slices.Contains(m.Finalizers, batchv1.JobTrackingFinalizer) {
			out = append(out, m)
		}
	}
	return out
}

// isManualSelector reports whether the Job's pods need not carry the Job
// label: manualSelector set, so the apiserver did not add the label to its
// template and selector.
func isManualSelector(job *batchv1.Job) bool {
	return job.Spec.ManualSelector != nil && *job.Spec.ManualSelector
}

// manualKey returns the narrow informer key of a manualSelector Job: its
// namespace and its selector with the label's absence added.
func manualKey(job *batchv1.Job) (string, labels.Selector, bool) {
	sel, ok := selectorOf(job)
	if !ok {
		return "", nil, false
	}
	sel = sel.Add(outsideLabel)
	return job.Namespace + "/" + sel.String(), sel, true
}

// watchManual starts (or joins) the narrow informer of a managed Job with
// manualSelector. Nothing for other Jobs.
func (s *podSources) watchManual(job *batchv1.Job) {
	if s == nil || !isManualSelector(job) {
		return
	}
	key, sel, ok := manualKey(job)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	jk := jobKey(job)
	s.byJob[jk] = key
	if m := s.manual[key]; m != nil {
		m.jobs[job.UID] = true
		return
	}
	selector := sel.String()
	inf := coreinformers.NewFilteredPodInformer(s.c.client, job.Namespace, 0,
		cache.Indexers{podControllerIndex: indexPodByController},
		func(o *metav1.ListOptions) { o.LabelSelector = selector })
	if s.c.opts.PodTransform != nil {
		_ = inf.SetTransform(s.c.opts.PodTransform)
	}
	logger := klog.FromContext(s.ctx)
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.c.addPod(logger, obj) },
		UpdateFunc: func(old, cur any) { s.c.updatePod(logger, old, cur) },
		DeleteFunc: func(obj any) { s.c.deletePod(logger, obj, true) },
	})
	ctx, cancel := context.WithCancel(s.ctx)
	s.manual[key] = &manualPods{informer: inf, cancel: cancel, jobs: map[types.UID]bool{job.UID: true}}
	logger.V(2).Info("Watching the pods of a Job with manualSelector", "job", klog.KObj(job), "selector", selector)
	go inf.RunWithContext(ctx)
}

// unwatchManual leaves the narrow informer of a deleted Job and stops it
// when no Job needs it any more.
func (s *podSources) unwatchManual(job *batchv1.Job) {
	if s == nil || !isManualSelector(job) {
		return
	}
	key, _, ok := manualKey(job)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byJob[jobKey(job)] == key {
		delete(s.byJob, jobKey(job))
	}
	m := s.manual[key]
	if m == nil {
		return
	}
	delete(m.jobs, job.UID)
	if len(m.jobs) == 0 {
		m.cancel()
		delete(s.manual, key)
	}
}

// manualFor returns the narrow informer of the Job key, if it has one.
func (s *podSources) manualFor(key string) *manualPods {
	if s == nil {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.manual[s.byJob[key]]
}

// cachedPod returns the pod from a narrow informer of its namespace.
func (s *podSources) cachedPod(ns, name string) (*corev1.Pod, bool) {
	if s == nil {
		return nil, false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, m := range s.manual {
		obj, ok, err := m.informer.GetStore().GetByKey(ns + "/" + name)
		if err == nil && ok {
			if p, ok := obj.(*corev1.Pod); ok && p.Namespace == ns {
				return p, true
			}
		}
	}
	return nil, false
}

// podStore returns the store whose version a write of a pod of the Job
// key must reach: the Job's narrow informer for a pod without the Job
// label, else the shared informer (nil: use the shared one).
func (s *podSources) podStore(key string) syncedVersioner {
	if m := s.manualFor(key); m != nil {
		return m.informer.GetStore()
	}
	return nil
}
