package job

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	jobcontroller "jobkeeper.dev/jobkeeper/pkg/controller/job"
	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

// TestSuspendCreated creates a suspended Job: no pods, Suspended=True, no
// startTime; resuming starts it.
func TestSuspendCreated(t *testing.T) {
	ctx := context.Background()
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	startController(t, testOptions())
	job := createJob(t, c, builder.MakeJob("susp", ns).ManagedBy(jobcontroller.DefaultManagedBy).Parallelism(2).Completions(2).Suspend(true).Obj())
	got := framework.WaitForJobCondition(t, c, job, batchv1.JobSuspended)
	checkConditions(t, got, "Suspended=True/JobSuspended")
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{})
	if got.Status.StartTime != nil {
		t.Errorf("startTime %v on a Job created suspended", got.Status.StartTime)
	}
	if n := len(activePods(t, c, job)); n != 0 {
		t.Errorf("%d pods for a suspended Job", n)
	}

	updateJob(t, c, job, func(j *batchv1.Job) { j.Spec.Suspend = ptrTo(false) })
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 2})
	got = getJob(t, c, job)
	checkConditions(t, got, "Suspended=False/JobResumed")
	if got.Status.StartTime == nil {
		t.Errorf("no startTime after resume")
	}
	framework.SetJobPodsPhase(ctx, t, c, job, corev1.PodSucceeded, 2)
	got = framework.WaitForJobCondition(t, c, job, batchv1.JobComplete)
	checkConditions(t, got, "Suspended=False/JobResumed", "SuccessCriteriaMet=True/CompletionsReached", "Complete=True/CompletionsReached")
	framework.WaitForNoFinalizer(t, c, job)
}

// TestSuspendRunning suspends a running Job (its pods go, not counted as
// failures, completions remembered, startTime cleared), resumes it (new
// startTime) and runs it to completion.
func TestSuspendRunning(t *testing.T) {
	ctx := context.Background()
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	startController(t, testOptions())
	job := createJob(t, c, builder.MakeJob("run", ns).ManagedBy(jobcontroller.DefaultManagedBy).Parallelism(2).Completions(4).ActiveDeadlineSeconds(3600).Obj())
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 2})
	framework.SetJobPodsPhase(ctx, t, c, job, corev1.PodSucceeded, 1)
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 2, Succeeded: 1})
	framework.SetJobPodsReady(ctx, t, c, job, 1)
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 2, Ready: 1, Succeeded: 1})
	firstStart := getJob(t, c, job).Status.StartTime

	updateJob(t, c, job, func(j *batchv1.Job) { j.Spec.Suspend = ptrTo(true) })
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Succeeded: 1})
	framework.WaitForActivePods(t, c, job, 0)
	got := getJob(t, c, job)
	checkConditions(t, got, "Suspended=True/JobSuspended")
	if got.Status.StartTime != nil {
		t.Errorf("startTime %v while suspended, want nil", got.Status.StartTime)
	}
	waitNoFinalizerInNamespace(t, c, ns)

	updateJob(t, c, job, func(j *batchv1.Job) { j.Spec.Suspend = ptrTo(false) })
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 2, Succeeded: 1})
	got = getJob(t, c, job)
	checkConditions(t, got, "Suspended=False/JobResumed")
	if got.Status.StartTime == nil || (firstStart != nil && got.Status.StartTime.Before(firstStart)) {
		t.Errorf("startTime after resume %v, first start %v: want a fresh one", got.Status.StartTime, firstStart)
	}
	framework.SetJobPodsPhase(ctx, t, c, job, corev1.PodSucceeded, 2)
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 1, Succeeded: 3})
	framework.SetJobPodsPhase(ctx, t, c, job, corev1.PodSucceeded, 1)
	framework.WaitForJobCondition(t, c, job, batchv1.JobComplete)
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Succeeded: 4})

	// Suspending a finished Job changes nothing.
	before := getJob(t, c, job)
	updateJob(t, c, job, func(j *batchv1.Job) { j.Spec.Suspend = ptrTo(true) })
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Succeeded: 4})
	after := getJob(t, c, job)
	checkConditions(t, after, conditionSummary(before)...)
}

// TestSuspendIndexedKeepsCompletedIndexes suspends and resumes an Indexed
// Job: completed indexes are remembered and only the others re-run.
func TestSuspendIndexedKeepsCompletedIndexes(t *testing.T) {
	ctx := context.Background()
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	startController(t, testOptions())
	job := createJob(t, c, builder.MakeJob("isusp", ns).ManagedBy(jobcontroller.DefaultManagedBy).Indexed().Parallelism(3).Completions(3).Obj())
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 3})
	framework.SetIndexPodPhase(ctx, t, c, job, 1, corev1.PodSucceeded)
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 2, Succeeded: 1})
	updateJob(t, c, job, func(j *batchv1.Job) { j.Spec.Suspend = ptrTo(true) })
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Succeeded: 1})
	updateJob(t, c, job, func(j *batchv1.Job) { j.Spec.Suspend = ptrTo(false) })
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 2, Succeeded: 1})
	if idx := sortedIndexes(framework.WaitForActivePods(t, c, job, 2)); len(idx) != 2 || idx[0] != "0" || idx[1] != "2" {
		t.Errorf("active indexes after resume %v, want [0 2]", idx)
	}
	framework.SetIndexPodPhase(ctx, t, c, job, 0, corev1.PodSucceeded)
	framework.SetIndexPodPhase(ctx, t, c, job, 2, corev1.PodSucceeded)
	got := framework.WaitForJobCondition(t, c, job, batchv1.JobComplete)
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Succeeded: 3})
	if got = getJob(t, c, got); got.Status.CompletedIndexes != "0-2" || got.Status.Failed != 0 {
		t.Errorf("completedIndexes %q failed %d, want \"0-2\" and 0", got.Status.CompletedIndexes, got.Status.Failed)
	}
}

// TestSuspendStopsDeadline: the active deadline never fires while the Job
// is suspended and counts again from the resume.
func TestSuspendStopsDeadline(t *testing.T) {
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	startController(t, testOptions())
	job := createJob(t, c, builder.MakeJob("dl", ns).ManagedBy(jobcontroller.DefaultManagedBy).ActiveDeadlineSeconds(2).Suspend(true).Obj())
	framework.WaitForJobCondition(t, c, job, batchv1.JobSuspended)
	time.Sleep(3 * time.Second)
	if got := getJob(t, c, job); findCond(got, batchv1.JobFailureTarget) || findCond(got, batchv1.JobFailed) {
		t.Fatalf("deadline fired while suspended: %v", conditionSummary(got))
	}
	resumed := time.Now()
	updateJob(t, c, job, func(j *batchv1.Job) { j.Spec.Suspend = ptrTo(false) })
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 1})
	got := framework.WaitForJobCondition(t, c, job, batchv1.JobFailed)
	checkConditions(t, got, "Suspended=False/JobResumed", "FailureTarget=True/DeadlineExceeded", "Failed=True/DeadlineExceeded")
	if d := time.Since(resumed); d < time.Second || d > 8*time.Second {
		t.Errorf("failed %v after resume, want about 2s", d)
	}
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Failed: 1})
}
