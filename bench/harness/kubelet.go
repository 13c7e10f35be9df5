package harness

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// KubeletFieldManager is the field manager of the instant kubelet's writes.
const KubeletFieldManager = "jobkeeper-bench-kubelet"

// InstantKubelet plays the kubelet for the pods of namespace ns: every pod
// that appears Pending (and not being deleted) is written Succeeded at once,
// with a container terminated with exit code 0, by workers goroutines. It
// runs until ctx is done and returns the synced pod informer of ns, which
// callers use to look at the pods without requests of their own. Give it a
// client with a high QPS: it must never be the bottleneck.
func InstantKubelet(ctx context.Context, c kubernetes.Interface, ns string, workers int) (cache.SharedIndexInformer, error) {
	factory := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithNamespace(ns))
	informer := factory.Core().V1().Pods().Informer()
	queue := workqueue.NewTyped[string]()
	enqueue := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok && p.Status.Phase == corev1.PodPending && p.DeletionTimestamp == nil {
			queue.Add(p.Name)
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return nil, fmt.Errorf("watching pods of %s: %w", ns, err)
	}
	factory.Start(ctx.Done())
	go func() {
		<-ctx.Done()
		queue.ShutDown()
		factory.Shutdown()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return nil, fmt.Errorf("pods of %s: cache did not sync", ns)
	}
	logger := klog.FromContext(ctx)
	for range workers {
		go func() {
			for {
				name, quit := queue.Get()
				if quit {
					return
				}
				obj, exists, err := informer.GetStore().GetByKey(ns + "/" + name)
				if err == nil && exists {
					if p := obj.(*corev1.Pod); p.Status.Phase == corev1.PodPending && p.DeletionTimestamp == nil {
						if err := completePod(ctx, c, p); err != nil && ctx.Err() == nil {
							logger.V(2).Info("Completing pod failed, it will be retried on its next update", "pod", klog.KObj(p), "err", err)
						}
					}
				}
				queue.Done(name)
			}
		}()
	}
	return informer, nil
}

// completePod writes pod's status as a kubelet would after its only run
// succeeded.
func completePod(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod) error {
	p := pod.DeepCopy()
	now := metav1.Now()
	p.Status.Phase = corev1.PodSucceeded
	p.Status.StartTime = &now
	p.Status.ContainerStatuses = nil
	for _, ctr := range p.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name:    ctr.Name,
			Image:   ctr.Image,
			ImageID: ctr.Image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now,
			}},
		})
	}
	p.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "PodCompleted", LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, Reason: "PodCompleted", LastTransitionTime: now},
	}
	if _, err := c.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{FieldManager: KubeletFieldManager}); err != nil {
		return fmt.Errorf("completing pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return nil
}
