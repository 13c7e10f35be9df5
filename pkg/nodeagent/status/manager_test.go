package status

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestSetStampsObservedGeneration: every status the manager writes carries
// the pod's generation as its observedGeneration, as the kubelet's do, and
// a status that already says a later one keeps it.
func TestSetStampsObservedGeneration(t *testing.T) {
	for _, tc := range []struct {
		name       string
		generation int64
		observed   int64
		want       int64
	}{
		{name: "the pod's generation", generation: 2, want: 2},
		{name: "never lowered", generation: 2, observed: 5, want: 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1", Generation: tc.generation}}
			client := fake.NewClientset(pod)
			m := NewManager(client)
			desired := &corev1.PodStatus{Phase: corev1.PodRunning, ObservedGeneration: tc.observed}
			m.Set(pod, desired)
			if err := m.sync(ctx, pod.UID); err != nil {
				t.Fatal(err)
			}
			got, err := client.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Status.ObservedGeneration != tc.want || got.Status.Phase != corev1.PodRunning {
				t.Errorf("written status: phase %s observedGeneration %d, want Running and %d", got.Status.Phase, got.Status.ObservedGeneration, tc.want)
			}
			if desired.ObservedGeneration != tc.observed {
				t.Errorf("Set changed the caller's status (observedGeneration %d)", desired.ObservedGeneration)
			}
		})
	}
}
