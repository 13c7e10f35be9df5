package job

import (
	"context"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	jobcontroller "jobkeeper.dev/jobkeeper/pkg/controller/job"
	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

// TestBadObjectsNeverStopTheController puts strange objects in front of a
// running controller — pods of an Indexed Job with malformed completion
// indexes, a pod owned by a Job that does not exist, a Job of a million
// completions, a Job whose status another writer corrupted — and checks
// what becomes of each, and that a normal Job still completes afterwards.
func TestBadObjectsNeverStopTheController(t *testing.T) {
	ctx := context.Background()
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	startController(t, testOptions())

	// Malformed indexes: the pods are deleted uncounted (finalizer first).
	indexed := createJob(t, c, builder.MakeJob("indexed", ns).ManagedBy(jobcontroller.DefaultManagedBy).Indexed().Completions(2).Parallelism(2).Obj())
	framework.WaitForJobPodsStatus(t, c, indexed, framework.PodsStatus{Active: 2})
	for _, ix := range []string{"abc", "-1", "99999999999999999999"} {
		p := builder.MakePod("", ns).OwnedByJob(indexed).Finalizer(batchv1.JobTrackingFinalizer).Index(ix).Obj()
		p.GenerateName = "malformed-"
		p.Labels = indexed.Spec.Template.Labels
		p.Spec = *indexed.Spec.Template.Spec.DeepCopy()
		if _, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating a pod with index %q: %v", ix, err)
		}
	}
	framework.WaitFor(t, "the malformed pods gone", func(ctx context.Context) (bool, error) {
		pods, err := framework.JobPods(ctx, c, indexed)
		if err != nil {
			return false, err
		}
		for _, p := range pods {
			if p.GenerateName == "malformed-" {
				return false, nil
			}
		}
		return true, nil
	})
	framework.SetJobPodsPhase(ctx, t, c, indexed, corev1.PodSucceeded, 2)
	got := framework.WaitForJobCondition(t, c, indexed, batchv1.JobComplete)
	if got.Status.Succeeded != 2 || got.Status.CompletedIndexes != "0,1" {
		t.Errorf("indexed job: succeeded %d completedIndexes %q, want 2 and \"0,1\"", got.Status.Succeeded, got.Status.CompletedIndexes)
	}

	// A pod owned by a Job that never existed loses the finalizer.
	ghost := builder.MakeJob("ghost", ns).UID("00000000-0000-0000-0000-000000000001").Obj()
	orphan := builder.MakePod("orphan", ns).OwnedByJob(ghost).Finalizer(batchv1.JobTrackingFinalizer).Obj()
	orphan.Spec = *ghost.Spec.Template.Spec.DeepCopy()
	if _, err := c.CoreV1().Pods(ns).Create(ctx, orphan, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The garbage collector deletes it too (its owner does not exist), which
	// only completes once the finalizer is gone.
	framework.WaitFor(t, "the ghost Job's pod released", func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, "orphan", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return err == nil && len(p.Finalizers) == 0, err
	})

	// A million completions cost what parallelism 5 costs.
	huge := createJob(t, c, builder.MakeJob("huge", ns).ManagedBy(jobcontroller.DefaultManagedBy).Completions(1000000).Parallelism(5).Obj())
	framework.WaitForJobPodsStatus(t, c, huge, framework.PodsStatus{Active: 5})
	framework.SetJobPodsPhase(ctx, t, c, huge, corev1.PodSucceeded, 2)
	framework.WaitForJobPodsStatus(t, c, huge, framework.PodsStatus{Active: 5, Succeeded: 2})

	// Another writer corrupts a running Job's status: a UID of no pod in
	// the uncounted list and a wrong active count. The controller repairs
	// what it owns and goes on.
	corrupt := createJob(t, c, builder.MakeJob("corrupt", ns).ManagedBy(jobcontroller.DefaultManagedBy).Completions(2).Parallelism(1).Obj())
	framework.WaitForJobPodsStatus(t, c, corrupt, framework.PodsStatus{Active: 1})
	corruptStatus(t, c, corrupt, func(j *batchv1.Job) {
		j.Status.Active = 7
		j.Status.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{Failed: []types.UID{"not-a-pod"}}
	})
	framework.WaitForJobPodsStatus(t, c, corrupt, framework.PodsStatus{Active: 1, Failed: 1})
	framework.SetJobPodsPhase(ctx, t, c, corrupt, corev1.PodSucceeded, 1)
	framework.WaitForJobPodsStatus(t, c, corrupt, framework.PodsStatus{Active: 1, Succeeded: 1, Failed: 1})
	framework.SetJobPodsPhase(ctx, t, c, corrupt, corev1.PodSucceeded, 1)
	framework.WaitForJobCondition(t, c, corrupt, batchv1.JobComplete)

	// A normal Job still completes.
	normal := createJob(t, c, builder.MakeJob("normal", ns).ManagedBy(jobcontroller.DefaultManagedBy).Completions(3).Parallelism(3).Obj())
	framework.WaitForJobPodsStatus(t, c, normal, framework.PodsStatus{Active: 3})
	framework.SetJobPodsPhase(ctx, t, c, normal, corev1.PodSucceeded, 3)
	framework.WaitForJobCondition(t, c, normal, batchv1.JobComplete)
	framework.WaitForNoFinalizer(t, c, normal)
}

// corruptStatus rewrites the Job's status as another writer would,
// retrying on conflicts.
func corruptStatus(t *testing.T, c kubernetes.Interface, job *batchv1.Job, mutate func(*batchv1.Job)) {
	t.Helper()
	framework.WaitFor(t, "corrupting the status of "+job.Name, func(ctx context.Context) (bool, error) {
		j, err := c.BatchV1().Jobs(job.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		mutate(j)
		_, err = c.BatchV1().Jobs(job.Namespace).UpdateStatus(ctx, j, metav1.UpdateOptions{})
		return err == nil, nil
	})
}
