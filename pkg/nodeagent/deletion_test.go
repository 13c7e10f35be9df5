package nodeagent

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/binder"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/status"
)

// TestDeletedPodsVolumesForgottenAfterItsWorker: a worker that prepares its
// pod's volumes after the deletion handler ran, before it sees its cancel,
// leaves no mark: the pod's volumes are forgotten once the worker ended.
func TestDeletedPodsVolumesForgottenAfterItsWorker(t *testing.T) {
	a, _ := volumeAgent(t, true)
	a.status = status.NewManager(a.client)
	b, err := binder.New(a.binderConfig())
	if err != nil {
		t.Fatal(err)
	}
	a.binder = b
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1"},
		Spec: corev1.PodSpec{Volumes: []corev1.Volume{{
			Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}},
		}}},
	}
	w := &worker{done: make(chan struct{}), cancel: func() {}}
	a.workers[pod.UID] = w

	a.onPodDeleted(pod)
	// The worker's attempt got past its last check of the context.
	if err := a.volumes.Prepare(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	close(w.done)
	a.deletions.Wait()

	if a.volumes.Known(pod.UID) {
		t.Error("the pod's volumes are still known (ready or taken over) after the pod and its worker are gone, want forgotten")
	}
}
