package nodeagent

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/tools/reference"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/utils/clock"

	"jobkeeper.dev/jobkeeper/pkg/images"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/binder"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/cgroup"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/imagemanager"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/lifecycle"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/podconfig"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/process"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/server"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/simulated"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/stats"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/status"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/volume"
)

// Agent is the local node agent: it registers the Node, keeps its Lease,
// binds pods to it, runs them with a runtime and reports their status.
type Agent struct {
	// opts are the completed options.
	opts Options
	// client talks to the apiserver.
	client kubernetes.Interface
	// clock is opts.Clock.
	clock clock.WithTicker
	// runtime runs containers.
	runtime runtime.Runtime
	// nodeInfo is the node's system info.
	nodeInfo corev1.NodeSystemInfo
	// cgroups makes the pods' cgroups; nil when containers get none.
	cgroups *cgroup.Manager
	// podCgroupsMu guards podCgroups.
	podCgroupsMu sync.Mutex
	// podCgroups are the pods whose cgroup this run has ensured: its path
	// and what the pod counts for in its QoS class's cgroup.
	podCgroups map[types.UID]podCgroup
	// status writes pod status.
	status *status.Manager
	// binder binds pending pods to the node.
	binder *binder.Binder
	// podFactory watches the pods bound to this node.
	podFactory informers.SharedInformerFactory
	// podLister lists the pods bound to this node.
	podLister corelisters.PodLister
	// podsSynced reports the node pod informer synced.
	podsSynced cache.InformerSynced
	// serviceFactory watches every Service, for the containers'
	// environment.
	serviceFactory informers.SharedInformerFactory
	// serviceLister lists the Services.
	serviceLister corelisters.ServiceLister
	// servicesSynced reports the Service informer synced.
	servicesSynced cache.InformerSynced
	// apiserver is where pods reach the apiserver (Options.APIServer);
	// nil: at the kubernetes Service's ClusterIP.
	apiserver *podconfig.APIServerEndpoint
	// broadcaster sends the recorders' events to the API.
	broadcaster record.EventBroadcaster
	// recorder emits the node's events (source "kubelet"); nil when events
	// are off.
	recorder record.EventRecorder
	// schedulerRecorder emits the binder's events (source
	// "default-scheduler"); nil when events are off.
	schedulerRecorder record.EventRecorder
	// capacity is the node's capacity, allocatable that less what is
	// reserved for the system: what pods are scheduled and resized
	// against, and what a container's resourceFieldRef defaults to.
	capacity, allocatable corev1.ResourceList
	// stats samples what the node and its containers use.
	stats *stats.Collector
	// listener is the log endpoint's listener, nil when not serving.
	listener net.Listener

	// mu guards workers, runCtx, activePods and activeRequests.
	mu sync.Mutex
	// workers are the pod workers by pod UID.
	workers map[types.UID]*worker
	// activePods counts the workers that have not finished.
	activePods int
	// activeRequests sums the requests of those workers' pods (what they
	// are allocated: a resize is admitted against it), reservedRequests
	// what they count for when the binder places a pod (worker.reserved).
	activeRequests, reservedRequests binder.Requests
	// runCtx is Run's context; workers derive theirs from it.
	runCtx context.Context
	// refused holds the pods refused at admission (their failed status is
	// written once).
	refused map[types.UID]bool
	// shuttingDown is set once a clean stop began: no pod starts any
	// more.
	shuttingDown bool
	// deletions counts the deleted pods whose clean-up (their worker's
	// end, their volumes and directory) is under way.
	deletions sync.WaitGroup

	// volumes prepares pod volumes on the host.
	volumes *volume.Manager
	// runtimeReady is closed once Run has set up the runtime.
	runtimeReady chan struct{}
	// puller pulls and holds images (image mode); nil in host mode.
	puller *imagemanager.Puller
	// euid is the agent's effective user ID (os.Geteuid in New): as root
	// it can give volumes any group (fsGroup).
	euid int
	// idRanges are the pods' user namespace ranges (hostUsers: false;
	// userns.go).
	idRanges *idRanges
	// netNS is the agent's own network namespace, hostNetwork pods'
	// (read in New; recover.go).
	netNS netNSID
}

// New builds an agent. Nothing talks to the apiserver before Run.
func New(client kubernetes.Interface, opts Options) (*Agent, error) {
	if err := opts.complete(); err != nil {
		return nil, fmt.Errorf("node agent options: %w", err)
	}
	a := &Agent{
		refused:      map[types.UID]bool{},
		runtimeReady: make(chan struct{}),
		opts:         opts,
		client:       client,
		clock:        opts.Clock,
		status:       status.NewManager(client),
		workers:      map[types.UID]*worker{},
		capacity:     hostCapacity(opts.MaxPods, opts.DataDir, opts.ExtendedResources),
		nodeInfo:     hostInfo(),
		euid:         os.Geteuid(),
		idRanges:     newIDRanges(),
	}
	a.netNS = a.ownNetNS()
	a.stats = stats.NewCollector(a.statsSnapshot)
	a.allocatable = allocatableOf(a.capacity, opts.SystemReserved)
	switch opts.Runtime {
	case simulated.Name:
		a.runtime = simulated.New(opts.Clock)
		close(a.runtimeReady)
	default:
		// The process runtime is created in Run: it kills leftovers of a
		// previous run, which must not happen at construction time.
	}
	a.podFactory = informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
		lo.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", opts.NodeName).String()
	}))
	podInformer := a.podFactory.Core().V1().Pods()
	if err := podInformer.Informer().SetTransform(stripManagedFields); err != nil {
		return nil, err
	}
	a.podLister = podInformer.Lister()
	a.podsSynced = podInformer.Informer().HasSynced
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { a.onPod(obj.(*corev1.Pod)) },
		UpdateFunc: func(_, obj any) { a.onPod(obj.(*corev1.Pod)) },
		DeleteFunc: a.onPodDeleted,
	}); err != nil {
		return nil, err
	}
	apiserver, err := podconfig.ParseAPIServer(opts.APIServer)
	if err != nil {
		return nil, fmt.Errorf("node agent options: %w", err)
	}
	a.apiserver = apiserver
	a.serviceFactory = informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(stripManagedFields))
	serviceInformer := a.serviceFactory.Core().V1().Services()
	a.serviceLister = serviceInformer.Lister()
	a.servicesSynced = serviceInformer.Informer().HasSynced
	b, err := binder.New(a.binderConfig())
	if err != nil {
		return nil, err
	}
	a.binder = b
	a.volumes = volume.New(a.volumeConfig())
	if opts.imageStore != nil {
		if a.puller, err = a.newPuller(opts.imageStore); err != nil {
			return nil, err
		}
	}
	a.broadcaster = record.NewBroadcaster()
	a.recorder = a.broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kubelet", Host: opts.NodeName})
	a.schedulerRecorder = a.broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "default-scheduler"})
	return a, nil
}

// binderConfig is what the binder needs from the agent.
func (a *Agent) binderConfig() binder.Config {
	return binder.Config{
		Client:       a.client,
		NodeName:     a.opts.NodeName,
		MaxPods:      a.opts.MaxPods,
		Capacity:     a.allocatable,
		Clock:        a.clock,
		Pods:         a.podLister,
		FieldManager: status.FieldManager,
		Transform:    stripManagedFields,
		Event:        a.schedulerEvent,
		Workers:      a.withWorkers,
		// One gate set with the apiserver and the controllers (up
		// --feature-gates).
		GangScheduling: utilfeature.DefaultFeatureGate.Enabled(features.GangScheduling),
	}
}

// withWorkers calls f with the agent's workers locked: what the workers
// of pods not finished count for in the binder's placing (as the
// scheduler counts bound pods: worker.reserved), how many they are, and
// whether a pod has a worker.
func (a *Agent) withWorkers(f func(active binder.Requests, pods int, hasWorker func(types.UID) bool)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f(a.reservedRequests, a.activePods, func(uid types.UID) bool {
		_, ok := a.workers[uid]
		return ok
	})
}

// serverConfig is what the log and streaming server needs from the agent.
func (a *Agent) serverConfig() server.Config {
	return server.Config{
		NodeName:                 a.opts.NodeName,
		Address:                  a.opts.NodeIP,
		Port:                     a.opts.KubeletPort,
		ServingCertFile:          a.opts.ServingCertFile,
		ServingKeyFile:           a.opts.ServingKeyFile,
		ClientCAFile:             a.opts.ClientCAFile,
		AllowedClientCommonNames: a.opts.AllowedClientCommonNames,
		Clock:                    a.clock,
		Pods:                     a.podLister,
		LogPath:                  a.logPath,
		DialPod:                  a.dialPod,
		RuntimeName:              func() string { return a.runtime.Name() },
		Container:                a.containerState,
		Summary:                  a.summaryHandler(),
		ResourceMetrics:          stats.ResourceMetricsHandler(a.stats),
	}
}

// containerState is the state of a container of a pod the agent runs, for
// the log and streaming server.
func (a *Agent) containerState(uid types.UID, name string) (server.ContainerState, bool) {
	a.mu.Lock()
	w := a.workers[uid]
	a.mu.Unlock()
	if w == nil {
		return server.ContainerState{}, false
	}
	s, ok := w.logStateOf(name)
	return server.ContainerState{Attempt: s.attempt, Running: s.running, Handle: s.handle}, ok
}

// pullerConfig is what the image manager needs from the agent.
func (a *Agent) pullerConfig() imagemanager.Config {
	return imagemanager.Config{Client: a.client, Clock: a.clock, Event: a.event}
}

// newPuller makes the image manager over store, with the pulled-image
// records of KubeletEnsureSecretPulledImages (imagemanager.PullRecords)
// under the data directory: what an agent stopped mid-pull left is
// recovered, records of images no longer in the store removed.
func (a *Agent) newPuller(store *images.Store) (*imagemanager.Puller, error) {
	if !utilfeature.DefaultFeatureGate.Enabled(features.KubeletEnsureSecretPulledImages) {
		return imagemanager.NewPuller(a.pullerConfig(), store), nil
	}
	records, err := imagemanager.OpenPullRecords(filepath.Join(a.opts.DataDir, "image_manager"), a.clock.Now)
	if err != nil {
		return nil, fmt.Errorf("opening the pulled-image records: %w", err)
	}
	err = records.Recover(func(image string) (string, bool) {
		ref, err := images.Normalize(image)
		if err != nil {
			return "", false
		}
		img, err := store.Lookup(ref)
		if err != nil {
			return "", false
		}
		return img.ID, true
	})
	if err != nil {
		return nil, fmt.Errorf("recovering the pulled-image records: %w", err)
	}
	cfg := a.pullerConfig()
	cfg.Records = records
	p := imagemanager.NewPuller(cfg, store)
	p.PruneRecords(a.clock.Now())
	return p, nil
}

// volumeConfig is what the volume manager needs from the agent.
func (a *Agent) volumeConfig() volume.Config {
	return volume.Config{
		Client:   a.client,
		Clock:    a.clock,
		Pods:     a.podLister,
		Capacity: a.allocatable,
		EUID:     a.euid,
		PodDir:   a.podDir,
		Event:    a.event,
		Runtime:  func() runtime.Runtime { return a.runtime },
	}
}

// stripManagedFields drops managedFields from cached objects: the agent
// never reads them, and they are a large part of a pod's size.
func stripManagedFields(obj any) (any, error) {
	if acc, ok := obj.(metav1.ObjectMetaAccessor); ok {
		acc.GetObjectMeta().SetManagedFields(nil)
	}
	return obj, nil
}

// NodeName returns the node's name.
func (a *Agent) NodeName() string { return a.opts.NodeName }

// Run registers the node and runs pods until ctx is done. Then, as a
// graceful node shutdown, it stops the pods that have not finished and
// marks them disrupted (shutdown.go), unless Options.KeepRunningOnStop
// leaves their containers to the next run, as a kubelet restart does. A
// crash of the agent also leaves them running: the next Run takes over
// those its runtime can (recover.go).
func (a *Agent) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("node", a.opts.NodeName)
	ctx = klog.NewContext(ctx, logger)
	if a.opts.Runtime == process.Name {
		// Host mode's views hide the data directory: credentials, images,
		// other pods' files.
		hide := hiddenPaths(append([]string{a.opts.DataDir, a.opts.ImageDir}, a.opts.HiddenPaths...))
		cg, noCgroups := newCgroups(ctx, a.opts)
		a.cgroups, a.podCgroups = cg, map[types.UID]podCgroup{}
		if cg != nil && !a.opts.KeepRunningOnStop {
			// Last, whichever way Run returns: after a clean stop every
			// container was stopped and nothing is left in them; a stop
			// during start-up (before the caches synced) leaves the root
			// made above, which would otherwise stay behind. A cgroup that
			// still holds processes is not removed.
			defer func() {
				if err := cg.RemoveAll(); err != nil {
					logger.Info("Removing the pods' cgroups failed", "root", cg.Root(), "err", err)
				}
			}()
		}
		rt, err := process.New(ctx, process.Options{StateDir: filepath.Join(a.opts.DataDir, "process-state"), LogMaxSize: a.opts.LogMaxSize, Clock: a.clock, Isolation: a.opts.Isolation, Hide: hide,
			Cgroups: cg, CgroupsReason: noCgroups})
		if err != nil {
			return err
		}
		a.runtime = rt
		err = a.openImages(ctx)
		close(a.runtimeReady)
		if err != nil {
			return err
		}
		if ok, why := rt.Isolation(); ok {
			logger.Info("Containers get a private copy-on-write view of this host's filesystems; volumes are mounted in it")
		} else {
			logger.Info("WARNING: containers see this host's filesystem as it is, and pods with volumes are refused", "reason", why)
		}
		if cg != nil {
			logger.Info("Pods and containers get cgroups with their limits", "root", cg.Root(), "unified", cg.Unified())
		} else {
			logger.Info("WARNING: resource limits are not enforced", "reason", noCgroups)
		}
	}
	if a.opts.PodNetwork != nil {
		nj, ok := a.runtime.(runtime.NetworkJoiner)
		if !ok {
			return fmt.Errorf("pods cannot get networks of their own: the %s runtime cannot run containers in them", a.runtime.Name())
		}
		if yes, why := nj.NetworkNamespaces(); !yes {
			return fmt.Errorf("pods cannot get networks of their own: %s", why)
		}
	}
	if a.broadcaster != nil {
		a.broadcaster.StartStructuredLogging(3)
		a.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: a.client.CoreV1().Events("")})
		defer a.broadcaster.Shutdown()
	}
	port := 0
	if a.opts.ServingCertFile != "" {
		srv, ln, err := server.New(a.serverConfig())
		if err != nil {
			return err
		}
		a.listener = ln
		port = ln.Addr().(*net.TCPAddr).Port
		go func() { _ = srv.Serve(ln) }()
		defer func() { _ = srv.Close() }()
		logger.Info("Serving container logs", "address", ln.Addr().String())
	}
	if err := a.registerNode(ctx, port); err != nil {
		return err
	}

	// The pods' workers and the status writes outlive ctx: a clean stop
	// shuts the pods down first (shutdown.go).
	workCtx, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	a.mu.Lock()
	a.runCtx = workCtx
	a.mu.Unlock()
	a.podFactory.Start(ctx.Done())
	// As the kubelet, containers start once the Services were read at
	// least once: KUBERNETES_SERVICE_HOST is what in-cluster clients need.
	a.serviceFactory.Start(ctx.Done())
	a.binder.Start(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), a.podsSynced, a.servicesSynced, a.binder.Synced) {
		return ctx.Err()
	}
	a.removeOrphanDirs(ctx)
	a.idRanges.recover(filepath.Join(a.opts.DataDir, "pods"))

	var wg, statusWG sync.WaitGroup
	statusWG.Go(func() { a.status.Run(workCtx, a.opts.StatusWorkers) })
	wg.Go(func() { a.renewLease(ctx) })
	wg.Go(func() { a.heartbeat(ctx, port) })
	wg.Go(func() { a.binder.Run(ctx) })
	wg.Go(func() { a.volumes.RefreshLoop(ctx, a.opts.SyncFrequency) })
	wg.Go(func() { a.evictLoop(ctx) })
	wg.Go(func() { a.statsLoop(ctx) })
	if a.puller != nil {
		wg.Go(func() { a.puller.CollectGarbage(ctx) })
	}
	logger.Info("Node agent running", "runtime", a.runtime.Name(), "maxPods", a.opts.MaxPods)
	<-ctx.Done()
	wg.Wait()
	if a.opts.KeepRunningOnStop {
		a.mu.Lock()
		a.shuttingDown = true
		a.mu.Unlock()
		logger.Info("Leaving the containers running for the next run of the node agent to take over")
	} else {
		a.shutdownPods(workCtx)
	}
	stopWork()
	statusWG.Wait()
	a.podFactory.Shutdown()
	a.serviceFactory.Shutdown()
	a.stopWorkers()
	a.closeImages()
	if !a.opts.KeepRunningOnStop {
		// The pods' containers are stopped: their memory-backed
		// emptyDirs go, so that nothing stays mounted on the host.
		a.unmountAllVolumes(ctx)
	}
	logger.Info("Node agent stopped")
	return nil
}

// stopWorkers waits for the workers (their context is done) and, unless
// the containers are left to the next run, kills what they left running.
func (a *Agent) stopWorkers() {
	ws := a.allWorkers()
	for _, w := range ws {
		<-w.done
	}
	if a.opts.KeepRunningOnStop {
		return
	}
	if rt, ok := a.runtime.(runtime.Killer); ok {
		rt.KillAll(5 * time.Second)
	}
}

// onPod reacts to a pod bound to this node being added or changed.
func (a *Agent) onPod(pod *corev1.Pod) {
	if pod.Spec.NodeName != a.opts.NodeName {
		return
	}
	terminalInAPI := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
	if pod.DeletionTimestamp != nil && (pod.DeletionGracePeriodSeconds == nil || *pod.DeletionGracePeriodSeconds > 0) {
		// A zero grace period means the deletion is already final (only
		// finalizers may hold the pod): there is nothing to confirm.
		a.status.RequestDelete(pod)
	}
	if !terminalInAPI && a.refuse(pod) {
		return
	}
	a.mu.Lock()
	w, ok := a.workers[pod.UID]
	created := false
	if !ok && !terminalInAPI && a.runCtx != nil && !a.shuttingDown {
		w = newWorker(a, pod)
		ctx, cancel := context.WithCancel(a.runCtx)
		w.cancel = cancel
		a.workers[pod.UID] = w
		a.activePods++
		a.activeRequests = a.activeRequests.Add(w.requests)
		a.reservedRequests = a.reservedRequests.Add(w.reserved)
		created = true
		go w.run(ctx)
	}
	if ok && terminalInAPI && isClosed(w.finished) {
		// The API has the final status: the worker has nothing left to do,
		// and the log endpoint reads the last attempt from the status.
		delete(a.workers, pod.UID)
		a.status.ForgetIfIdle(pod.UID)
		ok = false
	}
	a.mu.Unlock()
	if created && pod.Status.StartTime == nil {
		// A pod new to the node (not one a previous run of the agent
		// started) hears once what runs without being enforced.
		if _, ok := a.runtime.(runtime.Isolator); ok {
			if d := podconfig.DecideFeatures(pod, a.podFeatures()); len(d.Unenforced) > 0 {
				a.event(pod, corev1.EventTypeWarning, podconfig.ReasonNotEnforced, podconfig.NotEnforcedMessage(d.Unenforced))
			}
		}
	}
	if created {
		a.binder.Seen(pod.UID)
	}
	if ok {
		w.update(pod)
	}
	if terminalInAPI {
		a.binder.Enqueue()
	}
}

// isClosed reports whether ch is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// workerFinished frees the node capacity of a worker whose pod is terminal.
func (a *Agent) workerFinished(w *worker) {
	// No container of the pod runs any more: its network goes, as the
	// kubelet stops a finished pod's sandbox.
	a.releaseNetwork(context.Background(), w.uid())
	a.mu.Lock()
	a.releaseLocked(w)
	a.mu.Unlock()
	a.binder.Enqueue()
}

// releaseLocked takes a worker out of the active usage once; mu is held.
func (a *Agent) releaseLocked(w *worker) {
	if w.released {
		return
	}
	w.released = true
	a.activePods--
	a.activeRequests = a.activeRequests.Sub(w.requests)
	a.reservedRequests = a.reservedRequests.Sub(w.reserved)
}

// onPodDeleted forgets a pod that left the API: a force-deleted pod's
// attempts are killed at once, and its directory is removed.
func (a *Agent) onPodDeleted(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		tomb, ok := obj.(cache.DeletedFinalStateUnknown)
		if !ok {
			return
		}
		if pod, ok = tomb.Obj.(*corev1.Pod); !ok {
			return
		}
	}
	a.mu.Lock()
	delete(a.refused, pod.UID)
	w := a.workers[pod.UID]
	delete(a.workers, pod.UID)
	if w != nil {
		a.releaseLocked(w)
	}
	a.mu.Unlock()
	a.status.Forget(pod.UID)
	a.binder.Enqueue()
	a.deletions.Go(func() {
		if w != nil {
			w.cancel()
			<-w.done
			for _, c := range w.all() {
				if c.handle != nil {
					c.handle.Stop(0)
					<-c.handle.Done()
				}
			}
		}
		// Only once the worker ended: an attempt it started meanwhile
		// would mark the volumes ready again. Forgetting waits for a
		// refresh under way, which is no business of the informer's
		// handler.
		a.volumes.Forget(pod.UID)
		a.releaseNetwork(context.Background(), pod.UID)
		if removePodDir(a.podDir(pod.UID)) == nil {
			a.idRanges.release(pod.UID)
		}
		a.removePodCgroup(context.Background(), pod.UID)
	})
}

// unmountAllVolumes detaches what is mounted on any pod's volume
// directories.
func (a *Agent) unmountAllVolumes(ctx context.Context) {
	entries, _ := os.ReadDir(filepath.Join(a.opts.DataDir, "pods"))
	for _, e := range entries {
		if err := volume.UnmountVolumes(filepath.Join(a.opts.DataDir, "pods", e.Name())); err != nil {
			klog.FromContext(ctx).Info("Unmounting a pod's volumes failed", "uid", e.Name(), "err", err)
		}
	}
}

// removeOrphanDirs deletes directories of pods no longer in the API.
func (a *Agent) removeOrphanDirs(ctx context.Context) {
	entries, err := os.ReadDir(filepath.Join(a.opts.DataDir, "pods"))
	if err != nil {
		return
	}
	known := map[string]bool{}
	pods, _ := a.podLister.List(everything)
	for _, p := range pods {
		known[string(p.UID)] = true
	}
	a.pruneNetworks(ctx)
	a.removeOrphanCgroups(ctx, known)
	for _, e := range entries {
		if !known[e.Name()] {
			klog.FromContext(ctx).V(2).Info("Removing directory of a pod gone from the API", "uid", e.Name())
			dir := filepath.Join(a.opts.DataDir, "pods", e.Name())
			a.stopLeftovers(ctx, dir)
			if removePodDir(dir) == nil {
				a.idRanges.release(types.UID(e.Name()))
			}
		}
	}
}

// podDir is the pod's directory under the data dir.
func (a *Agent) podDir(uid types.UID) string {
	return filepath.Join(a.opts.DataDir, "pods", string(uid))
}

// logPath is the log file of one container attempt.
func (a *Agent) logPath(uid types.UID, container string, attempt int32) string {
	return filepath.Join(a.podDir(uid), "logs", container, strconv.Itoa(int(attempt))+".log")
}

// containerDir is the default working directory of a container.
func (a *Agent) containerDir(uid types.UID, container string) string {
	return filepath.Join(a.podDir(uid), "containers", container)
}

// prepareAttempt creates the directories of an attempt and removes the log
// of the attempt before the previous one (a kubelet keeps the current and
// the previous container's logs).
func (a *Agent) prepareAttempt(spec *runtime.Spec, attempt int32) error {
	if _, host := a.runtime.(runtime.HostDirs); !host {
		return nil
	}
	uid := types.UID(spec.PodUID)
	spec.LogPath = a.logPath(uid, spec.ContainerName, attempt)
	for _, d := range []string{a.containerDir(uid, spec.ContainerName), filepath.Dir(spec.LogPath)} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return fmt.Errorf("creating container directory: %w", err)
		}
	}
	if attempt >= 2 {
		old := a.logPath(uid, spec.ContainerName, attempt-2)
		_ = os.Remove(old)
		_ = os.Remove(old + ".1")
		_ = os.RemoveAll(a.attemptStateDir(uid, spec.ContainerName, attempt-2))
	}
	if _, ok := a.runtime.(runtime.Adopter); ok {
		// The attempt outlives the agent; what the next run of the agent
		// needs to take it over is kept here (recover.go).
		spec.StateDir = a.attemptStateDir(uid, spec.ContainerName, attempt)
		_ = os.RemoveAll(spec.StateDir)
		if err := os.MkdirAll(spec.StateDir, 0o700); err != nil {
			return fmt.Errorf("creating container directory: %w", err)
		}
	}
	return nil
}

// configMap reads a ConfigMap's data for envSources.
func (a *Agent) configMap(ctx context.Context, ns, name string) (map[string]string, error) {
	cm, err := a.client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading configmap %s/%s: %w", ns, name, err)
	}
	data := map[string]string{}
	for k, v := range cm.Data {
		data[k] = v
	}
	for k, v := range cm.BinaryData {
		data[k] = string(v)
	}
	return data, nil
}

// secret reads a Secret's data for envSources.
func (a *Agent) secret(ctx context.Context, ns, name string) (map[string][]byte, error) {
	s, err := a.client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading secret %s/%s: %w", ns, name, err)
	}
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	return s.Data, nil
}

// event records a node event on pod unless events are off.
func (a *Agent) event(pod *corev1.Pod, eventType, reason, message string) {
	if a.recorder != nil && !a.quiet() {
		a.recorder.Event(pod, eventType, reason, message)
	}
}

// containerEvent records a node event on one container of pod, as the
// kubelet records its container events: on the pod, with the container's
// field path (spec.containers{name}, spec.initContainers{name}).
func (a *Agent) containerEvent(pod *corev1.Pod, c lifecycle.ContainerInfo, eventType, reason, message string) {
	if a.recorder == nil || a.quiet() {
		return
	}
	ref, err := reference.GetReference(scheme.Scheme, pod)
	if err != nil {
		a.recorder.Event(pod, eventType, reason, message)
		return
	}
	field := "spec.containers"
	switch c.Kind {
	case lifecycle.KindInit, lifecycle.KindSidecar:
		field = "spec.initContainers"
	case lifecycle.KindEphemeral:
		field = "spec.ephemeralContainers"
	}
	ref.FieldPath = fmt.Sprintf("%s{%s}", field, c.Name)
	a.recorder.Event(ref, eventType, reason, message)
}

// schedulerEvent records a scheduling event on pod unless events are off.
func (a *Agent) schedulerEvent(pod *corev1.Pod, eventType, reason, message string) {
	if a.schedulerRecorder != nil && !a.quiet() {
		a.schedulerRecorder.Event(pod, eventType, reason, message)
	}
}

// quiet reports whether the runtime asks for no events (runtime.Quiet).
func (a *Agent) quiet() bool {
	_, ok := a.runtime.(runtime.Quiet)
	return ok
}

// imageEvent says, once per attempt, that the image is not pulled; on the
// container, as the kubelet's Pulled.
func (a *Agent) imageEvent(pod *corev1.Pod, c *container) {
	a.containerEvent(pod, c.info, corev1.EventTypeNormal, "Pulled", fmt.Sprintf("Image %q not pulled: the process runtime runs container %s's command on the host", c.spec.Image, c.spec.Name))
}

// refusal returns why pod cannot run on this node, as a reason and a
// message (the event's; the pod's status message is "Pod was rejected: "
// and this, as the kubelet's rejectPod writes them); empty when it can.
func (a *Agent) refusal(pod *corev1.Pod) (string, string) {
	iso, ok := a.runtime.(runtime.Isolator)
	if !ok {
		// A runtime that runs nothing on this host enforces nothing.
		return "", ""
	}
	if d := podconfig.DecideFeatures(pod, a.podFeatures()); d.Reason != "" {
		return d.Reason, d.Message
	}
	if binder.HostPortsTaken(pod, a.runningPods(pod.UID)) {
		// The kubelet's predicate admission, for a pod given the node
		// by nodeName (the binder holds the others back).
		return reasonNodePorts, "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
	}
	if len(pod.Spec.Volumes) == 0 {
		return "", ""
	}
	for i := range pod.Spec.Volumes {
		if msg := volume.UnsupportedVolume(&pod.Spec.Volumes[i]); msg != "" {
			return volume.ReasonUnsupportedVolume, msg
		}
	}
	if isolated, why := iso.Isolation(); !isolated {
		var names []string
		for i, v := range pod.Spec.Volumes {
			if !volume.ServiceAccountVolume(&pod.Spec.Volumes[i]) {
				names = append(names, v.Name)
			}
		}
		if len(names) == 0 {
			// Only the token volume the ServiceAccount admission plugin
			// adds to every pod: the pod runs without it.
			return "", ""
		}
		return volume.ReasonNoPrivateFilesystem, fmt.Sprintf("it has volumes (%s) and this node cannot give containers a private filesystem view to mount them in (%s); "+
			"it is refused rather than run against the host's filesystem. See docs/node-agent.md for what a user needs.", strings.Join(names, ", "), why)
	}
	return "", ""
}

// reasonNodePorts is the kubelet's rejection reason for a pod whose host
// port a pod it runs holds (the scheduler's NodePorts plugin's name).
const reasonNodePorts = "NodePorts"

// runningPods are the pods the agent has workers for, but the one of uid.
func (a *Agent) runningPods(uid types.UID) []*corev1.Pod {
	a.mu.Lock()
	workers := make([]*worker, 0, len(a.workers))
	for u, w := range a.workers {
		if u != uid {
			workers = append(workers, w)
		}
	}
	a.mu.Unlock()
	pods := make([]*corev1.Pod, 0, len(workers))
	for _, w := range workers {
		pods = append(pods, w.currentPod())
	}
	return pods
}

// rejectedPrefix starts the status message of a pod the node rejects.
const rejectedPrefix = "Pod was rejected: "

// refuse fails a pod this node cannot run, once, and reports whether it
// did. A pod that already has a worker is not refused: its containers were
// started by an earlier run of the agent under the same rules.
func (a *Agent) refuse(pod *corev1.Pod) bool {
	a.mu.Lock()
	_, running := a.workers[pod.UID]
	done := a.refused[pod.UID]
	a.mu.Unlock()
	if running {
		return false
	}
	if done {
		return true
	}
	reason, msg := a.refusal(pod)
	if reason == "" {
		return false
	}
	a.mu.Lock()
	a.refused[pod.UID] = true
	a.mu.Unlock()
	a.event(pod, corev1.EventTypeWarning, reason, msg)
	status := pod.Status.DeepCopy()
	status.Phase = corev1.PodFailed
	status.Reason = reason
	status.Message = rejectedPrefix + msg
	a.status.Set(pod, status)
	return true
}

// isolated reports whether containers get a private filesystem view.
func (a *Agent) isolated() bool {
	return volume.Isolated(a.runtime)
}

// Isolation waits until Run has set up the runtime, then reports whether
// containers get a private filesystem view and, when not, why.
func (a *Agent) Isolation(ctx context.Context) (bool, string, error) {
	return askRuntime(ctx, a, runtime.Isolator.Isolation)
}

// Limits waits until Run has set up the runtime, then reports whether
// containers get cgroups with their cpu and memory limits, and if not why.
func (a *Agent) Limits(ctx context.Context) (bool, string, error) {
	return askRuntime(ctx, a, runtime.CgroupRuntime.Cgroups)
}

// askRuntime waits until Run has set up the runtime, then asks it what a
// runtime with the capability I answers; a runtime without I runs nothing
// here.
func askRuntime[I any](ctx context.Context, a *Agent, ask func(I) (bool, string)) (bool, string, error) {
	select {
	case <-a.runtimeReady:
	case <-ctx.Done():
		return false, "", ctx.Err()
	}
	rt, ok := a.runtime.(I)
	if !ok {
		return false, "the " + a.runtime.Name() + " runtime runs nothing on this host", nil
	}
	yes, why := ask(rt)
	return yes, why, nil
}

// imageMode reports whether containers run their images (else the
// host's files).
func (a *Agent) imageMode() bool {
	return a.opts.imageStore != nil || a.opts.Images == ImagesOCI
}

// openImages opens the image store: in image mode for the containers'
// images and the pods' image volumes; in host mode, where containers get
// a private view, for image volumes only.
func (a *Agent) openImages(ctx context.Context) error {
	if a.opts.imageStore != nil {
		// The tests' own store, its puller made with the agent.
		return nil
	}
	rt, isolator := a.runtime.(runtime.Isolator)
	if !a.imageMode() {
		klog.FromContext(ctx).Info("Containers run their command on this host's files: their images are not pulled", "images", a.opts.Images)
		if !isolator {
			return nil
		}
		if yes, _ := rt.Isolation(); !yes {
			// Pods with volumes are refused: no image volume either.
			return nil
		}
	} else if isolator {
		if yes, why := rt.Isolation(); !yes {
			return fmt.Errorf("containers cannot get a private filesystem view here (%s), so their images cannot be run: use the host's files (Images %q) instead", why, ImagesHost)
		}
	}
	store, err := images.Open(a.opts.ImageDir)
	if err != nil && !a.imageMode() {
		// Host mode needs the store for image volumes only: their pods
		// then wait, saying so; the others run.
		klog.FromContext(ctx).Error(err, "Opening the image store for image volumes failed: pods with image volumes cannot start", "imageStore", a.opts.ImageDir)
		return nil
	}
	if err != nil {
		return fmt.Errorf("opening the image store: %w", err)
	}
	if a.puller, err = a.newPuller(store); err != nil {
		_ = store.Close()
		return err
	}
	if a.imageMode() {
		klog.FromContext(ctx).Info("Containers run their images", "imageStore", a.opts.ImageDir)
	} else {
		klog.FromContext(ctx).Info("Image volumes are pulled into the image store", "imageStore", a.opts.ImageDir)
	}
	return nil
}

// closeImages closes the store Run opened, once the workers are gone.
func (a *Agent) closeImages() {
	if a.puller != nil && a.opts.imageStore == nil {
		_ = a.puller.Store.Close()
	}
}

// allWorkers lists the agent's workers.
func (a *Agent) allWorkers() []*worker {
	a.mu.Lock()
	defer a.mu.Unlock()
	ws := make([]*worker, 0, len(a.workers))
	for _, w := range a.workers {
		ws = append(ws, w)
	}
	return ws
}
