package controlplane

import (
	"context"
	"fmt"
	"time"

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
	cfg = rest.CopyConfig(cfg)
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

	shared := informers.NewSharedInformerFactory(client, 0)
	meta := metadatainformer.NewSharedInformerFactory(metadataClient, 0)
	started := make(chan struct{})
	gc, err := garbagecollector.NewGarbageCollector(ctx, client, metadataClient, mapper,
		garbagecollector.DefaultIgnoredResources(),
		informerfactory.NewInformerFactory(shared, meta), started)
	if err != nil {
		return nil, nil, fmt.Errorf("creating garbage collector: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		shared.Start(ctx.Done())
		meta.Start(ctx.Done())
		close(started)
		finished := make(chan struct{}, 2)
		go func() { gc.Run(ctx, gcWorkers, time.Minute); finished <- struct{}{} }()
		go func() { gc.Sync(ctx, discoveryClient, gcResyncPeriod); finished <- struct{}{} }()
		<-finished
		<-finished
		shared.Shutdown()
		meta.Shutdown()
	}()
	return done, gc, nil
}

// GarbageCollectorKnows reports whether the garbage collector's graph has
// the object with uid: only then does it know the object's owners, so a test
// that deletes an owner with orphan propagation right after creating a
// dependent must wait for this (a dependent the collector sees only after its
// owner is gone looks dangling, and is deleted, as upstream does).
func (cp *ControlPlane) GarbageCollectorKnows(uid types.UID) bool {
	return cp.gc != nil && cp.gc.GraphHasUID(uid)
}
