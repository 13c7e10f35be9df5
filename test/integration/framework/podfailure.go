package framework

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// PodFailure describes how a pod failed, as the kubelet would report it.
type PodFailure struct {
	// ExitCodes are the exit codes of the named containers or init
	// containers. A regular container not listed exits with 1; an init
	// container not listed exits with 0 (it ran before the failure).
	ExitCodes map[string]int32
	// Conditions are pod conditions (status True) added with the failure,
	// e.g. DisruptionTarget.
	Conditions []corev1.PodConditionType
}

// FailPod writes the pod's status as a kubelet would for a failed pod:
// phase Failed, every container (and init container) terminated with the
// exit code from f, Ready=False, and f's conditions True.
func FailPod(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod, f PodFailure) error {
	p := pod.DeepCopy()
	now := metav1.Now()
	p.Status.Phase = corev1.PodFailed
	terminated := func(name, image string, code int32) corev1.ContainerStatus {
		reason := "Error"
		if code == 0 {
			reason = "Completed"
		}
		return corev1.ContainerStatus{
			Name: name, Image: image, ImageID: image, Started: ptrTo(false),
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: code, Reason: reason, StartedAt: now, FinishedAt: now,
			}},
		}
	}
	p.Status.InitContainerStatuses = nil
	for _, ctr := range p.Spec.InitContainers {
		p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, terminated(ctr.Name, ctr.Image, f.ExitCodes[ctr.Name]))
	}
	p.Status.ContainerStatuses = nil
	for _, ctr := range p.Spec.Containers {
		code, ok := f.ExitCodes[ctr.Name]
		if !ok {
			code = 1
		}
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, terminated(ctr.Name, ctr.Image, code))
	}
	setCondition(p, corev1.PodReady, corev1.ConditionFalse, now)
	for _, t := range f.Conditions {
		setCondition(p, t, corev1.ConditionTrue, now)
	}
	if _, err := c.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{FieldManager: FieldManager}); err != nil {
		return fmt.Errorf("failing pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return nil
}

// MustFailPod is FailPod that fails the test on error.
func MustFailPod(t testing.TB, c kubernetes.Interface, pod *corev1.Pod, f PodFailure) {
	t.Helper()
	if err := FailPod(context.Background(), c, pod, f); err != nil {
		t.Fatal(err)
	}
}
