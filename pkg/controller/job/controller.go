package job

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	batchinformers "k8s.io/client-go/informers/batch/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/lru"

	"jobkeeper.dev/jobkeeper/pkg/controller/job/metrics"
)

// Names of the work queues (as upstream, for the workqueue metrics).
const (
	queueName       = "job"
	orphanQueueName = "job_orphan_pod"
)

// Rate limits of the work queues after sync errors (upstream's).
var (
	// apiBackoff is the first retry delay of a failed sync.
	apiBackoff = time.Second
	// maxAPIBackoff caps the retry delay of a failed sync.
	maxAPIBackoff = time.Minute
	// staleRetry is when a sync skipped for a stale cache is retried if no
	// event wakes the Job before.
	staleRetry = time.Second
)

// eventSource is the source component of recorded events.
const eventSource = "job-controller"

// podControllerIndex indexes pods by the UID of their controller, and pods
// without one by "orphan/<namespace>".
const podControllerIndex = "jobkeeper.dev/controller-uid"

// podFinalizerIndex is podControllerIndex restricted to the pods holding
// the tracking finalizer: the stale finalizer scan reads only those, never
// the cluster's other pods.
const podFinalizerIndex = "jobkeeper.dev/tracking-finalizer-controller-uid"

// Controller keeps the pods of managed Jobs in line with their specs and
// tracks the pods' outcomes in the Jobs' status.
type Controller struct {
	// opts are the options with defaults applied.
	opts Options
	// client writes Jobs, pods and events.
	client kubernetes.Interface
	// clock is opts.Clock.
	clock clock.WithTicker
	// pods writes pods with events.
	pods *podControl

	// jobLister reads Jobs from the informer cache.
	jobLister batchlisters.JobLister
	// podLister reads pods from the informer cache.
	podLister corelisters.PodLister
	// podIndexer finds pods by controller UID.
	podIndexer cache.Indexer
	// synced are done once the informers have synced: Run waits on them
	// without polling (client-go's WaitForCacheSync looks every 100 ms, a
	// tenth of a second added to every start-up).
	synced []cache.DoneChecker

	// queue holds the keys of Jobs to sync.
	queue workqueue.TypedRateLimitingInterface[string]
	// orphanQueue holds pods (or Job selectors) whose finalizers may need removal.
	orphanQueue workqueue.TypedRateLimitingInterface[orphanKey]

	// expectations tracks pod creations and deletions not yet observed.
	expectations *podExpectations
	// finalizers tracks finalizer removals not yet observed.
	finalizers *finalizerExpectations
	// backoff holds the re-creation backoff records of Jobs.
	backoff *backoffStore
	// batches decides how long pod events delay a Job's sync (batching.go).
	batches *syncBatches
	// writes remembers the controller's newest writes per Job, so that a
	// Job is not synced from caches that have not seen them (consistency.go);
	// nil when Options.DisableReadYourWrites.
	writes *writeTracker
	// finishedJobs holds UIDs of Jobs this controller marked finished whose
	// update the informer has not delivered yet.
	finishedJobs sync.Map
	// goneJobs holds UIDs of Jobs the apiserver confirmed gone, so the
	// orphan path reads each missing Job once, not once per pod.
	goneJobs *lru.Cache

	// broadcaster sends recorded events to the apiserver.
	broadcaster record.EventBroadcaster
	// recorder records events on Jobs.
	recorder record.EventRecorder
	// metrics are the controller's collectors.
	metrics *metrics.Metrics
	// staleFinalizers computes the stale tracking finalizer gauges while
	// the controller runs (stale_finalizers.go).
	staleFinalizers *staleFinalizerScanner

	// sources are the pod caches beside the shared informer when
	// Options.JobPodsOnly (pod_sources.go); nil otherwise.
	sources *podSources

	// gang reads Workloads and PodGroups (WorkloadWithJob, workload.go);
	// nil when Options.Workloads is.
	gang *gangState

	// syncHandler is syncJob; tests may replace it.
	syncHandler func(ctx context.Context, key string) error
}

// NewController builds a Job controller on the given informers. It only
// wires event handlers; call Run to start it.
func NewController(ctx context.Context, podInformer coreinformers.PodInformer, jobInformer batchinformers.JobInformer, client kubernetes.Interface, opts Options) (*Controller, error) {
	opts = opts.withDefaults()
	logger := klog.FromContext(ctx)
	m, err := metrics.New(opts.Registerer)
	if err != nil {
		return nil, fmt.Errorf("registering job controller metrics: %w", err)
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: eventSource})
	c := &Controller{
		opts:         opts,
		client:       client,
		clock:        opts.Clock,
		jobLister:    jobInformer.Lister(),
		podLister:    podInformer.Lister(),
		podIndexer:   podInformer.Informer().GetIndexer(),
		synced:       []cache.DoneChecker{podInformer.Informer().HasSyncedChecker(), jobInformer.Informer().HasSyncedChecker()},
		expectations: newPodExpectations(opts.Clock),
		finalizers:   newFinalizerExpectations(),
		backoff:      newBackoffStore(),
		batches:      newSyncBatches(),
		goneJobs:     lru.New(goneJobsCacheSize),
		broadcaster:  broadcaster,
		recorder:     recorder,
		metrics:      m,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](apiBackoff, maxAPIBackoff),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: queueName, Clock: opts.Clock}),
		orphanQueue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[orphanKey](apiBackoff, maxAPIBackoff),
			workqueue.TypedRateLimitingQueueConfig[orphanKey]{Name: orphanQueueName, Clock: opts.Clock}),
	}
	c.syncHandler = c.syncJob
	if opts.Workloads != nil {
		gang, synced, err := newGangState(opts.Workloads)
		if err != nil {
			return nil, err
		}
		c.gang = gang
		c.synced = append(c.synced, synced...)
	}
	if opts.JobPodsOnly {
		if opts.Metadata == nil {
			return nil, fmt.Errorf("job controller: JobPodsOnly needs a metadata client (Options.Metadata)")
		}
		if c.sources, err = newPodSources(ctx, c); err != nil {
			return nil, fmt.Errorf("watching pods outside the Job label: %w", err)
		}
		// Not waited for: it only finds tracking finalizers to release,
		// and the first syncs of Jobs need nothing from it.
	}
	c.staleFinalizers = newStaleFinalizerScanner(c)
	if c.sources != nil {
		c.staleFinalizers.pods = append(c.staleFinalizers.pods, c.sources.others.GetIndexer())
	}
	if !opts.DisableReadYourWrites {
		c.writes = newWriteTracker(map[schema.GroupResource]syncedVersioner{
			podsResource: podInformer.Informer().GetStore(),
			jobsResource: jobInformer.Informer().GetStore(),
		})
		if c.sources != nil {
			c.writes.podStore = c.sources.podStore
		}
		if c.gang != nil {
			// The Workload and PodGroup a sync creates are in the caches
			// before the next sync, which would otherwise take the Job,
			// its pods created, for one that ran before the gate.
			c.writes.stores[workloadsResource] = opts.Workloads.Workloads.Informer().GetStore()
			c.writes.stores[podGroupsResource] = opts.Workloads.PodGroups.Informer().GetStore()
		}
	}
	c.pods = &podControl{client: client, contentType: opts.ContentType, recorder: recorder, onWrite: c.writes.wrotePod}

	if err := podInformer.Informer().AddIndexers(cache.Indexers{podControllerIndex: indexPodByController, podFinalizerIndex: indexFinalizerPodByController}); err != nil {
		return nil, fmt.Errorf("adding pod controller index: %w", err)
	}
	if _, err := jobInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.addJob(logger, obj) },
		UpdateFunc: func(old, cur any) { c.updateJob(logger, old, cur) },
		DeleteFunc: func(obj any) { c.deleteJob(logger, obj) },
	}); err != nil {
		return nil, fmt.Errorf("adding Job event handler: %w", err)
	}
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.addPod(logger, obj) },
		UpdateFunc: func(old, cur any) { c.updatePod(logger, old, cur) },
		DeleteFunc: func(obj any) { c.deletePod(logger, obj, true) },
	}); err != nil {
		return nil, fmt.Errorf("adding Pod event handler: %w", err)
	}
	return c, nil
}

// indexPodByController is the podControllerIndex function, for pods and
// for pods' metadata (pod_sources.go).
func indexPodByController(obj any) ([]string, error) {
	pod, ok := obj.(metav1.Object)
	if !ok {
		return nil, nil
	}
	if ref := metav1.GetControllerOfNoCopy(pod); ref != nil {
		return []string{string(ref.UID)}, nil
	}
	return []string{"orphan/" + pod.GetNamespace()}, nil
}

// indexFinalizerPodByController is the podFinalizerIndex function.
func indexFinalizerPodByController(obj any) ([]string, error) {
	if pod, ok := obj.(metav1.Object); !ok || !slices.Contains(pod.GetFinalizers(), batchv1.JobTrackingFinalizer) {
		return nil, nil
	}
	return indexPodByController(obj)
}

// Run waits for the informers to sync, then runs workers Job workers and as
// many orphan-pod workers until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	c.broadcaster.StartStructuredLogging(3)
	c.broadcaster.StartRecordingToSink(newEventSink(c.client.CoreV1().Events("")))
	defer c.broadcaster.Shutdown()

	logger := klog.FromContext(ctx)
	logger.Info("Starting job controller", "managedBy", c.opts.ManagedBy, "manageUnclaimedJobs", c.opts.ManageUnclaimedJobs)
	var wg sync.WaitGroup
	defer func() {
		logger.Info("Shutting down job controller")
		c.queue.ShutDown()
		c.orphanQueue.ShutDown()
		wg.Wait()
	}()
	if !cache.WaitFor(ctx, "caches of the job controller", c.synced...) {
		return
	}
	// The pods outside the Job label are watched once the Job pods are
	// cached, not beside them: without a watch cache the apiserver reads
	// every pod from etcd to answer either list, and at start-up the two
	// would share it while the first sync needs only the Job pods. Nothing
	// waits for this informer; it only finds finalizers to release.
	if c.sources != nil {
		wg.Go(func() { c.sources.run(ctx) })
	}
	// The gauges read the caches, so they are exported once these have
	// synced, and no longer once the controller stops.
	c.metrics.StaleFinalizers.SetSource(c.staleFinalizers)
	defer c.metrics.StaleFinalizers.ClearSource(c.staleFinalizers)
	for range workers {
		wg.Go(func() { wait.UntilWithContext(ctx, c.worker, time.Second) })
		wg.Go(func() { wait.UntilWithContext(ctx, c.orphanWorker, time.Second) })
	}
	<-ctx.Done()
}

// worker syncs Jobs until the queue shuts down.
func (c *Controller) worker(ctx context.Context) {
	for c.processNext(ctx) {
	}
}

// processNext syncs one Job key; errors requeue it rate-limited.
func (c *Controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	if err := c.syncHandler(ctx, key); err != nil {
		if errors.Is(err, errStaleCache) {
			// Not an error: the event that brings the cache up to date
			// wakes the Job. The retry is a safety net, and it leaves the
			// error backoff alone, so a lagging cache never stretches the
			// delays of real errors (up to maxAPIBackoff).
			klog.FromContext(ctx).V(4).Info("Skipped syncing job until the informers catch up", "key", key, "reason", err)
			c.queue.AddAfter(key, staleRetry)
			return true
		}
		utilruntime.HandleErrorWithContext(ctx, err, "Syncing job", "key", key)
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

// manages reports whether this controller owns the Job's status and pods.
func (c *Controller) manages(job *batchv1.Job) bool {
	mb := job.Spec.ManagedBy
	if mb != nil && *mb == c.opts.ManagedBy {
		return true
	}
	return c.opts.ManageUnclaimedJobs && (mb == nil || *mb == batchv1.JobControllerName)
}

// jobAPIVersion is the apiVersion of a Job's controller references.
var jobAPIVersion = batchv1.SchemeGroupVersion.String()

// resolveControllerRef returns the Job the reference points to, if it is in
// the cache with the same UID.
func (c *Controller) resolveControllerRef(ns string, ref *metav1.OwnerReference) *batchv1.Job {
	if ref.Kind != "Job" || ref.APIVersion != jobAPIVersion {
		return nil
	}
	job, err := c.jobLister.Jobs(ns).Get(ref.Name)
	if err != nil || job.UID != ref.UID {
		return nil
	}
	return job
}

// updateStatus writes the Job's status with optimistic concurrency and
// remembers the written resourceVersion (read-your-writes).
func (c *Controller) updateStatus(ctx context.Context, job *batchv1.Job) (*batchv1.Job, error) {
	written, err := c.client.BatchV1().Jobs(job.Namespace).UpdateStatus(ctx, job, metav1.UpdateOptions{FieldManager: FieldManager})
	if err != nil {
		if ambiguous(err) {
			// The write may have been applied without the controller
			// learning its version: the next sync first reads a fresh one.
			c.writes.needBarrier(jobKey(job), job.UID, barrier{resource: jobsResource, name: job.Name})
		}
		return nil, err
	}
	c.writes.wrote(jobKey(written), written.UID, jobsResource, written.ResourceVersion)
	return written, nil
}

// jobKey returns the queue key of a Job.
func jobKey(job *batchv1.Job) string {
	return cache.MetaObjectToName(job).String()
}
