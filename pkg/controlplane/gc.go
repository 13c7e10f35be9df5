package controlplane

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/controller-manager/pkg/informerfactory"
	"k8s.io/kubernetes/pkg/controller/garbagecollector"
)

const (
	// gcWorkers is the number of garbage collector workers (kube-controller-manager's default).
	gcWorkers = 20
	// gcResyncPeriod is how often the collector re-reads discovery to watch new
	// resources (custom resources created while running).
	gcResyncPeriod = 10 * time.Second
)

// runGarbageCollector runs the upstream garbage collector against cfg until
// ctx is done. Without it, foreground deletions never finish and background
// deletions leave dependents behind.
func runGarbageCollector(ctx context.Context, cfg *rest.Config) (<-chan struct{}, *garbagecollector.GarbageCollector, error) {
	cfg = ProtobufConfig(cfg)
	cfg.UserAgent = "jobkeeper-garbage-collector"
	// Each deletion is a GET and a DELETE; give the collector room.
	cfg.QPS, cfg.Burst = 400, 800
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("garbage collector client: %w", err)
	}
	metadataClient, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("garbage collector metadata client: %w", err)
	}
	discoveryClient, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("garbage collector discovery client: %w", err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(discoveryClient))

	// The collector reads only object metadata (owners, finalizers,
	// deletion state). kube-controller-manager hands it the typed informers
	// it shares with its other controllers, and metadata-only informers
	// for the rest; here no other controller shares its informers, so it
	// watches metadata only, without managed fields. Typed informers would
	// hold a second full copy of every pod and cost the apiserver one more
	// full-object watch of each built-in resource.
	metaFactory := metadatainformer.NewSharedInformerFactoryWithOptions(metadataClient, 0,
		metadatainformer.WithTransform(dropManagedFields))
	started := make(chan struct{})
	gc, err := garbagecollector.NewGarbageCollector(ctx, client, metadataClient, mapper,
		garbagecollector.DefaultIgnoredResources(),
		metadataOnly{metaFactory}, started)
	if err != nil {
		return nil, nil, fmt.Errorf("creating garbage collector: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		metaFactory.Start(ctx.Done())
		close(started)
		finished := make(chan struct{}, 2)
		go func() { gc.Run(ctx, gcWorkers, time.Minute); finished <- struct{}{} }()
		go func() { gc.Sync(ctx, discoveryClient, gcResyncPeriod); finished <- struct{}{} }()
		<-finished
		<-finished
		metaFactory.Shutdown()
	}()
	return done, gc, nil
}

// metadataOnly gives the garbage collector metadata-only informers for
// every resource, built-in ones included (informerfactory.InformerFactory).
type metadataOnly struct {
	metadatainformer.SharedInformerFactory
}

// ForResource returns the metadata informer of resource.
func (m metadataOnly) ForResource(resource schema.GroupVersionResource) (informers.GenericInformer, error) {
	return m.SharedInformerFactory.ForResource(resource), nil
}

var _ informerfactory.InformerFactory = metadataOnly{}

// dropManagedFields removes managedFields from a cached object's metadata:
// the collector never reads them, and they are most of a pod's metadata.
func dropManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// GarbageCollectorKnows reports whether the garbage collector's graph has
// the object with uid: only then does it know the object's owners, so a test
// that deletes an owner with orphan propagation right after creating a
// dependent must wait for this (a dependent the collector sees only after its
// owner is gone looks dangling, and is deleted, as upstream does).
func (cp *ControlPlane) GarbageCollectorKnows(uid types.UID) bool {
	return cp.gc != nil && cp.gc.GraphHasUID(uid)
}
