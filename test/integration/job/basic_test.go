package job

import (
	"context"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	jobcontroller "jobkeeper.dev/jobkeeper/pkg/controller/job"
	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

// TestNonParallelJob runs a one-pod Job through a failure and a success,
// restarting the controller between steps.
func TestNonParallelJob(t *testing.T) {
	ctx := context.Background()
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	run := startController(t, testOptions())
	job := createJob(t, c, builder.MakeJob("simple", ns).ManagedBy(jobcontroller.DefaultManagedBy).Obj())
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 1})

	run.Stop()
	run = startController(t, testOptions())
	framework.SetJobPodsPhase(ctx, t, c, job, corev1.PodFailed, 1)
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 1, Failed: 1})

	run.Stop()
	startController(t, testOptions())
	framework.SetJobPodsPhase(ctx, t, c, job, corev1.PodSucceeded, 1)
	got := framework.WaitForJobCondition(t, c, job, batchv1.JobComplete)
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Succeeded: 1, Failed: 1})
	checkConditions(t, got, "SuccessCriteriaMet=True/CompletionsReached", "Complete=True/CompletionsReached")
	if got.Status.CompletionTime == nil || got.Status.StartTime == nil {
		t.Errorf("startTime %v, completionTime %v: want both set", got.Status.StartTime, got.Status.CompletionTime)
	}
	framework.WaitForNoFinalizer(t, c, job)
}

// TestParallelJobWorkQueue runs a Job without completions: it completes
// once a pod succeeded and the others finished.
func TestParallelJobWorkQueue(t *testing.T) {
	ctx := context.Background()
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	startController(t, testOptions())
	job := createJob(t, c, builder.MakeJob("wq", ns).ManagedBy(jobcontroller.DefaultManagedBy).Parallelism(5).NoCompletions().Obj())
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 5})
	framework.SetJobPodsReady(ctx, t, c, job, 2)
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 5, Ready: 2})
	framework.SetJobPodsPhase(ctx, t, c, job, corev1.PodFailed, 2)
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 5, Failed: 2})
	// After the first success no pods are replaced.
	framework.SetJobPodsPhase(ctx, t, c, job, corev1.PodSucceeded, 1)
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 4, Failed: 2, Succeeded: 1})
	framework.SetJobPodsPhase(ctx, t, c, job, corev1.PodSucceeded, 4)
	got := framework.WaitForJobCondition(t, c, job, batchv1.JobComplete)
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Failed: 2, Succeeded: 5})
	checkConditions(t, got, "SuccessCriteriaMet=True/CompletionsReached", "Complete=True/CompletionsReached")
	framework.WaitForNoFinalizer(t, c, job)
}

// TestParallelismChange lowers and raises parallelism mid-run; removed pods
// are not failures.
func TestParallelismChange(t *testing.T) {
	ctx := context.Background()
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	startController(t, testOptions())
	job := createJob(t, c, builder.MakeJob("par", ns).ManagedBy(jobcontroller.DefaultManagedBy).Parallelism(5).Completions(6).Obj())
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 5})
	updateJob(t, c, job, func(j *batchv1.Job) { j.Spec.Parallelism = ptrTo[int32](2) })
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 2})
	framework.WaitForActivePods(t, c, job, 2)
	updateJob(t, c, job, func(j *batchv1.Job) { j.Spec.Parallelism = ptrTo[int32](4) })
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 4})
	framework.SetJobPodsPhase(ctx, t, c, job, corev1.PodSucceeded, 4)
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 2, Succeeded: 4})
	framework.SetJobPodsPhase(ctx, t, c, job, corev1.PodSucceeded, 2)
	framework.WaitForJobCondition(t, c, job, batchv1.JobComplete)
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Succeeded: 6})
	framework.WaitForNoFinalizer(t, c, job)
}

// TestManyCompletionsWithCaps runs 56 completions with per-sync caps of 10.
func TestManyCompletionsWithCaps(t *testing.T) {
	ctx := context.Background()
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	opts := testOptions()
	opts.MaxUncountedPods, opts.MaxPodCreateDeletePerSync = 10, 10
	startController(t, opts)
	job := createJob(t, c, builder.MakeJob("many", ns).ManagedBy(jobcontroller.DefaultManagedBy).Parallelism(54).Completions(56).Obj())
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 54})
	framework.SetJobPodsPhase(ctx, t, c, job, corev1.PodFailed, 2)
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 54, Failed: 2})
	framework.SetJobPodsPhase(ctx, t, c, job, corev1.PodSucceeded, 53)
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 3, Failed: 2, Succeeded: 53})
	framework.SetJobPodsPhase(ctx, t, c, job, corev1.PodSucceeded, 3)
	framework.WaitForJobCondition(t, c, job, batchv1.JobComplete)
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Failed: 2, Succeeded: 56})
	framework.WaitForNoFinalizer(t, c, job)
}

func ptrTo[T any](v T) *T { return &v }
