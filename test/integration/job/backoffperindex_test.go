package job

import (
	"context"
	"slices"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	jobcontroller "jobkeeper.dev/jobkeeper/pkg/controller/job"
	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

// checkFailureCount fails the test unless the active pod of index ix
// carries the job-index-failure-count annotation want.
func checkFailureCount(t testing.TB, c kubernetes.Interface, job *batchv1.Job, ix int, want string) {
	t.Helper()
	p := indexPod(t, c, job, ix)
	if got, ok := p.Annotations[batchv1.JobIndexFailureCountAnnotation]; !ok || got != want {
		t.Errorf("pod %s of index %d: %s = %q (set: %v), want %q", p.Name, ix, batchv1.JobIndexFailureCountAnnotation, got, ok, want)
	}
}

// TestBackoffLimitPerIndexFailedIndexes: index 1 fails twice with a
// per-index limit of 1 and is given up, indexes 0 and 2 complete; the Job
// ends Failed with reason FailedIndexes.
func TestBackoffLimitPerIndexFailedIndexes(t *testing.T) {
	ctx := context.Background()
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	startController(t, testOptions())
	job := createJob(t, c, builder.MakeJob("bpi", ns).ManagedBy(jobcontroller.DefaultManagedBy).Indexed().
		Parallelism(3).Completions(3).BackoffLimitPerIndex(1).Obj())
	waitForIndexedStatus(t, c, job, indexedStatus{Active: 3, Started: true})
	framework.WaitForActivePods(t, c, job, 3)
	for ix := range 3 {
		checkFailureCount(t, c, job, ix, "0")
	}

	// First failure of index 1: replaced, with the failure carried over.
	framework.SetIndexPodPhase(ctx, t, c, job, 1, corev1.PodFailed)
	waitForIndexedStatus(t, c, job, indexedStatus{Active: 3, Failed: 1, Started: true})
	framework.WaitForActivePods(t, c, job, 3)
	checkFailureCount(t, c, job, 1, "1")

	// Second failure: past the limit, the index is failed and not retried.
	framework.SetIndexPodPhase(ctx, t, c, job, 1, corev1.PodFailed)
	waitForIndexedStatus(t, c, job, indexedStatus{Active: 2, Failed: 2, FailedIndexes: "1", Started: true})
	framework.SetIndexPodPhase(ctx, t, c, job, 0, corev1.PodSucceeded)
	waitForIndexedStatus(t, c, job, indexedStatus{Active: 1, Succeeded: 1, Failed: 2, CompletedIndexes: "0", FailedIndexes: "1", Started: true})
	if got := sortedIndexes(activePods(t, c, job)); len(got) != 1 || got[0] != "2" {
		t.Errorf("active indexes %v, want only 2", got)
	}

	framework.SetIndexPodPhase(ctx, t, c, job, 2, corev1.PodSucceeded)
	waitForIndexedStatus(t, c, job, indexedStatus{Succeeded: 2, Failed: 2, CompletedIndexes: "0,2", FailedIndexes: "1",
		Conditions: []string{
			"FailureTarget=True/FailedIndexes: Job has failed indexes",
			"Failed=True/FailedIndexes: Job has failed indexes",
		}, Started: true})
	waitNoFinalizerInNamespace(t, c, ns)
}

// TestBackoffLimitPerIndexMaxFailedIndexes: with no retry per index and at
// most one failed index, the second failed index fails the Job at once;
// the remaining pods are deleted and counted as failed, and Failed waits
// until they are gone.
func TestBackoffLimitPerIndexMaxFailedIndexes(t *testing.T) {
	ctx := context.Background()
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	startController(t, testOptions())
	job := createJob(t, c, builder.MakeJob("maxfi", ns).ManagedBy(jobcontroller.DefaultManagedBy).Indexed().
		Parallelism(4).Completions(4).BackoffLimitPerIndex(0).MaxFailedIndexes(1).Obj())
	waitForIndexedStatus(t, c, job, indexedStatus{Active: 4, Started: true})
	holdPod(t, c, indexPod(t, c, job, 3))
	framework.SetIndexPodPhase(ctx, t, c, job, 3, corev1.PodRunning)
	waitForIndexedStatus(t, c, job, indexedStatus{Active: 4, Ready: 1, Started: true})

	framework.SetIndexPodPhase(ctx, t, c, job, 0, corev1.PodFailed)
	waitForIndexedStatus(t, c, job, indexedStatus{Active: 3, Ready: 1, Failed: 1, FailedIndexes: "0", Started: true})

	framework.SetIndexPodPhase(ctx, t, c, job, 1, corev1.PodFailed)
	target := "FailureTarget=True/MaxFailedIndexesExceeded: Job has exceeded the specified maximal number of failed indexes"
	// Pods 2 and 3 are deleted and counted as failed; 3 stays terminating.
	waitForIndexedStatus(t, c, job, indexedStatus{Terminating: 1, Failed: 4, FailedIndexes: "0,1",
		Conditions: []string{target}, Started: true})
	waitNoFinalizerInNamespace(t, c, ns)

	releaseHeldPods(t, c, ns)
	waitForIndexedStatus(t, c, job, indexedStatus{Failed: 4, FailedIndexes: "0,1",
		Conditions: []string{target, "Failed=True/MaxFailedIndexesExceeded: Job has exceeded the specified maximal number of failed indexes"},
		Started:    true})
	if n := len(activePods(t, c, job)); n != 0 {
		t.Errorf("%d active pods left, want 0", n)
	}
}

// failIndexPod moves the active pod of index ix to phase Failed with its
// container terminated with exitCode, as a kubelet would.
func failIndexPod(t testing.TB, c kubernetes.Interface, job *batchv1.Job, ix int, exitCode int32) {
	t.Helper()
	p := indexPod(t, c, job, ix)
	now := metav1.Now()
	p.Status.Phase = corev1.PodFailed
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: p.Spec.Containers[0].Name, Image: p.Spec.Containers[0].Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exitCode, Reason: "Error", StartedAt: now, FinishedAt: now}},
	}}
	if _, err := c.CoreV1().Pods(p.Namespace).UpdateStatus(context.Background(), p, metav1.UpdateOptions{FieldManager: framework.FieldManager}); err != nil {
		t.Fatalf("failing pod %s with exit code %d: %v", p.Name, exitCode, err)
	}
}

// TestBackoffLimitPerIndexPodFailurePolicy: with a per-index limit of 2,
// an exit code under an Ignore rule is replaced without counting (the
// replacement carries it as ignored), and one under a FailIndex rule fails
// its index at once; the other index completes, so the Job ends Failed
// with FailedIndexes.
func TestBackoffLimitPerIndexPodFailurePolicy(t *testing.T) {
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	startController(t, testOptions())
	job := createJob(t, c, builder.MakeJob("bpi-pfp", ns).ManagedBy(jobcontroller.DefaultManagedBy).Indexed().
		Parallelism(2).Completions(2).BackoffLimitPerIndex(2).PodFailurePolicy(
		builder.ExitCodeRule(batchv1.PodFailurePolicyActionIgnore, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 3),
		builder.ExitCodeRule(batchv1.PodFailurePolicyActionFailIndex, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 42),
	).Obj())
	waitForIndexedStatus(t, c, job, indexedStatus{Active: 2, Started: true})
	framework.WaitForActivePods(t, c, job, 2)

	failIndexPod(t, c, job, 0, 3)
	// The ignored failure is replaced and never counted.
	framework.WaitFor(t, "a replacement for index 0 carrying the ignored failure", func(ctx context.Context) (bool, error) {
		for _, p := range activePods(t, c, job) {
			if p.Annotations[batchv1.JobCompletionIndexAnnotation] == "0" {
				return p.Annotations[batchv1.JobIndexFailureCountAnnotation] == "0" &&
					p.Annotations[batchv1.JobIndexIgnoredFailureCountAnnotation] == "1", nil
			}
		}
		return false, nil
	})
	waitForIndexedStatus(t, c, job, indexedStatus{Active: 2, Started: true})
	waitForNoFinalizerOnFailedPods(t, c, job)

	failIndexPod(t, c, job, 0, 42)
	waitForIndexedStatus(t, c, job, indexedStatus{Active: 1, Failed: 1, FailedIndexes: "0", Started: true})
	framework.SetIndexPodPhase(context.Background(), t, c, job, 1, corev1.PodSucceeded)
	waitForIndexedStatus(t, c, job, indexedStatus{Succeeded: 1, Failed: 1, CompletedIndexes: "1", FailedIndexes: "0",
		Conditions: []string{
			"FailureTarget=True/FailedIndexes: Job has failed indexes",
			"Failed=True/FailedIndexes: Job has failed indexes",
		}, Started: true})
	waitNoFinalizerInNamespace(t, c, ns)
}

// waitForNoFinalizerOnFailedPods waits until no failed pod of the Job holds
// the tracking finalizer.
func waitForNoFinalizerOnFailedPods(t testing.TB, c kubernetes.Interface, job *batchv1.Job) {
	t.Helper()
	framework.WaitFor(t, "failed pods of "+job.Name+" to lose the tracking finalizer", func(ctx context.Context) (bool, error) {
		pods, err := framework.JobPods(ctx, c, job)
		if err != nil {
			return false, err
		}
		for _, p := range pods {
			if p.Status.Phase == corev1.PodFailed && slices.Contains(p.Finalizers, batchv1.JobTrackingFinalizer) {
				return false, nil
			}
		}
		return true, nil
	})
}
