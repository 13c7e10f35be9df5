package main

import (
	"context"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/certificates/rootcacertpublisher"
	"k8s.io/kubernetes/pkg/controller/cronjob"
	namespacecontroller "k8s.io/kubernetes/pkg/controller/namespace"
	"k8s.io/kubernetes/pkg/controller/podgc"
	"k8s.io/kubernetes/pkg/controller/scheduling/podgroupprotection"
	serviceaccountcontroller "k8s.io/kubernetes/pkg/controller/serviceaccount"
	"k8s.io/kubernetes/pkg/features"

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
	// serviceAccountWorkers and rootCAPublisherWorkers are what
	// kube-controller-manager runs its serviceaccount and
	// root-ca-cert-publisher controllers with.
	serviceAccountWorkers  = 1
	rootCAPublisherWorkers = 1
	// podGroupProtectionWorkers is kube-controller-manager's (fixed).
	podGroupProtectionWorkers = 1
)

// runLocalControllers is the upComponent that runs upstream's namespace,
// CronJob, pod garbage collection, ServiceAccount and root CA publisher
// controllers as libraries, as kube-controller-manager does: namespace
// deletion finishes (finalizers honoured), CronJobs create Jobs, which
// jobkeeper's Job controller runs, pods that no node will ever finish (bound
// to a node that is gone, or deleted before they were scheduled) are marked
// Failed and deleted, as are the oldest terminated pods past the threshold,
// every namespace gets the "default" ServiceAccount and the
// kube-root-ca.crt ConfigMap holding the CA that verifies the apiserver, and
// PersistentVolumeClaims are bound and protected (volumeControllers).
//
// The pod garbage collector's package links the kubelet's eviction package
// and, through it, cadvisor and the containerd API types: 19 more modules in
// go.mod and 3.4 MB (2%) more binary, none of it run (docs/architecture.md).
func runLocalControllers(ctx context.Context, cp *controlplane.ControlPlane) (func(), error) {
	// kube-controller-manager's default --kube-api-content-type; the
	// metadata client picks its own.
	cfg := controlplane.ProtobufConfig(cp.AdminConfig())
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
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(keepClaimVolumes))
	ns := namespacecontroller.NewNamespaceController(ctx, client, metadataClient,
		client.Discovery().ServerPreferredNamespacedResources, factory.Core().V1().Namespaces(), namespaceResync, corev1.FinalizerKubernetes)
	cj, err := cronjob.NewControllerV2(ctx, factory.Batch().V1().Jobs(), factory.Batch().V1().CronJobs(), client)
	if err != nil {
		return nil, fmt.Errorf("CronJob controller: %w", err)
	}
	gc := podgc.NewPodGC(ctx, client, factory.Core().V1().Pods(), factory.Core().V1().Nodes(), terminatedPodGCThreshold)
	sa, err := serviceaccountcontroller.NewServiceAccountsController(klog.FromContext(ctx),
		factory.Core().V1().ServiceAccounts(), factory.Core().V1().Namespaces(), client,
		serviceaccountcontroller.DefaultServiceAccountsControllerOptions())
	if err != nil {
		return nil, fmt.Errorf("ServiceAccount controller: %w", err)
	}
	rootCA, err := os.ReadFile(cp.PKI().CACert())
	if err != nil {
		return nil, fmt.Errorf("reading the cluster CA for kube-root-ca.crt: %w", err)
	}
	// The publisher only reads the kube-root-ca.crt ConfigMaps, so its
	// informer lists and watches those alone rather than caching every
	// ConfigMap of the cluster as kube-controller-manager's does.
	caFactory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTransform(manager.CacheTransform),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", rootcacertpublisher.RootCACertConfigMapName).String()
		}))
	publisher, err := rootcacertpublisher.NewPublisher(caFactory.Core().V1().ConfigMaps(), factory.Core().V1().Namespaces(), client, rootCA)
	if err != nil {
		return nil, fmt.Errorf("root CA publisher: %w", err)
	}
	volumes, err := volumeControllers(ctx, client, factory)
	if err != nil {
		return nil, err
	}
	names := []string{"namespace", "cronjob", "podgc", "serviceaccount", "root-ca-cert-publisher", "persistentvolume-binder", "pvc-protection", "pv-protection"}
	if utilfeature.DefaultFeatureGate.Enabled(features.GenericWorkload) {
		// With GenericWorkload the apiserver's PodGroupProtection
		// admission plugin puts a finalizer on every PodGroup, which only
		// this controller of kube-controller-manager's removes: without
		// it no PodGroup, and no Job deleted in the foreground with its
		// gang, would ever go.
		pg, err := podgroupprotection.NewPodGroupProtectionController(klog.FromContext(ctx),
			factory.Scheduling().V1alpha2().PodGroups(), factory.Core().V1().Pods(), client)
		if err != nil {
			return nil, fmt.Errorf("PodGroup protection controller: %w", err)
		}
		volumes = append(volumes, func() { pg.Run(ctx, podGroupProtectionWorkers) })
		names = append(names, "podgroup-protection")
	}
	factory.Start(ctx.Done())
	caFactory.Start(ctx.Done())
	runs := []func(){
		func() { ns.Run(ctx, namespaceWorkers) },
		func() { cj.Run(ctx, cronJobWorkers) },
		func() { gc.Run(ctx) },
		func() { sa.Run(ctx, serviceAccountWorkers) },
		func() { publisher.Run(ctx, rootCAPublisherWorkers) },
	}
	runs = append(runs, volumes...)
	done := make(chan struct{})
	go func() {
		defer close(done)
		finished := make(chan struct{}, len(runs))
		for _, run := range runs {
			go func() { run(); finished <- struct{}{} }()
		}
		for range runs {
			<-finished
		}
		factory.Shutdown()
		caFactory.Shutdown()
	}()
	klog.FromContext(ctx).Info("Started upstream controllers", "controllers", names)
	waitDefaultServiceAccount(ctx, client, defaultServiceAccountWait)
	return func() { <-done }, nil
}

// defaultServiceAccountWait bounds how long up waits, before it says it is
// up, for the default namespace's default ServiceAccount.
const defaultServiceAccountWait = 30 * time.Second

// waitDefaultServiceAccount waits until the ServiceAccount "default" of the
// namespace "default" exists: with the ServiceAccount admission plugin on, a
// pod created before it would be refused ("serviceaccount default not
// found"), and `kubectl run` right after "jobkeeper is up" must work. Past
// limit it logs and goes on (the controller will create it).
func waitDefaultServiceAccount(ctx context.Context, client kubernetes.Interface, limit time.Duration) {
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, limit, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		klog.FromContext(ctx).Info("The default ServiceAccount of the default namespace does not exist yet; pods there are refused until it does", "waited", limit)
	}
}
