package job

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jobcontroller "jobkeeper.dev/jobkeeper/pkg/controller/job"
	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

// TestDuplicateRemovalKeepsStaleSuccess: the controller removes a
// duplicate pod of an index (without counting it) that its cache shows
// pending, but the pod succeeds, holding the tracking finalizer, between
// the controller's decision and its write. The success must be counted, not
// dropped with the finalizer: the apiserver must refuse the removal because
// the pod changed since the state the controller decided from.
//
// The controller's transport makes the duplicate succeed (with the test's
// own client) when the controller's first write to it is on its way.
func TestDuplicateRemovalKeepsStaleSuccess(t *testing.T) {
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	const dupName = "stale-dup"

	var once sync.Once
	var succeedErr error
	wrap := func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method != http.MethodGet && strings.HasSuffix(r.URL.Path, "/pods/"+dupName) {
				once.Do(func() {
					ctx := context.Background()
					dup, err := c.CoreV1().Pods(ns).Get(ctx, dupName, metav1.GetOptions{})
					if err == nil {
						err = framework.SetPodPhase(ctx, c, dup, corev1.PodSucceeded)
					}
					succeedErr = err
				})
			}
			return rt.RoundTrip(r)
		})
	}
	startControllerWithTransport(t, testOptions(), wrap)

	job := createJob(t, c, builder.MakeJob("stale", ns).ManagedBy(jobcontroller.DefaultManagedBy).
		Indexed().Completions(1).Parallelism(1).Obj())
	ctx := context.Background()
	// The controller's pod runs, so that of the two pods of index 0 the
	// pending duplicate is the one the controller removes.
	framework.WaitForActivePods(t, c, job, 1)
	framework.SetJobPodsPhase(ctx, t, c, job, corev1.PodRunning, 1)
	framework.WaitFor(t, "the running pod counted ready", func(ctx context.Context) (bool, error) {
		j, err := c.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{})
		return err == nil && j.Status.Ready != nil && *j.Status.Ready == 1, err
	})
	pods, err := framework.JobPods(ctx, c, job)
	if err != nil || len(pods) != 1 {
		t.Fatalf("want the Job's one pod, got %d (%v)", len(pods), err)
	}
	orig := pods[0]
	dup := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:            dupName,
			Namespace:       ns,
			Labels:          orig.Labels,
			Annotations:     orig.Annotations,
			OwnerReferences: orig.OwnerReferences,
			Finalizers:      orig.Finalizers,
		},
		Spec: *orig.Spec.DeepCopy(),
	}
	dup.Spec.NodeName = ""
	if _, err := c.CoreV1().Pods(ns).Create(ctx, dup, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	complete := pollUntil(30*time.Second, func(ctx context.Context) (bool, error) {
		j, err := c.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return findCond(j, batchv1.JobComplete), nil
	})
	once.Do(func() {}) // waits for the transport's write, if one is under way
	if succeedErr != nil {
		t.Fatalf("making the duplicate succeed: %v", succeedErr)
	}
	if !complete {
		logCrashState(t, c, job, 1, 0)
		t.Fatal("timed out waiting for the Job to complete with index 0 counted once")
	}
	got := getJob(t, c, job)
	if got.Status.Succeeded != 1 || got.Status.CompletedIndexes != "0" || got.Status.Failed != 0 {
		t.Errorf("status succeeded %d completedIndexes %q failed %d, want 1, \"0\", 0",
			got.Status.Succeeded, got.Status.CompletedIndexes, got.Status.Failed)
	}
	waitNoFinalizerInNamespace(t, c, ns)
}
