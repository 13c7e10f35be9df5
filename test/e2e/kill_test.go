package e2e

import (
	"context"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/simulated"
	"jobkeeper.dev/jobkeeper/test/builder"
)

// TestUpKilledWhileJobRuns kills `jobkeeper up` with SIGKILL three times
// while a Job runs on its node agent (simulated runtime), restarting it on
// the same data directory each time. The Job must then complete exactly:
// status.succeeded equals completions and the pods that succeeded, failed
// equals the pods that failed, and no pod keeps the tracking finalizer.
func TestUpKilledWhileJobRuns(t *testing.T) {
	const completions = 60
	dir := t.TempDir()
	// Pods running when `up` dies fail (their processes die with it); a
	// short failure backoff keeps the Job from waiting the default minutes
	// before replacing ten failures at once.
	args := []string{"--runtime", "simulated", "--pod-failure-backoff=100ms", "--max-pod-failure-backoff=1s"}
	up, c, _ := startUp(t, dir, args...)
	job := builder.MakeJob("killed", "default").Completions(completions).Parallelism(10).BackoffLimit(1000).
		PodAnnotation(simulated.DurationAnnotation, "400ms").Obj()
	if _, err := c.BatchV1().Jobs("default").Create(context.Background(), job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		time.Sleep(time.Duration(1200+500*i) * time.Millisecond)
		syscall.Kill(-up.cmd.Process.Pid, syscall.SIGKILL)
		<-up.exited
		up, c, _ = startUp(t, dir, args...)
	}
	defer up.stop(t)
	var got *batchv1.Job
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		j, err := c.BatchV1().Jobs("default").Get(ctx, job.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		got = j
		return hasCondition(batchv1.JobComplete)(j) || hasCondition(batchv1.JobFailed)(j), nil
	})
	if err != nil {
		t.Fatalf("the Job did not finish after the kills: %+v", got.Status)
	}
	var succeeded, failed, finalizers int
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + job.Name})
		if err != nil {
			return false, nil
		}
		succeeded, failed, finalizers = 0, 0, 0
		for _, p := range pods.Items {
			switch p.Status.Phase {
			case corev1.PodSucceeded:
				succeeded++
			case corev1.PodFailed:
				failed++
			}
			for _, f := range p.Finalizers {
				if f == batchv1.JobTrackingFinalizer {
					finalizers++
				}
			}
		}
		return finalizers == 0, nil
	})
	if err != nil {
		t.Errorf("%d pods still hold the tracking finalizer", finalizers)
	}
	t.Logf("after 3 kills: status succeeded %d failed %d; pods succeeded %d failed %d", got.Status.Succeeded, got.Status.Failed, succeeded, failed)
	if !hasCondition(batchv1.JobComplete)(got) {
		t.Fatalf("the Job failed: %v", got.Status.Conditions)
	}
	if got.Status.Succeeded != completions || succeeded != completions {
		t.Errorf("status.succeeded %d, pods succeeded %d, want both %d", got.Status.Succeeded, succeeded, completions)
	}
	if int(got.Status.Failed) != failed {
		t.Errorf("status.failed %d, but %d pods failed", got.Status.Failed, failed)
	}
}
