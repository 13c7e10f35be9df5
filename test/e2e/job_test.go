package e2e

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"jobkeeper.dev/jobkeeper/test/builder"
)

// TestControllerRunsManagedJob runs the image's lean binary,
// `jobkeeper-controller controller --kubeconfig` (the chart's arguments),
// against a control plane from `jobkeeper up` (whose own controllers are
// off; its node agent runs the pods) and waits for a managed Job to
// complete with exact counts and no finalizer left.
func TestControllerRunsManagedJob(t *testing.T) {
	const managedBy = "e2e.example.com/jobs"
	up, c, kc := startUp(t, t.TempDir(), "--controllers=")
	p := startBinary(t, leanBinary, "controller", "--kubeconfig", kc, "--managed-by", managedBy, "--controllers=job",
		"--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", "127.0.0.1:0", "--leader-elect=false")
	ctx := context.Background()
	job := builder.MakeJob("e2e-job", "default").ManagedBy(managedBy).Parallelism(2).Completions(3).Obj()
	if _, err := c.BatchV1().Jobs("default").Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *batchv1.Job
	deadline := time.Now().Add(90 * time.Second)
	for {
		j, err := c.BatchV1().Jobs("default").Get(ctx, job.Name, metav1.GetOptions{})
		if err == nil {
			got = j
			done := false
			for _, cond := range j.Status.Conditions {
				if (cond.Type == batchv1.JobComplete || cond.Type == batchv1.JobFailed) && cond.Status == corev1.ConditionTrue {
					done = true
				}
			}
			if done {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Job did not finish; last status %+v\ncontroller output:\n%s", got.Status, p.output())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got.Status.Succeeded != 3 || got.Status.Failed != 0 || got.Status.CompletionTime == nil {
		t.Errorf("status %+v: want 3 succeeded, 0 failed, a completion time", got.Status)
	}
	pods, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + job.Name})
	if err != nil {
		t.Fatal(err)
	}
	for _, pod := range pods.Items {
		for _, f := range pod.Finalizers {
			if f == batchv1.JobTrackingFinalizer {
				t.Errorf("pod %s still holds %s", pod.Name, f)
			}
		}
	}
	p.stop(t)
	up.stop(t)
}
