package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"jobkeeper.dev/jobkeeper/test/builder"
)

// busyApps is how many different app labels the busy workload's pods of no
// Job carry (as Deployments' pods would).
const busyApps = 100

// createRunningPods creates n pods named p-<i> in ns and writes them Running
// as a kubelet would (a start time, a running container, Ready). When
// owner is nil they belong to no Job and carry an app label; otherwise
// owner gives pod i its labels, controller reference and finalizers.
func createRunningPods(ctx context.Context, c kubernetes.Interface, ns string, n int, owner func(p *corev1.Pod)) error {
	spec := builder.MakeJob("template", ns).Obj().Spec.Template.Spec
	started := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	return parallelDo(ctx, n, func(ctx context.Context, i int) error {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%05d", i), Namespace: ns},
			Spec:       *spec.DeepCopy(),
		}
		p.Spec.NodeName = "bench-node"
		if owner == nil {
			p.Labels = map[string]string{"app": fmt.Sprintf("app-%02d", i%busyApps), "tier": "web"}
		} else {
			owner(p)
		}
		created, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating pod %s: %w", p.Name, err)
		}
		created.Status = corev1.PodStatus{
			Phase:     corev1.PodRunning,
			StartTime: &started,
			PodIP:     "10.0.0.1",
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: started},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: started},
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: started},
			},
		}
		for _, ctr := range created.Spec.Containers {
			created.Status.ContainerStatuses = append(created.Status.ContainerStatuses, corev1.ContainerStatus{
				Name: ctr.Name, Image: ctr.Image, ImageID: "sha256:0123456789abcdef", ContainerID: "containerd://" + created.Name,
				Ready: true, Started: func() *bool { b := true; return &b }(),
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
			})
		}
		if _, err := c.CoreV1().Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("writing pod %s Running: %w", p.Name, err)
		}
		return nil
	})
}
