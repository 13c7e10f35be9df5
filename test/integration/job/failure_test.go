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

// TestBackoffLimitExceeded fails a Job after backoffLimit+1 pod failures;
// the remaining active pod is deleted and counted as failed.
func TestBackoffLimitExceeded(t *testing.T) {
	ctx := context.Background()
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	startController(t, testOptions())
	job := createJob(t, c, builder.MakeJob("bl", ns).ManagedBy(jobcontroller.DefaultManagedBy).Parallelism(2).Completions(4).BackoffLimit(1).Obj())
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 2})
	framework.SetJobPodsPhase(ctx, t, c, job, corev1.PodFailed, 1)
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 2, Failed: 1})
	framework.SetJobPodsPhase(ctx, t, c, job, corev1.PodFailed, 1)
	// The other active pod is deleted (unscheduled, so at once once its
	// finalizer is gone) and counted as failed.
	framework.WaitForJobCondition(t, c, job, batchv1.JobFailed)
	got := framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Failed: 3})
	checkConditions(t, got, "FailureTarget=True/BackoffLimitExceeded", "Failed=True/BackoffLimitExceeded")
	if got.Status.CompletionTime != nil {
		t.Errorf("completionTime set on a failed Job")
	}
	waitNoFinalizerInNamespace(t, c, ns)
}

// TestExponentialBackoff checks that pod re-creation waits base, 2*base,
// 4*base after consecutive failures.
func TestExponentialBackoff(t *testing.T) {
	ctx := context.Background()
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	opts := testOptions()
	base := 2 * time.Second
	opts.PodFailureBackoff, opts.MaxPodFailureBackoff = base, time.Minute
	startController(t, opts)
	job := createJob(t, c, builder.MakeJob("backoff", ns).ManagedBy(jobcontroller.DefaultManagedBy).BackoffLimit(10).Obj())
	framework.WaitForActivePods(t, c, job, 1)
	for i, want := range []time.Duration{base, 2 * base, 4 * base} {
		failedAt := time.Now()
		framework.SetJobPodsPhase(ctx, t, c, job, corev1.PodFailed, 1)
		framework.WaitForActivePods(t, c, job, 1)
		waited := time.Since(failedAt)
		// The failure time is the container's finishedAt, at second precision.
		if waited < want-time.Second || waited > want+2*time.Second {
			t.Errorf("failure %d: replacement after %v, want about %v", i+1, waited, want)
		}
	}
	framework.SetJobPodsPhase(ctx, t, c, job, corev1.PodSucceeded, 1)
	framework.WaitForJobCondition(t, c, job, batchv1.JobComplete)
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Succeeded: 1, Failed: 3})
}

// TestActiveDeadline fails a running Job when activeDeadlineSeconds passes.
func TestActiveDeadline(t *testing.T) {
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	startController(t, testOptions())
	job := createJob(t, c, builder.MakeJob("deadline", ns).ManagedBy(jobcontroller.DefaultManagedBy).Parallelism(2).Completions(2).ActiveDeadlineSeconds(2).Obj())
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 2})
	framework.WaitForJobCondition(t, c, job, batchv1.JobFailureTarget)
	got := framework.WaitForJobCondition(t, c, job, batchv1.JobFailed)
	checkConditions(t, got, "FailureTarget=True/DeadlineExceeded", "Failed=True/DeadlineExceeded")
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Failed: 2})
	started, failed := got.Status.StartTime.Time, got.Status.Conditions[1].LastTransitionTime.Time
	if d := failed.Sub(started); d < 2*time.Second || d > 6*time.Second {
		t.Errorf("failed %v after start, want about 2s", d)
	}
	waitNoFinalizerInNamespace(t, c, ns)
}

// TestPodsDeletedExternallyCountAsFailed deletes running pods as a user
// would; they count as failed and are replaced.
func TestPodsDeletedExternallyCountAsFailed(t *testing.T) {
	ctx := context.Background()
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	startController(t, testOptions())
	job := createJob(t, c, builder.MakeJob("ext", ns).ManagedBy(jobcontroller.DefaultManagedBy).Parallelism(3).Completions(3).Obj())
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 3})
	framework.DeleteJobPods(ctx, t, c, job, 2)
	// The deleted pods (unscheduled, so deleted without grace) count as
	// failed, lose their finalizer and go; replacements are created.
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 3, Failed: 2})
	framework.SetJobPodsPhase(ctx, t, c, job, corev1.PodSucceeded, 3)
	got := framework.WaitForJobCondition(t, c, job, batchv1.JobComplete)
	checkConditions(t, got, "SuccessCriteriaMet=True/CompletionsReached", "Complete=True/CompletionsReached")
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Succeeded: 3, Failed: 2})
	waitNoFinalizerInNamespace(t, c, ns)
}

func findCond(job *batchv1.Job, t batchv1.JobConditionType) bool {
	for _, c := range job.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}
