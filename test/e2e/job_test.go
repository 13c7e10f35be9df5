package e2e

import (
	"context"
	"regexp"
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
// complete with exact counts and no finalizer left, while a plain Job, which
// up's own Job controller would have managed, is left alone.
func TestControllerRunsManagedJob(t *testing.T) {
	const managedBy = "e2e.example.com/jobs"
	up, c, kc := startUp(t, t.TempDir(), "--controllers=")
	p := startBinary(t, leanBinary, "controller", "--kubeconfig", kc, "--managed-by", managedBy, "--controllers=job",
		"--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", "127.0.0.1:0", "--leader-elect=false")
	ctx := context.Background()
	// Printed after the kubeconfig lines that startUp waited for.
	up.waitForOutput(t, regexp.MustCompile(`None of jobkeeper's controllers run \(--controllers=\)`), 10*time.Second)
	// A plain Job, which up's own Job controller would manage: nothing does.
	unclaimed, err := c.BatchV1().Jobs("default").Create(ctx, builder.MakeJob("unclaimed", "default").Obj(), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
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
	// By now the managed Job has run to the end; the plain one was left alone.
	if j, err := c.BatchV1().Jobs("default").Get(ctx, unclaimed.Name, metav1.GetOptions{}); err != nil || j.Status.StartTime != nil || len(j.Status.Conditions) != 0 {
		t.Errorf("the plain Job was acted on with --controllers=: %+v, %v", j.Status, err)
	}
	if pods, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + unclaimed.Name}); err != nil || len(pods.Items) != 0 {
		t.Errorf("the plain Job has pods with --controllers=: %d, %v", len(pods.Items), err)
	}
	p.stop(t)
	up.stop(t)
}
