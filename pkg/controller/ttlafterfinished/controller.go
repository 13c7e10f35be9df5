package ttlafterfinished

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"jobkeeper.dev/jobkeeper/pkg/apis/jobkeeper/v1alpha1"
	"jobkeeper.dev/jobkeeper/pkg/controller/ttlafterfinished/policy"
)

// jobResource is the resource of Jobs.
var jobResource = batchv1.SchemeGroupVersion.WithResource("jobs")

// DefaultFieldManager is the field manager of the controller's writes.
const DefaultFieldManager = "jobkeeper-ttl-after-finished-controller"

// Tunables; variables so tests can change them.
var (
	// PolicyResyncPeriod is how often a policy's status (matched objects) is
	// refreshed.
	PolicyResyncPeriod = 30 * time.Second
	// UnreadyPolicyRetryPeriod is how often a policy that is not ready (e.g.
	// its kind is not installed yet) is compiled again.
	UnreadyPolicyRetryPeriod = 10 * time.Second
	// StatusSettleDelay is how long after a deletion its policy's status is
	// written, at the soonest: time for the informers to see the object go,
	// so that the matched count written with the deletion is right.
	StatusSettleDelay = 100 * time.Millisecond
	// StatusWriteInterval is the shortest time between two status syncs of a
	// policy that its deletions ask for: a burst of deletions costs at most
	// one status write per policy per interval (see statusPacer), and its
	// last deletion is in the status at most this long after it.
	StatusWriteInterval = time.Second
)

// Options configures the controller. Every field has a working default.
type Options struct {
	// Clock drives expiry and requeues. Default: the real clock.
	Clock clock.WithTicker
	// Registerer receives the controller's metrics. Default: a private
	// registry (metrics not served).
	Registerer prometheus.Registerer
	// Recorder records events. Default: a broadcaster writing through the
	// typed client.
	Recorder record.EventRecorder
	// RESTMapper resolves policy target kinds. Default: a cached discovery
	// mapper over the typed client.
	RESTMapper meta.RESTMapper
	// FieldManager is used on every write. Default DefaultFieldManager.
	FieldManager string
	// DryRun makes every deletion a dry-run report. Default false.
	DryRun bool
	// DeletionEvents records a TTLExpired event on every object deleted.
	// Default false: upstream records none, and each event is one more API
	// write per deletion. A policy's spec.deletionEvents turns them on for
	// its own deletions. Dry-run reports and warnings are always recorded.
	DeletionEvents bool
	// JobPods, if set, is an informer of only the pods with the Job label
	// (batch.kubernetes.io/controller-uid), used instead of the factory's
	// informer of every pod; the controller then watches the other pods
	// itself, only the finished ones unless a policy targets Pods
	// (pod_cache.go). Default: the factory's pod informer.
	JobPods coreinformers.PodInformer
	// PodTransform is the transform of the informer of the other pods
	// JobPods makes the controller keep. Default none.
	PodTransform cache.TransformFunc
}

// Clients are the API clients the controller uses.
type Clients struct {
	// Client is the typed clientset (Jobs, Pods, events, discovery).
	Client kubernetes.Interface
	// Dynamic reads TTLPolicies and custom resources.
	Dynamic dynamic.Interface
	// Events, if set, writes events instead of Client. Give it its own rate
	// limiter so that events, which are written asynchronously, never take
	// QPS budget from deletions.
	Events kubernetes.Interface
}

// objectKey identifies an object of any namespaced resource.
type objectKey struct {
	// resource is the object's resource.
	resource schema.GroupVersionResource
	// namespace and name identify the object.
	namespace, name string
}

// Controller deletes finished Jobs, Pods and custom resources once their
// time to live has expired. See the package documentation.
type Controller struct {
	// client is the typed clientset.
	client kubernetes.Interface
	// dynamic is the dynamic client.
	dynamic dynamic.Interface
	// recorder records events on handled objects.
	recorder record.EventRecorder
	// broadcaster is the event broadcaster New created, if any.
	broadcaster record.EventBroadcaster
	// events is the client the broadcaster writes through.
	events kubernetes.Interface
	// clock is the injected clock.
	clock clock.WithTicker
	// metrics are the Prometheus collectors.
	metrics *metrics
	// mapper resolves policy target kinds to resources.
	mapper meta.RESTMapper
	// schemas reads target schemas to check policy field paths.
	schemas schemaLookup
	// fieldManager is set on every write.
	fieldManager string
	// globalDryRun makes every deletion a report.
	globalDryRun bool
	// deletionEvents records an event on every deletion.
	deletionEvents bool

	// jobLister reads Jobs from the shared informer.
	jobLister batchlisters.JobLister
	// pods reads Pods from the caches (pod_cache.go).
	pods *podCache
	// nsLister reads Namespaces, for namespace selectors.
	nsLister corelisters.NamespaceLister
	// cachesSynced are the shared informers' HasSynced functions.
	cachesSynced []cache.InformerSynced
	// policyInformer watches TTLPolicies (not part of the shared factory).
	policyInformer cache.SharedIndexInformer

	// jobQueue holds Job keys (namespace/name), as upstream's queue.
	jobQueue workqueue.TypedRateLimitingInterface[string]
	// objectQueue holds Pods and custom resources.
	objectQueue workqueue.TypedRateLimitingInterface[objectKey]
	// policyQueue holds TTLPolicy names.
	policyQueue workqueue.TypedRateLimitingInterface[string]
	// historyQueue holds history-limit groups.
	historyQueue workqueue.TypedRateLimitingInterface[groupKey]
	// pending tracks scheduled deletions, for the expired-objects gauge.
	pending *pendingSet
	// pacer spaces the policy status syncs that deletions ask for.
	pacer *statusPacer

	// mu guards the fields below.
	mu sync.RWMutex
	// policies are the compiled policies by name, ready or not.
	policies map[string]*policy.Policy
	// byKind holds the ready policies per target kind, sorted by name.
	byKind map[schema.GroupVersionKind][]*policy.Policy
	// targets are the running dynamic informers per resource.
	targets map[schema.GroupVersionResource]*dynamicTarget
	// stats are deletions not yet written to policy status.
	stats map[string]*policyStats
	// reported holds, per object UID, the policies whose dry-run report it
	// already got.
	reported map[types.UID]map[string]struct{}
	// inFlight holds the UIDs of history-limit deletions not yet observed.
	inFlight map[types.UID]struct{}
}

// New creates the controller and registers its event handlers on the shared
// informers of factory (Jobs, Pods, Namespaces). The caller starts factory;
// Run starts the controller's own TTLPolicy and custom resource informers.
func New(ctx context.Context, opts Options, clients Clients, factory informers.SharedInformerFactory) (*Controller, error) {
	logger := klog.FromContext(ctx)
	c := &Controller{
		client:         clients.Client,
		dynamic:        clients.Dynamic,
		recorder:       opts.Recorder,
		clock:          opts.Clock,
		mapper:         opts.RESTMapper,
		fieldManager:   opts.FieldManager,
		globalDryRun:   opts.DryRun,
		deletionEvents: opts.DeletionEvents,
		policies:       map[string]*policy.Policy{},
		byKind:         map[schema.GroupVersionKind][]*policy.Policy{},
		targets:        map[schema.GroupVersionResource]*dynamicTarget{},
		stats:          map[string]*policyStats{},
		reported:       map[types.UID]map[string]struct{}{},
		inFlight:       map[types.UID]struct{}{},
		pending:        newPendingSet(),
	}
	if c.clock == nil {
		c.clock = clock.RealClock{}
	}
	c.pacer = newStatusPacer(c.clock)
	if c.fieldManager == "" {
		c.fieldManager = DefaultFieldManager
	}
	reg := opts.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	var err error
	if c.metrics, err = newMetrics(reg); err != nil {
		return nil, fmt.Errorf("registering metrics: %w", err)
	}
	if err := reg.Register(newPendingCollector(c.pending, c.clock)); err != nil {
		return nil, fmt.Errorf("registering metrics: %w", err)
	}
	c.schemas = c.crdSchema
	if c.mapper == nil {
		c.mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(clients.Client.Discovery()))
	}
	if c.recorder == nil {
		c.events = clients.Events
		if c.events == nil {
			c.events = clients.Client
		}
		c.broadcaster = record.NewBroadcaster(record.WithContext(ctx))
		c.recorder = c.broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: EventSource})
	}
	rl := func() workqueue.TypedRateLimiter[string] {
		return workqueue.DefaultTypedControllerRateLimiter[string]()
	}
	c.jobQueue = workqueue.NewTypedRateLimitingQueueWithConfig(rl(),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "ttl_jobs_to_delete", Clock: c.clock})
	c.objectQueue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[objectKey](),
		workqueue.TypedRateLimitingQueueConfig[objectKey]{Name: "ttl_objects_to_delete", Clock: c.clock})
	c.policyQueue = workqueue.NewTypedRateLimitingQueueWithConfig(rl(),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "ttl_policies", Clock: c.clock})
	c.historyQueue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[groupKey](),
		workqueue.TypedRateLimitingQueueConfig[groupKey]{Name: "ttl_history_limits", Clock: c.clock})

	jobInformer := factory.Batch().V1().Jobs()
	podInformer := factory.Core().V1().Pods()
	if opts.JobPods != nil {
		podInformer = opts.JobPods
	}
	nsInformer := factory.Core().V1().Namespaces()
	c.jobLister = jobInformer.Lister()
	podHandler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { c.onPod(logger, obj) },
		UpdateFunc: func(_, obj interface{}) { c.onPod(logger, obj) },
		DeleteFunc: c.onDeleteOf(policy.PodGVK),
	}
	c.pods = &podCache{shared: podInformer.Lister(), handler: podHandler}
	if opts.JobPods != nil {
		c.pods.client, c.pods.transform = clients.Client, opts.PodTransform
	}
	c.nsLister = nsInformer.Lister()
	if _, err := jobInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { c.onJob(logger, obj) },
		UpdateFunc: func(_, obj interface{}) { c.onJob(logger, obj) },
		DeleteFunc: c.onDeleteOf(policy.JobGVK),
	}); err != nil {
		return nil, err
	}
	if _, err := podInformer.Informer().AddEventHandler(podHandler); err != nil {
		return nil, err
	}
	if _, err := nsInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: c.onNamespaceUpdate,
	}); err != nil {
		return nil, err
	}
	c.cachesSynced = []cache.InformerSynced{
		jobInformer.Informer().HasSynced, podInformer.Informer().HasSynced, nsInformer.Informer().HasSynced,
	}

	c.policyInformer = dynamicinformer.NewFilteredDynamicInformer(clients.Dynamic, v1alpha1.TTLPolicyResource,
		"", 0, cache.Indexers{}, nil).Informer()
	if _, err := c.policyInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onPolicy,
		UpdateFunc: c.onPolicyUpdate,
		DeleteFunc: c.onPolicy,
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// Run waits for the shared caches, then runs workers workers for Jobs,
// workers for other objects, one for history limits and one for policies,
// until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	logger := klog.FromContext(ctx)
	logger.Info("Starting TTL after finished controller")

	if c.broadcaster != nil {
		c.broadcaster.StartStructuredLogging(3)
		c.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.events.CoreV1().Events("")})
		defer c.broadcaster.Shutdown()
	}
	var wg sync.WaitGroup
	defer func() {
		logger.Info("Shutting down TTL after finished controller")
		c.jobQueue.ShutDown()
		c.objectQueue.ShutDown()
		c.policyQueue.ShutDown()
		c.historyQueue.ShutDown()
		c.stopAllTargets()
		wg.Wait()
	}()

	// The policy informer is not waited for: until it syncs, no policy
	// applies, which only delays deletions. The CRD may even be missing, in
	// which case Jobs and Pods are still served.
	wg.Go(func() { c.policyInformer.RunWithContext(ctx) })
	// The finished pods outside the Job label are listed once the shared
	// caches have synced: their list makes the apiserver read every pod
	// (from etcd when it keeps no watch cache of pods), and at start-up it
	// would compete with the shared pod list the Job controller waits for.
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.cachesSynced...) {
		return
	}
	if s := c.pods.run(ctx); s != nil && !cache.WaitForNamedCacheSyncWithContext(ctx, s) {
		return
	}
	for i := 0; i < workers; i++ {
		wg.Go(func() { wait.UntilWithContext(ctx, c.jobWorker, time.Second) })
		wg.Go(func() { wait.UntilWithContext(ctx, c.objectWorker, time.Second) })
	}
	wg.Go(func() { wait.UntilWithContext(ctx, c.historyWorker, time.Second) })
	wg.Go(func() { wait.UntilWithContext(ctx, c.policyWorker, time.Second) })
	<-ctx.Done()
}

// jobWorker processes Job keys until the queue shuts down.
func (c *Controller) jobWorker(ctx context.Context) {
	for processNext(ctx, c.jobQueue, c.syncJob) {
	}
}

// objectWorker processes Pod and custom resource keys.
func (c *Controller) objectWorker(ctx context.Context) {
	for processNext(ctx, c.objectQueue, c.syncObject) {
	}
}

// historyWorker processes history-limit groups.
func (c *Controller) historyWorker(ctx context.Context) {
	for processNext(ctx, c.historyQueue, c.syncGroup) {
	}
}

// policyWorker processes TTLPolicy names.
func (c *Controller) policyWorker(ctx context.Context) {
	for processNext(ctx, c.policyQueue, c.syncPolicy) {
	}
}

// processNext pops one key, syncs it, and forgets it on success or requeues
// it rate-limited on error. It returns false when the queue shut down.
func processNext[K comparable](ctx context.Context, q workqueue.TypedRateLimitingInterface[K], sync func(context.Context, K) error) bool {
	key, quit := q.Get()
	if quit {
		return false
	}
	defer q.Done(key)
	if err := sync(ctx, key); err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Error in TTL after finished controller, will retry", "key", key)
		q.AddRateLimited(key)
		return true
	}
	q.Forget(key)
	return true
}
