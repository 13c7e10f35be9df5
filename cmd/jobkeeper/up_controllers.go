package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/cronjob"
	namespacecontroller "k8s.io/kubernetes/pkg/controller/namespace"
	"k8s.io/kubernetes/pkg/controller/podgc"

	"jobkeeper.dev/jobkeeper/pkg/controlplane"
	"jobkeeper.dev/jobkeeper/pkg/manager"
)

// Settings of the upstream controllers `up` runs beside jobkeeper's.
const (
	// namespaceWorkers and namespaceResync are kube-controller-manager's
	// defaults (--concurrent-namespace-syncs, --namespace-sync-period).
	namespaceWorkers = 10
	namespaceResync  = 5 * time.Minute
	// cronJobWorkers is kube-controller-manager's --concurrent-cron-job-syncs.
	cronJobWorkers = 5
	// terminatedPodGCThreshold is kube-controller-manager's
	// --terminated-pod-gc-threshold: past this many terminated pods, the
	// oldest are deleted.
	terminatedPodGCThreshold = 12500
)

// runLocalControllers is the upComponent that runs upstream's namespace,
// CronJob and pod garbage collection controllers as libraries, as
// kube-controller-manager does: namespace deletion finishes (finalizers
// honoured), CronJobs create Jobs, which jobkeeper's Job controller runs, and
// pods that no node will ever finish (bound to a node that is gone, or
// deleted before they were scheduled) are marked Failed and deleted, as are
// the oldest terminated pods past the threshold.
//
// The pod garbage collector's package links the kubelet's eviction package
// and, through it, cadvisor and the containerd API types: 19 more modules in
// go.mod and 3.4 MB (2%) more binary, none of it run (docs/architecture.md).
func runLocalControllers(ctx context.Context, cp *controlplane.ControlPlane) (func(), error) {
	cfg := rest.CopyConfig(cp.AdminConfig())
	cfg.UserAgent = "jobkeeper-up-controllers"
	cfg.QPS, cfg.Burst = 100, 200
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	metadataClient, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	// The pod garbage collector needs a pod cache and the CronJob controller
	// a Job cache: the manager's transform keeps them as slim as jobkeeper's
	// own (podgc reads only metadata, nodeName, phase, reason and
	// conditions; the CronJob controller never reads a finished Job's
	// template).
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(manager.CacheTransform))
	ns := namespacecontroller.NewNamespaceController(ctx, client, metadataClient,
		client.Discovery().ServerPreferredNamespacedResources, factory.Core().V1().Namespaces(), namespaceResync, corev1.FinalizerKubernetes)
	cj, err := cronjob.NewControllerV2(ctx, factory.Batch().V1().Jobs(), factory.Batch().V1().CronJobs(), client)
	if err != nil {
		return nil, fmt.Errorf("CronJob controller: %w", err)
	}
	gc := podgc.NewPodGC(ctx, client, factory.Core().V1().Pods(), factory.Core().V1().Nodes(), terminatedPodGCThreshold)
	factory.Start(ctx.Done())
	done := make(chan struct{})
	go func() {
		defer close(done)
		finished := make(chan struct{}, 3)
		go func() { ns.Run(ctx, namespaceWorkers); finished <- struct{}{} }()
		go func() { cj.Run(ctx, cronJobWorkers); finished <- struct{}{} }()
		go func() { gc.Run(ctx); finished <- struct{}{} }()
		for range 3 {
			<-finished
		}
		factory.Shutdown()
	}()
	klog.FromContext(ctx).Info("Started upstream controllers", "controllers", []string{"namespace", "cronjob", "podgc"})
	return func() { <-done }, nil
}
