package job

import (
	"context"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
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
