package nodeagent

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	storagehelpers "k8s.io/component-helpers/storage/volume"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/internal/storagetest"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/simulated"
	"jobkeeper.dev/jobkeeper/test/builder"
)

// claimPod is a pod of namespace ns mounting the claim.
func claimPod(name, uid, claim string) *corev1.Pod {
	pod := builder.MakePod(name, "ns").UID(uid).Annotation(simulated.DurationAnnotation, "1h").Obj()
	pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
	}}}
	return pod
}

// TestBinderWaitsForFirstConsumer checks the binder's part of
// WaitForFirstConsumer: a pod using an unbound claim of such a class is not
// bound to the node; its claim gets the selected-node annotation naming the
// node; once the claim is bound (the PersistentVolume controller's and the
// provisioner's part), the pod is bound.
func TestBinderWaitsForFirstConsumer(t *testing.T) {
	class := storagetest.Class("standard", "jobkeeper.dev/local-path", storagev1.VolumeBindingWaitForFirstConsumer)
	claim := storagetest.Claim("data", "standard", corev1.ReadWriteOnce)
	ta := startAgent(t, 10, class, claim, claimPod("p", "up", "data"))
	ctx := context.Background()

	var got *corev1.PersistentVolumeClaim
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		c, err := ta.client.CoreV1().PersistentVolumeClaims("ns").Get(ctx, "data", metav1.GetOptions{})
		got = c
		return err == nil && c.Annotations[storagehelpers.AnnSelectedNode] != "", nil
	}); err != nil {
		t.Fatalf("the claim never got the selected node: %+v", got)
	}
	if n := got.Annotations[storagehelpers.AnnSelectedNode]; n != testNode {
		t.Errorf("selected node %q, want %q", n, testNode)
	}
	if p, _ := ta.client.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{}); p.Spec.NodeName != "" {
		t.Fatal("the pod was bound before its claim")
	}

	boundClaim, pv := storagetest.Bound(got, storagetest.Volume("pv-1", "standard", testNode))
	if _, err := ta.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ta.client.CoreV1().PersistentVolumeClaims("ns").Update(ctx, boundClaim, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ta.waitPod(t, "p", func(p *corev1.Pod) bool { return p.Spec.NodeName == testNode })
}

// TestBinderReadWriteOncePod checks that a second pod of a ReadWriteOncePod
// claim in use is not bound, with the scheduler's reason, and is bound once
// the first pod is gone; a ReadWriteOnce claim is shared by pods of the node.
func TestBinderReadWriteOncePod(t *testing.T) {
	class := storagetest.Class("standard", "jobkeeper.dev/local-path", storagev1.VolumeBindingWaitForFirstConsumer)
	rwop, rwopPV := storagetest.Bound(storagetest.Claim("only", "standard", corev1.ReadWriteOncePod), storagetest.Volume("pv-only", "standard", testNode))
	rwo, rwoPV := storagetest.Bound(storagetest.Claim("shared", "standard", corev1.ReadWriteOnce), storagetest.Volume("pv-shared", "standard", testNode))
	first := claimPod("first", "u1", "only")
	first.CreationTimestamp = metav1.NewTime(t0)
	second := claimPod("second", "u2", "only")
	second.CreationTimestamp = metav1.NewTime(t0.Add(time.Second))
	ta := startAgent(t, 10, class, rwop, rwopPV, rwo, rwoPV, first, second,
		claimPod("shared-1", "u3", "shared"), claimPod("shared-2", "u4", "shared"))

	ta.waitPod(t, "first", func(p *corev1.Pod) bool { return p.Spec.NodeName == testNode })
	ta.waitPod(t, "shared-1", func(p *corev1.Pod) bool { return p.Spec.NodeName == testNode })
	ta.waitPod(t, "shared-2", func(p *corev1.Pod) bool { return p.Spec.NodeName == testNode })
	p := ta.waitPod(t, "second", func(p *corev1.Pod) bool { return len(getCondition(p, corev1.PodScheduled)) == 1 })
	c := getCondition(p, corev1.PodScheduled)[0]
	want := "0/1 nodes are available: 1 node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod."
	if p.Spec.NodeName != "" || c.Status != corev1.ConditionFalse || c.Reason != corev1.PodReasonUnschedulable || c.Message != want {
		t.Fatalf("second pod: node %q, PodScheduled %+v; want unbound, Unschedulable %q", p.Spec.NodeName, c, want)
	}

	if err := ta.client.CoreV1().Pods("ns").Delete(context.Background(), "first", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	ta.waitPod(t, "second", func(p *corev1.Pod) bool { return p.Spec.NodeName == testNode })
}
