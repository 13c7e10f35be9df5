package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	persistentvolumecontroller "k8s.io/kubernetes/pkg/controller/volume/persistentvolume"
	"k8s.io/kubernetes/pkg/controller/volume/pvcprotection"
	"k8s.io/kubernetes/pkg/controller/volume/pvprotection"

	"jobkeeper.dev/jobkeeper/pkg/controlplane"
	"jobkeeper.dev/jobkeeper/pkg/localpath"
	"jobkeeper.dev/jobkeeper/pkg/manager"
)

// Settings of upstream's volume controllers under `up`.
const (
	// pvBinderSyncPeriod is kube-controller-manager's
	// --pvclaimbinder-sync-period.
	pvBinderSyncPeriod = 15 * time.Second
	// pvcProtectionWorkers and pvProtectionWorkers are what
	// kube-controller-manager runs the protection controllers with.
	pvcProtectionWorkers = 1
	pvProtectionWorkers  = 1
)

// volumesDirName is the directory of the data directory that holds the
// local-path volumes (pkg/controlplane's reset removes it).
const volumesDirName = "volumes"

// volumeControllers returns upstream's PersistentVolume controller (the
// binder: it binds claims to volumes and sends claims of a class with an
// external provisioner to that provisioner) and the pvc-protection and
// pv-protection controllers (which lift the kubernetes.io/pvc-protection
// and pv-protection finalizers the apiserver's admission adds, once no pod
// uses the claim and no claim the volume), on factory's informers, as
// kube-controller-manager runs them. factory's pods must keep their claim
// volumes (keepClaimVolumes).
func volumeControllers(ctx context.Context, client kubernetes.Interface, factory informers.SharedInformerFactory) ([]func(), error) {
	binder, err := persistentvolumecontroller.NewController(ctx, persistentvolumecontroller.ControllerParameters{
		KubeClient:     client,
		SyncPeriod:     pvBinderSyncPeriod,
		VolumeInformer: factory.Core().V1().PersistentVolumes(),
		ClaimInformer:  factory.Core().V1().PersistentVolumeClaims(),
		ClassInformer:  factory.Storage().V1().StorageClasses(),
		PodInformer:    factory.Core().V1().Pods(),
		NodeInformer:   factory.Core().V1().Nodes(),
		// No in-tree plugin: every class is provisioned, and every volume
		// deleted, by its external provisioner (local-path's here).
		EnableDynamicProvisioning: true,
	})
	if err != nil {
		return nil, fmt.Errorf("PersistentVolume controller: %w", err)
	}
	logger := klog.FromContext(ctx)
	pvc, err := pvcprotection.NewPVCProtectionController(logger, factory.Core().V1().PersistentVolumeClaims(), factory.Core().V1().Pods(), client)
	if err != nil {
		return nil, fmt.Errorf("PVC protection controller: %w", err)
	}
	pv := pvprotection.NewPVProtectionController(logger, factory.Core().V1().PersistentVolumes(), client)
	return []func(){
		func() { binder.Run(ctx) },
		func() { pvc.Run(ctx, pvcProtectionWorkers) },
		func() { pv.Run(ctx, pvProtectionWorkers) },
	}, nil
}

// keepClaimVolumes is manager.CacheTransform that keeps a pod's
// persistentVolumeClaim and ephemeral volumes (name and source only), which
// the volume controllers index pods by; it drops the others (every pod has
// the ServiceAccount's token volume), so pods without claims cost nothing
// more in the cache.
func keepClaimVolumes(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return manager.CacheTransform(obj)
	}
	var claims []corev1.Volume
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.PersistentVolumeClaim != nil:
			claims = append(claims, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: v.PersistentVolumeClaim}})
		case v.Ephemeral != nil:
			// The controllers need only the volume's name to name its
			// claim (<pod>-<volume>); the template is dropped.
			claims = append(claims, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}})
		}
	}
	out, err := manager.CacheTransform(pod)
	if err != nil {
		return nil, err
	}
	out.(*corev1.Pod).Spec.Volumes = claims
	return out, nil
}

// volumesComponent returns the upComponent that runs the local-path
// provisioner: the default StorageClass "standard", whose claims get
// directories under <data-dir>/volumes on the node named f.opts.NodeName.
func (f *nodeAgentFlags) volumesComponent() upComponent {
	return func(ctx context.Context, cp *controlplane.ControlPlane) (func(), error) {
		node := f.opts.NodeName
		if node == "" {
			// The node agent's default.
			h, err := os.Hostname()
			if err != nil {
				return nil, fmt.Errorf("node name not set and host name unknown: %w", err)
			}
			node = h
		}
		cfg := rest.CopyConfig(cp.AdminConfig())
		cfg.UserAgent = "jobkeeper-local-path-provisioner"
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		// Before up says it is ready, so that the DefaultStorageClass
		// admission plugin gives the class to the first claims.
		if err := localpath.EnsureStorageClass(ctx, client, refuseFieldManager); err != nil {
			return nil, err
		}
		if note := localpath.OlderClass(ctx, client); note != "" {
			klog.FromContext(ctx).Info(note, "storageClass", localpath.StorageClassName)
		}
		opts := localpath.Options{Root: filepath.Join(cp.DataDir(), volumesDirName), NodeName: node}
		done := make(chan struct{})
		go func() {
			defer close(done)
			localpath.Run(ctx, client, opts)
		}()
		klog.FromContext(ctx).Info("Started the local-path provisioner", "storageClass", localpath.StorageClassName, "root", opts.Root)
		return func() { <-done }, nil
	}
}
