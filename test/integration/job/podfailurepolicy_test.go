package job

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	jobcontroller "jobkeeper.dev/jobkeeper/pkg/controller/job"
	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

const (
	failJob = batchv1.PodFailurePolicyActionFailJob
	ignore  = batchv1.PodFailurePolicyActionIgnore
	count   = batchv1.PodFailurePolicyActionCount
	opIn    = batchv1.PodFailurePolicyOnExitCodesOpIn
)

// failActivePod fails one active pod of the Job (the first by name) with f
// and returns its name.
func failActivePod(t testing.TB, c kubernetes.Interface, job *batchv1.Job, f framework.PodFailure) string {
	t.Helper()
	active := activePods(t, c, job)
	if len(active) == 0 {
		t.Fatalf("Job %s/%s has no active pod to fail", job.Namespace, job.Name)
	}
	framework.MustFailPod(t, c, &active[0], f)
	return active[0].Name
}

// exitCode is a PodFailure of container "main" with code.
func exitCode(code int32) framework.PodFailure {
	return framework.PodFailure{ExitCodes: map[string]int32{"main": code}}
}

// TestPodFailurePolicyFailJob: a pod exiting with a code matched by a
// FailJob rule fails the Job at once, backoffLimit notwithstanding: the
// interim FailureTarget carries the rule's message, the other pods are
// deleted and counted as failed, and Failed follows once the last deleted
// pod (held by a test finalizer) is gone.
func TestPodFailurePolicyFailJob(t *testing.T) {
	ctx := context.Background()
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	startController(t, testOptions())
	job := createJob(t, c, builder.MakeJob("pfp-failjob", ns).ManagedBy(jobcontroller.DefaultManagedBy).
		Parallelism(3).Completions(3).BackoffLimit(6).
		PodFailurePolicy(builder.ExitCodeRule(failJob, "main", opIn, 42)).Obj())
	if p := job.Spec.PodReplacementPolicy; p == nil || *p != batchv1.Failed {
		t.Errorf("podReplacementPolicy defaulted to %v, want Failed", p)
	}
	waitForIndexedStatus(t, c, job, indexedStatus{Active: 3, Terminating: 0, FailedIndexes: "<nil>", Started: true})
	framework.SetJobPodsPhase(ctx, t, c, job, corev1.PodRunning, 2)
	waitForIndexedStatus(t, c, job, indexedStatus{Active: 3, Ready: 2, FailedIndexes: "<nil>", Started: true})
	pods := activePods(t, c, job)
	// Keep one running pod terminating once the controller deletes it.
	var held *corev1.Pod
	for i := range pods {
		if pods[i].Status.Phase == corev1.PodRunning {
			held = &pods[i]
		}
	}
	holdPod(t, c, held)

	var failed *corev1.Pod
	for i := range pods {
		if pods[i].Name != held.Name {
			failed = &pods[i]
			break
		}
	}
	framework.MustFailPod(t, c, failed, exitCode(42))
	msg := fmt.Sprintf("Container main for pod %s/%s failed with exit code 42 matching FailJob rule at index 0", ns, failed.Name)
	target := "FailureTarget=True/PodFailurePolicy: " + msg
	waitForIndexedStatus(t, c, job, indexedStatus{Terminating: 1, Failed: 3, FailedIndexes: "<nil>",
		Conditions: []string{target}, Started: true})
	// Every pod is counted, the held one included: no tracking finalizer left.
	waitNoFinalizerInNamespace(t, c, ns)

	releaseHeldPods(t, c, ns)
	got := waitForIndexedStatus(t, c, job, indexedStatus{Failed: 3, FailedIndexes: "<nil>",
		Conditions: []string{target, "Failed=True/PodFailurePolicy: " + msg}, Started: true})
	if got.Status.CompletionTime != nil {
		t.Errorf("completionTime set on a failed Job")
	}
}

// TestPodFailurePolicyIgnoreDisruption: a pod failing with the
// DisruptionTarget condition matched by an Ignore rule is not counted
// (backoffLimit 0 would fail the Job otherwise), loses its finalizer and is
// replaced.
func TestPodFailurePolicyIgnoreDisruption(t *testing.T) {
	ctx := context.Background()
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	startController(t, testOptions())
	job := createJob(t, c, builder.MakeJob("pfp-ignore", ns).ManagedBy(jobcontroller.DefaultManagedBy).BackoffLimit(0).
		PodFailurePolicy(builder.PodConditionRule(ignore, corev1.DisruptionTarget)).Obj())
	waitForIndexedStatus(t, c, job, indexedStatus{Active: 1, FailedIndexes: "<nil>", Started: true})
	disrupted := failActivePod(t, c, job, framework.PodFailure{
		ExitCodes: map[string]int32{"main": 137}, Conditions: []corev1.PodConditionType{corev1.DisruptionTarget}})

	framework.WaitFor(t, "a replacement pod", func(ctx context.Context) (bool, error) {
		pods, err := framework.JobPods(ctx, c, job)
		if err != nil {
			return false, err
		}
		return len(pods) == 2 && len(activePods(t, c, job)) == 1, nil
	})
	waitForIndexedStatus(t, c, job, indexedStatus{Active: 1, FailedIndexes: "<nil>", Started: true})
	// The replacement may be created before the ignored pod's finalizer is
	// removed (both happen in one sync, in either order): wait for it.
	framework.WaitFor(t, "the ignored pod "+disrupted+" to lose the tracking finalizer", func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, disrupted, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return !hasFinalizer(p), nil
	})
	if j, err := c.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if j.Status.Failed != 0 || j.Status.UncountedTerminatedPods != nil && len(j.Status.UncountedTerminatedPods.Failed) != 0 {
		t.Errorf("the ignored pod was counted: failed %d, uncounted %v", j.Status.Failed, j.Status.UncountedTerminatedPods)
	}

	framework.SetJobPodsPhase(ctx, t, c, job, corev1.PodSucceeded, 1)
	waitForIndexedStatus(t, c, job, indexedStatus{Succeeded: 1, FailedIndexes: "<nil>", Started: true, Completed: true,
		Conditions: []string{"SuccessCriteriaMet=True/CompletionsReached: Reached expected number of succeeded pods",
			"Complete=True/CompletionsReached: Reached expected number of succeeded pods"}})
	waitNoFinalizerInNamespace(t, c, ns)
}

// TestPodFailurePolicyCount: exit codes under a Count rule are ordinary
// failures: counted, replaced, and past backoffLimit the Job fails with
// BackoffLimitExceeded (not PodFailurePolicy).
func TestPodFailurePolicyCount(t *testing.T) {
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	startController(t, testOptions())
	job := createJob(t, c, builder.MakeJob("pfp-count", ns).ManagedBy(jobcontroller.DefaultManagedBy).BackoffLimit(1).
		PodFailurePolicy(builder.ExitCodeRule(count, "", opIn, 3), builder.ExitCodeRule(failJob, "", opIn, 3, 4)).Obj())
	waitForIndexedStatus(t, c, job, indexedStatus{Active: 1, FailedIndexes: "<nil>", Started: true})
	failActivePod(t, c, job, exitCode(3))
	waitForIndexedStatus(t, c, job, indexedStatus{Active: 1, Failed: 1, FailedIndexes: "<nil>", Started: true})
	failActivePod(t, c, job, exitCode(3))
	const reached = "Job has reached the specified backoff limit"
	waitForIndexedStatus(t, c, job, indexedStatus{Failed: 2, FailedIndexes: "<nil>", Started: true,
		Conditions: []string{"FailureTarget=True/BackoffLimitExceeded: " + reached, "Failed=True/BackoffLimitExceeded: " + reached}})
	waitNoFinalizerInNamespace(t, c, ns)
}

// TestPodFailurePolicyContainerName: a rule restricted to container "main"
// ignores the same exit code in container "sidecar"; the failure is then
// an ordinary one. The next pod's "main" exiting with it fails the Job.
func TestPodFailurePolicyContainerName(t *testing.T) {
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	startController(t, testOptions())
	job := createJob(t, c, builder.MakeJob("pfp-container", ns).ManagedBy(jobcontroller.DefaultManagedBy).BackoffLimit(6).
		Container("sidecar", "sleep", "3600").
		PodFailurePolicy(builder.ExitCodeRule(failJob, "main", opIn, 42)).Obj())
	waitForIndexedStatus(t, c, job, indexedStatus{Active: 1, FailedIndexes: "<nil>", Started: true})
	failActivePod(t, c, job, framework.PodFailure{ExitCodes: map[string]int32{"main": 1, "sidecar": 42}})
	waitForIndexedStatus(t, c, job, indexedStatus{Active: 1, Failed: 1, FailedIndexes: "<nil>", Started: true})

	second := failActivePod(t, c, job, framework.PodFailure{ExitCodes: map[string]int32{"main": 42, "sidecar": 0}})
	msg := fmt.Sprintf("Container main for pod %s/%s failed with exit code 42 matching FailJob rule at index 0", ns, second)
	waitForIndexedStatus(t, c, job, indexedStatus{Failed: 2, FailedIndexes: "<nil>", Started: true,
		Conditions: []string{"FailureTarget=True/PodFailurePolicy: " + msg, "Failed=True/PodFailurePolicy: " + msg}})
	waitNoFinalizerInNamespace(t, c, ns)
}

// failingPodPatches is an http.RoundTripper that fails every PATCH of a pod
// while fail is set: a controller using it can write the Job status but
// cannot remove tracking finalizers.
type failingPodPatches struct {
	next http.RoundTripper
	fail *atomic.Bool
	// failed counts the requests it failed.
	failed *atomic.Int32
}

func (f failingPodPatches) RoundTrip(r *http.Request) (*http.Response, error) {
	if f.fail.Load() && r.Method == http.MethodPatch && strings.Contains(r.URL.Path, "/pods/") {
		f.failed.Add(1)
		return &http.Response{
			StatusCode: http.StatusServiceUnavailable, Status: "503 Service Unavailable",
			Header:  http.Header{"Content-Type": []string{"text/plain"}},
			Body:    io.NopCloser(strings.NewReader("injected by the test")),
			Request: r,
		}, nil
	}
	return f.next.RoundTrip(r)
}

// TestPodFailurePolicyFailJobControllerRestart stops the controller after it
// wrote FailureTarget (with the failed pods in uncountedTerminatedPods) but
// before it could remove any finalizer, then starts a fresh one: the Job
// must end Failed with the FailJob message, every pod counted exactly once
// and no finalizer left.
func TestPodFailurePolicyFailJobControllerRestart(t *testing.T) {
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	var fail atomic.Bool
	var failedPatches atomic.Int32
	first := startControllerWithTransport(t, testOptions(), func(rt http.RoundTripper) http.RoundTripper {
		return failingPodPatches{next: rt, fail: &fail, failed: &failedPatches}
	})
	job := createJob(t, c, builder.MakeJob("pfp-restart", ns).ManagedBy(jobcontroller.DefaultManagedBy).
		Parallelism(3).Completions(3).BackoffLimit(6).
		PodFailurePolicy(builder.ExitCodeRule(failJob, "", opIn, 42)).Obj())
	waitForIndexedStatus(t, c, job, indexedStatus{Active: 3, FailedIndexes: "<nil>", Started: true})

	fail.Store(true)
	failedName := failActivePod(t, c, job, exitCode(42))
	msg := fmt.Sprintf("Container main for pod %s/%s failed with exit code 42 matching FailJob rule at index 0", ns, failedName)
	target := "FailureTarget=True/PodFailurePolicy: " + msg
	// The three pods are in uncountedTerminatedPods, the two running ones
	// deleted but held by their tracking finalizer.
	waitForIndexedStatus(t, c, job, indexedStatus{Terminating: 2, Uncounted: 3, FailedIndexes: "<nil>",
		Conditions: []string{target}, Started: true})
	// The status write comes before the finalizer removals it records:
	// wait until the first controller has tried (and failed) one.
	framework.WaitFor(t, "the first controller to try removing a finalizer", func(context.Context) (bool, error) {
		return failedPatches.Load() > 0, nil
	})
	first.Stop()
	if n, err := podsWithFinalizer(context.Background(), c, ns); err != nil || n != 3 {
		t.Fatalf("after the first controller: %d pods hold the finalizer (err %v), want 3", n, err)
	}

	startController(t, testOptions())
	got := waitForIndexedStatus(t, c, job, indexedStatus{Failed: 3, FailedIndexes: "<nil>",
		Conditions: []string{target, "Failed=True/PodFailurePolicy: " + msg}, Started: true})
	if got.Status.CompletionTime != nil {
		t.Errorf("completionTime set on a failed Job")
	}
	waitNoFinalizerInNamespace(t, c, ns)
}
