package e2e

import (
	"context"
	"regexp"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/test/builder"
)

// TestUpGangScheduling runs up with the alpha gates of gang scheduling
// (up --feature-gates=GenericWorkload=true,GangScheduling=true,
// WorkloadWithJob=true): an Indexed Job of 4 pods in parallel gets its
// Workload and PodGroup, its pods name the PodGroup, and it completes; a
// gang of 4 whose pods fit the node one by one but not all together is
// not started at all, every pod left Pending.
func TestUpGangScheduling(t *testing.T) {
	ctx := context.Background()
	up, c, _ := startUp(t, t.TempDir(), "--feature-gates=GenericWorkload=true,GangScheduling=true,WorkloadWithJob=true")
	defer up.stop(t)
	up.waitForOutput(t, regexp.MustCompile(`Feature gates not at their v1.36 defaults .*: GangScheduling=true,GenericWorkload=true,WorkloadWithJob=true`), 10*time.Second)
	ns := "default"

	job, err := c.BatchV1().Jobs(ns).Create(ctx, builder.MakeJob("gang", ns).Indexed().Parallelism(4).Completions(4).
		Command("sh", "-c", "echo index $JOB_COMPLETION_INDEX").Obj(), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, c, ns, job.Name, "completed", hasCondition(batchv1.JobComplete))
	wls, err := c.SchedulingV1alpha2().Workloads(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(wls.Items) != 1 {
		t.Fatalf("Workloads: %v (%v), want the Job's one", wls, err)
	}
	pgs, err := c.SchedulingV1alpha2().PodGroups(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(pgs.Items) != 1 {
		t.Fatalf("PodGroups: %v (%v), want the Job's one", pgs, err)
	}
	if g := pgs.Items[0].Spec.SchedulingPolicy.Gang; g == nil || g.MinCount != 4 {
		t.Errorf("PodGroup policy %+v, want a gang of minCount 4", pgs.Items[0].Spec.SchedulingPolicy)
	}
	pods := podsOf(t, c, job)
	if len(pods) != 4 {
		t.Errorf("%d pods, want 4", len(pods))
	}
	for _, p := range pods {
		if g := p.Spec.SchedulingGroup; g == nil || ptr.Deref(g.PodGroupName, "") != pgs.Items[0].Name {
			t.Errorf("pod %s names %v, want PodGroup %s", p.Name, g, pgs.Items[0].Name)
		}
	}

	// Deleted in the foreground (as the TTL controller deletes), the Job
	// goes with its PodGroup and Workload: the PodGroup's protection
	// finalizer is lifted once no pod uses it.
	if err := c.BatchV1().Jobs(ns).Delete(ctx, job.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, nodeTimeout, true, func(ctx context.Context) (bool, error) {
		_, jerr := c.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{})
		pgs, err := c.SchedulingV1alpha2().PodGroups(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		wls, err := c.SchedulingV1alpha2().Workloads(ns).List(ctx, metav1.ListOptions{})
		return err == nil && apierrors.IsNotFound(jerr) && len(pgs.Items) == 0 && len(wls.Items) == 0, nil
	}); err != nil {
		pgs, _ := c.SchedulingV1alpha2().PodGroups(ns).List(ctx, metav1.ListOptions{})
		t.Fatalf("the gang Job, deleted in the foreground, did not go with its PodGroup and Workload: PodGroups left %+v", pgs)
	}

	// Each pod asks for 40% of the node's CPU: one fits, two fit, four
	// do not.
	node, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(node.Items) != 1 {
		t.Fatalf("nodes: %v (%v)", node, err)
	}
	milli := node.Items[0].Status.Allocatable.Cpu().MilliValue() * 4 / 10
	big := builder.MakeJob("too-big", ns).Indexed().Parallelism(4).Completions(4).Command("sleep", "1").Obj()
	big.Spec.Template.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(milli, resource.DecimalSI)}
	if _, err := c.BatchV1().Jobs(ns).Create(ctx, big, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var last []corev1.Pod
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		last = podsOf(t, c, big)
		for _, p := range last {
			if p.Spec.NodeName != "" || p.Status.Phase != corev1.PodPending {
				t.Fatalf("pod %s of a gang that cannot fit was bound (%q, %s): %s", p.Name, p.Spec.NodeName, p.Status.Phase, describePods(last))
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	if len(last) != 4 {
		t.Errorf("%d pods of the gang that cannot fit, want 4 Pending: %s", len(last), describePods(last))
	}
	t.Logf("gang of 4 × %dm CPU on a node of %s: all 4 Pending for 20s", milli, node.Items[0].Status.Allocatable.Cpu())
}
