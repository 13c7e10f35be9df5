package e2e

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/test/builder"
)

// TestUpDeletesNamespaces: deleting a namespace that holds a running Job
// and its pods finishes (upstream's namespace controller).
func TestUpDeletesNamespaces(t *testing.T) {
	ctx := context.Background()
	up, c, _ := startUp(t, t.TempDir())
	defer up.stop(t)
	ns := "doomed"
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A PID 1 that handles SIGTERM, so the pods' deletion does not take the
	// grace period.
	job, err := c.BatchV1().Jobs(ns).Create(ctx, builder.MakeJob("sleeper", ns).Parallelism(2).Completions(2).Command("sh", "-c", "trap 'exit 143' TERM; sleep 300 & wait").Obj(), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		j, err := c.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{})
		return err == nil && j.Status.Active == 2, nil
	})
	if err != nil {
		t.Fatalf("the Job's pods did not start: %v", err)
	}
	if err := c.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		n, _ := c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		t.Fatalf("namespace %s was not deleted: %+v", ns, n.Status)
	}
}

// TestUpRunsCronJobs: a CronJob creates a Job within 70 s (upstream's
// CronJob controller), jobkeeper runs it, the CronJob's status follows,
// and the Job template's TTL applies.
func TestUpRunsCronJobs(t *testing.T) {
	ctx := context.Background()
	up, c, _ := startUp(t, t.TempDir())
	defer up.stop(t)
	tmpl := builder.MakeJob("x", "default").Command("true").Obj()
	tmpl.Spec.TTLSecondsAfterFinished = ptr.To[int32](0)
	cj := &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: "every-minute", Namespace: "default"},
		Spec: batchv1.CronJobSpec{
			Schedule:                   "* * * * *",
			SuccessfulJobsHistoryLimit: ptr.To[int32](1),
			JobTemplate:                batchv1.JobTemplateSpec{Spec: tmpl.Spec},
		},
	}
	if _, err := c.BatchV1().CronJobs("default").Create(ctx, cj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *batchv1.CronJob
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 70*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		got, err = c.BatchV1().CronJobs("default").Get(ctx, cj.Name, metav1.GetOptions{})
		return err == nil && got.Status.LastSuccessfulTime != nil, nil
	})
	if err != nil {
		t.Fatalf("no successful run within 70 s: %+v", got.Status)
	}
	if got.Status.LastScheduleTime == nil {
		t.Errorf("lastScheduleTime not set: %+v", got.Status)
	}
	// ttlSecondsAfterFinished: 0 removes the finished Job.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		jobs, err := c.BatchV1().Jobs("default").List(ctx, metav1.ListOptions{})
		return err == nil && len(jobs.Items) == 0, nil
	})
	if err != nil {
		t.Errorf("the CronJob's finished Job was not deleted by its TTL")
	}
}

// TestUpCollectsStuckPods: a Job's pod bound to a node that does not exist
// is deleted and stays terminating, since no kubelet will ever finish it.
// Upstream's pod garbage collector marks it Failed and deletes it after its
// quarantine, and the Job counts the failure and creates the replacement
// that podReplacementPolicy Failed held back.
func TestUpCollectsStuckPods(t *testing.T) {
	ctx := context.Background()
	up, c, _ := startUp(t, t.TempDir())
	defer up.stop(t)
	ns := "default"
	tmpl := builder.MakeJob("stranded", ns).BackoffLimit(3).Command("sleep", "300").Obj()
	tmpl.Spec.PodReplacementPolicy = ptr.To(batchv1.Failed)
	tmpl.Spec.Template.Spec.NodeName = "gone-node"
	job, err := c.BatchV1().Jobs(ns).Create(ctx, tmpl, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var first *corev1.Pod
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		pods := podsOf(t, c, job)
		if len(pods) == 1 {
			first = &pods[0]
		}
		return first != nil, nil
	})
	if err != nil {
		t.Fatal("the Job created no pod")
	}
	if err := c.CoreV1().Pods(ns).Delete(ctx, first.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	j := waitJob(t, c, ns, job.Name, "one terminating pod", func(j *batchv1.Job) bool {
		return ptr.Deref(j.Status.Terminating, 0) == 1
	})
	if j.Status.Failed != 0 {
		t.Fatalf("the deleted pod was counted before it terminated: %+v", j.Status)
	}
	// Quarantine (40 s) plus a check period (20 s), with margin.
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.CoreV1().Pods(ns).Get(ctx, first.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		p, _ := c.CoreV1().Pods(ns).Get(ctx, first.Name, metav1.GetOptions{})
		t.Fatalf("the stuck terminating pod was not collected: phase %s, deletionTimestamp %v, finalizers %v",
			p.Status.Phase, p.DeletionTimestamp, p.Finalizers)
	}
	waitJob(t, c, ns, job.Name, "the collected pod counted as failed and replaced", func(j *batchv1.Job) bool {
		return j.Status.Failed == 1 && ptr.Deref(j.Status.Terminating, 0) == 0 && len(podsOf(t, c, job)) >= 1
	})
}
