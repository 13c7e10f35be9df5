package job

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	jobcontroller "jobkeeper.dev/jobkeeper/pkg/controller/job"
	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

// holdFinalizer is a finalizer the tests put on pods so that, once deleted,
// they stay terminating until the test lets them go.
const holdFinalizer = "jobkeeper.dev/test-hold"

// indexedStatus is the whole status of an Indexed Job as the tests compare
// it: counters, both index sets, uncounted pods, conditions with messages.
type indexedStatus struct {
	Active, Ready, Terminating, Succeeded, Failed int32
	CompletedIndexes                              string
	// FailedIndexes is "<nil>" when the field is unset.
	FailedIndexes string
	Uncounted     int
	// Conditions are "Type=Status/Reason: Message".
	Conditions []string
	Started    bool
	Completed  bool
}

// indexedStatusOf summarises the Job's status.
func indexedStatusOf(job *batchv1.Job) indexedStatus {
	s := job.Status
	out := indexedStatus{
		Active: s.Active, Ready: ptr.Deref(s.Ready, -1), Terminating: ptr.Deref(s.Terminating, -1),
		Succeeded: s.Succeeded, Failed: s.Failed, CompletedIndexes: s.CompletedIndexes,
		FailedIndexes: "<nil>", Started: s.StartTime != nil, Completed: s.CompletionTime != nil,
	}
	if s.FailedIndexes != nil {
		out.FailedIndexes = *s.FailedIndexes
	}
	if u := s.UncountedTerminatedPods; u != nil {
		out.Uncounted = len(u.Succeeded) + len(u.Failed)
	}
	for _, c := range s.Conditions {
		out.Conditions = append(out.Conditions, fmt.Sprintf("%s=%s/%s: %s", c.Type, c.Status, c.Reason, c.Message))
	}
	return out
}

// waitForIndexedStatus waits until the Job's whole status equals want and
// returns the Job.
func waitForIndexedStatus(t testing.TB, c kubernetes.Interface, job *batchv1.Job, want indexedStatus) *batchv1.Job {
	t.Helper()
	var got *batchv1.Job
	framework.WaitFor(t, fmt.Sprintf("Job %s/%s status %+v", job.Namespace, job.Name, want), func(ctx context.Context) (bool, error) {
		j, err := c.BatchV1().Jobs(job.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got = j
		if diff := cmp.Diff(want, indexedStatusOf(j)); diff != "" {
			return false, fmt.Errorf("status (-want +got):\n%s", diff)
		}
		return true, nil
	})
	return got
}

// indexPod returns the active pod of the Job's index, failing the test if
// there is none.
func indexPod(t testing.TB, c kubernetes.Interface, job *batchv1.Job, ix int) *corev1.Pod {
	t.Helper()
	for _, p := range activePods(t, c, job) {
		if p.Annotations[batchv1.JobCompletionIndexAnnotation] == strconv.Itoa(ix) {
			return &p
		}
	}
	t.Fatalf("Job %s/%s has no active pod for index %d", job.Namespace, job.Name, ix)
	return nil
}

// holdPod adds holdFinalizer to the pod.
func holdPod(t testing.TB, c kubernetes.Interface, pod *corev1.Pod) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": []string{holdFinalizer}}})
	if _, err := c.CoreV1().Pods(pod.Namespace).Patch(context.Background(), pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("adding %s to pod %s: %v", holdFinalizer, pod.Name, err)
	}
}

// releaseHeldPods removes holdFinalizer from every pod of the namespace.
func releaseHeldPods(t testing.TB, c kubernetes.Interface, ns string) {
	t.Helper()
	pods, err := c.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"$deleteFromPrimitiveList/finalizers": []string{holdFinalizer}}})
	for _, p := range pods.Items {
		if _, err := c.CoreV1().Pods(ns).Patch(context.Background(), p.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatalf("removing %s from pod %s: %v", holdFinalizer, p.Name, err)
		}
	}
}

// TestSuccessPolicySucceededIndexes: a rule on indexes 0 and 1 of four is
// met when both succeed; the pods of the pending indexes are deleted, not
// counted as failed, and the Job completes once they are gone.
func TestSuccessPolicySucceededIndexes(t *testing.T) {
	ctx := context.Background()
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	startController(t, testOptions())
	job := createJob(t, c, builder.MakeJob("sp-idx", ns).ManagedBy(jobcontroller.DefaultManagedBy).Indexed().
		Parallelism(4).Completions(4).SuccessPolicy(builder.SucceededIndexesRule("0,1")).Obj())
	waitForIndexedStatus(t, c, job, indexedStatus{Active: 4, FailedIndexes: "<nil>", Started: true})
	// Keep the pods of the pending indexes terminating once deleted.
	holdPod(t, c, indexPod(t, c, job, 2))
	holdPod(t, c, indexPod(t, c, job, 3))
	framework.SetIndexPodPhase(ctx, t, c, job, 3, corev1.PodRunning)
	waitForIndexedStatus(t, c, job, indexedStatus{Active: 4, Ready: 1, FailedIndexes: "<nil>", Started: true})

	framework.SetIndexPodPhase(ctx, t, c, job, 0, corev1.PodSucceeded)
	waitForIndexedStatus(t, c, job, indexedStatus{Active: 3, Ready: 1, Succeeded: 1, CompletedIndexes: "0", FailedIndexes: "<nil>", Started: true})

	framework.SetIndexPodPhase(ctx, t, c, job, 1, corev1.PodSucceeded)
	met := "SuccessCriteriaMet=True/SuccessPolicy: Matched rules at index 0"
	waitForIndexedStatus(t, c, job, indexedStatus{Terminating: 2, Succeeded: 2, CompletedIndexes: "0,1", FailedIndexes: "<nil>",
		Conditions: []string{met}, Started: true})
	// The terminating pods already lost the tracking finalizer: they will
	// never be counted as failed.
	waitNoFinalizerInNamespace(t, c, ns)

	releaseHeldPods(t, c, ns)
	waitForIndexedStatus(t, c, job, indexedStatus{Terminating: 0, Succeeded: 2, CompletedIndexes: "0,1", FailedIndexes: "<nil>",
		Conditions: []string{met, "Complete=True/SuccessPolicy: Matched rules at index 0"}, Started: true, Completed: true})
}

// TestSuccessPolicySucceededCount: a rule asking for any two succeeded
// indexes of five is met by indexes 0 and 1; index 4 never gets a pod, the
// running ones are deleted without counting as failed, then Complete.
func TestSuccessPolicySucceededCount(t *testing.T) {
	ctx := context.Background()
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	startController(t, testOptions())
	job := createJob(t, c, builder.MakeJob("sp-count", ns).ManagedBy(jobcontroller.DefaultManagedBy).Indexed().
		Parallelism(3).Completions(5).SuccessPolicy(builder.SucceededIndexesRule("4"), builder.SucceededCountRule(2)).Obj())
	waitForIndexedStatus(t, c, job, indexedStatus{Active: 3, FailedIndexes: "<nil>", Started: true})
	holdPod(t, c, indexPod(t, c, job, 2))

	framework.SetIndexPodPhase(ctx, t, c, job, 0, corev1.PodSucceeded)
	waitForIndexedStatus(t, c, job, indexedStatus{Active: 3, Succeeded: 1, CompletedIndexes: "0", FailedIndexes: "<nil>", Started: true})
	if diff := cmp.Diff([]string{"1", "2", "3"}, sortedIndexes(framework.WaitForActivePods(t, c, job, 3))); diff != "" {
		t.Errorf("active indexes (-want +got):\n%s", diff)
	}

	framework.SetIndexPodPhase(ctx, t, c, job, 1, corev1.PodSucceeded)
	met := "SuccessCriteriaMet=True/SuccessPolicy: Matched rules at index 1"
	waitForIndexedStatus(t, c, job, indexedStatus{Terminating: 1, Succeeded: 2, CompletedIndexes: "0,1", FailedIndexes: "<nil>",
		Conditions: []string{met}, Started: true})
	waitNoFinalizerInNamespace(t, c, ns)

	releaseHeldPods(t, c, ns)
	waitForIndexedStatus(t, c, job, indexedStatus{Terminating: 0, Succeeded: 2, CompletedIndexes: "0,1", FailedIndexes: "<nil>",
		Conditions: []string{met, "Complete=True/SuccessPolicy: Matched rules at index 1"}, Started: true, Completed: true})
	pods, err := framework.JobPods(ctx, c, job)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if p.Status.Phase != corev1.PodSucceeded {
			t.Errorf("pod %s (index %s) left in phase %s, want only the succeeded pods", p.Name, p.Annotations[batchv1.JobCompletionIndexAnnotation], p.Status.Phase)
		}
	}
}
