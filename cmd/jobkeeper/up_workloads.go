package main

import (
	"context"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/scale"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/daemon"
	"k8s.io/kubernetes/pkg/controller/deployment"
	"k8s.io/kubernetes/pkg/controller/disruption"
	"k8s.io/kubernetes/pkg/controller/replicaset"
	"k8s.io/kubernetes/pkg/controller/replication"
	"k8s.io/kubernetes/pkg/controller/statefulset"

	"jobkeeper.dev/jobkeeper/pkg/controlplane"
)

// The workload controllers' settings, kube-controller-manager's defaults.
const (
	deploymentWorkers    = 5
	replicaSetWorkers    = 5
	statefulSetWorkers   = 5
	rcWorkers            = 5
	daemonSetWorkers     = 2
	daemonSetBackoffBase = time.Second
	daemonSetBackoffMax  = 15 * time.Minute
)

// workloadResources are the resources whose controllers run on demand:
// apps/v1's, and core/v1's ReplicationControllers.
var workloadResources = []schema.GroupVersionResource{
	appsv1.SchemeGroupVersion.WithResource("deployments"),
	appsv1.SchemeGroupVersion.WithResource("replicasets"),
	appsv1.SchemeGroupVersion.WithResource("statefulsets"),
	appsv1.SchemeGroupVersion.WithResource("daemonsets"),
	corev1.SchemeGroupVersion.WithResource("replicationcontrollers"),
	policyv1.SchemeGroupVersion.WithResource("poddisruptionbudgets"),
}

// runWorkloadsOnDemand is the upComponent of `up --network=pod` that runs
// upstream's Deployment, ReplicaSet, StatefulSet, DaemonSet,
// ReplicationController and disruption (PodDisruptionBudget) controllers,
// as kube-controller-manager does, from the moment the first such object
// exists: until then only six metadata watches run, so that a batch-only
// user pays neither for their caches (a second, untrimmed cache of every
// pod) nor for their workers.
func runWorkloadsOnDemand(ctx context.Context, cp *controlplane.ControlPlane) (func(), error) {
	cfg := controlplane.ProtobufConfig(cp.AdminConfig())
	cfg.UserAgent = "jobkeeper-up-workload-controllers"
	cfg.QPS, cfg.Burst = 100, 200
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	metadataClient, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	var once sync.Once
	start := func() {
		once.Do(func() {
			if err := startWorkloadControllers(ctx, cfg, client, &wg); err != nil {
				klog.FromContext(ctx).Error(err, "Starting the workload controllers failed")
			}
		})
	}
	watchers := metadatainformer.NewSharedInformerFactory(metadataClient, 0)
	for _, r := range workloadResources {
		inf := watchers.ForResource(r).Informer()
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) { start() }}); err != nil {
			return nil, err
		}
	}
	watchers.Start(ctx.Done())
	return func() {
		watchers.Shutdown()
		wg.Wait()
	}, nil
}

// startWorkloadControllers starts the six controllers and their caches,
// which run until ctx ends; wg waits for them. cfg is client's, for the
// disruption controller's scale client.
func startWorkloadControllers(ctx context.Context, cfg *rest.Config, client kubernetes.Interface, wg *sync.WaitGroup) error {
	started := time.Now()
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(dropManagedFields))
	apps, core := factory.Apps().V1(), factory.Core().V1()
	dc, err := deployment.NewDeploymentController(ctx, apps.Deployments(), apps.ReplicaSets(), core.Pods(), client)
	if err != nil {
		return err
	}
	rc := replicaset.NewReplicaSetController(ctx, apps.ReplicaSets(), core.Pods(), client, replicaset.BurstReplicas)
	sc := statefulset.NewStatefulSetController(ctx, core.Pods(), apps.StatefulSets(), core.PersistentVolumeClaims(), apps.ControllerRevisions(), client)
	dsc, err := daemon.NewDaemonSetsController(ctx, apps.DaemonSets(), apps.ControllerRevisions(), core.Pods(), core.Nodes(), client,
		flowcontrol.NewBackOff(daemonSetBackoffBase, daemonSetBackoffMax))
	if err != nil {
		return err
	}
	rm := replication.NewReplicationManager(ctx, core.Pods(), core.ReplicationControllers(), client, replication.BurstReplicas)
	// The disruption controller finds the scale of a PDB's pods'
	// controller, of any kind, through discovery and the scale
	// subresource, as kube-controller-manager's does.
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(client.Discovery()))
	scales, err := scale.NewForConfig(cfg, mapper, dynamic.LegacyAPIPathResolverFunc, scale.NewDiscoveryScaleKindResolver(client.Discovery()))
	if err != nil {
		return err
	}
	pdbc := disruption.NewDisruptionController(ctx, core.Pods(), factory.Policy().V1().PodDisruptionBudgets(), core.ReplicationControllers(),
		apps.ReplicaSets(), apps.Deployments(), apps.StatefulSets(), client, mapper, scales, client.Discovery())
	factory.Start(ctx.Done())
	wg.Go(func() { pdbc.Run(ctx) })
	wg.Go(func() { rm.Run(ctx, rcWorkers) })
	wg.Go(func() { dc.Run(ctx, deploymentWorkers) })
	wg.Go(func() { rc.Run(ctx, replicaSetWorkers) })
	wg.Go(func() { sc.Run(ctx, statefulSetWorkers) })
	wg.Go(func() { dsc.Run(ctx, daemonSetWorkers) })
	wg.Go(factory.Shutdown)
	klog.FromContext(ctx).Info("Started upstream controllers on the first workload", "controllers", []string{"deployment", "replicaset", "statefulset", "daemonset", "replicationcontroller", "disruption"}, "elapsed", time.Since(started))
	return nil
}
