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

	"jobkeeper.dev/jobkeeper/pkg/controlplane"
)

// Settings of the upstream controllers `up` runs beside jobkeeper's.
const (
	// namespaceWorkers and namespaceResync are kube-controller-manager's
	// defaults (--concurrent-namespace-syncs, --namespace-sync-period).
	namespaceWorkers = 10
	namespaceResync  = 5 * time.Minute
	// cronJobWorkers is kube-controller-manager's --concurrent-cron-job-syncs.
	cronJobWorkers = 5
)

// runLocalControllers is the upComponent that runs upstream's namespace and
// CronJob controllers as libraries, as kube-controller-manager does:
// namespace deletion finishes (finalizers honoured), and CronJobs create
// Jobs, which jobkeeper's Job controller runs.
//
// Upstream's pod garbage collector is not run: its package links the
// kubelet's eviction manager and, through it, cadvisor and the containerd
// API (about 60 more packages and 18 modules).
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
	factory := informers.NewSharedInformerFactory(client, 0)
	ns := namespacecontroller.NewNamespaceController(ctx, client, metadataClient,
		client.Discovery().ServerPreferredNamespacedResources, factory.Core().V1().Namespaces(), namespaceResync, corev1.FinalizerKubernetes)
	cj, err := cronjob.NewControllerV2(ctx, factory.Batch().V1().Jobs(), factory.Batch().V1().CronJobs(), client)
	if err != nil {
		return nil, fmt.Errorf("CronJob controller: %w", err)
	}
	factory.Start(ctx.Done())
	done := make(chan struct{})
	go func() {
		defer close(done)
		finished := make(chan struct{}, 2)
		go func() { ns.Run(ctx, namespaceWorkers); finished <- struct{}{} }()
		go func() { cj.Run(ctx, cronJobWorkers); finished <- struct{}{} }()
		for range 2 {
			<-finished
		}
		factory.Shutdown()
	}()
	klog.FromContext(ctx).Info("Started upstream controllers", "controllers", []string{"namespace", "cronjob"})
	return func() { <-done }, nil
}
