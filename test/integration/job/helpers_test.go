package job

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	jobcontroller "jobkeeper.dev/jobkeeper/pkg/controller/job"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

// testOptions are the controller options of most tests: upstream's, with a
// short batch period and pod failure backoff so tests run fast.
func testOptions() jobcontroller.Options {
	return jobcontroller.Options{SyncBatchPeriod: 10 * time.Millisecond, PodFailureBackoff: 20 * time.Millisecond}
}

// controllerRun is one running controller instance with its own informers.
type controllerRun = framework.JobControllerRun

// startController starts a fresh controller (fresh client and informers)
// and stops it when the test ends.
func startController(t testing.TB, opts jobcontroller.Options) *controllerRun {
	t.Helper()
	return framework.StartJobController(t, opts, nil)
}

// startControllerWithTransport is startController with the client's
// transport wrapped by wrap (if not nil), e.g. to make some requests fail.
func startControllerWithTransport(t testing.TB, opts jobcontroller.Options, wrap func(http.RoundTripper) http.RoundTripper) *controllerRun {
	t.Helper()
	return framework.StartJobController(t, opts, func(cfg *rest.Config) {
		if wrap != nil {
			cfg.Wrap(wrap)
		}
	})
}

// startControllerWithConfig is startController with the client's config
// changed by configure, e.g. its encoding or its transport.
func startControllerWithConfig(t testing.TB, opts jobcontroller.Options, configure func(*rest.Config)) *controllerRun {
	t.Helper()
	return framework.StartJobController(t, opts, configure)
}

// createJob creates the Job and returns it as stored.
func createJob(t testing.TB, c kubernetes.Interface, job *batchv1.Job) *batchv1.Job {
	t.Helper()
	got, err := c.BatchV1().Jobs(job.Namespace).Create(context.Background(), job, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating job: %v", err)
	}
	return got
}

// getJob reads the Job.
func getJob(t testing.TB, c kubernetes.Interface, job *batchv1.Job) *batchv1.Job {
	t.Helper()
	got, err := c.BatchV1().Jobs(job.Namespace).Get(context.Background(), job.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading job: %v", err)
	}
	return got
}

// updateJob applies mutate to the latest Job, retrying on conflicts.
var updateJob = framework.UpdateJob

// conditionSummary lists the Job's conditions as "Type=Status/Reason".
func conditionSummary(job *batchv1.Job) []string {
	var out []string
	for _, c := range job.Status.Conditions {
		out = append(out, string(c.Type)+"="+string(c.Status)+"/"+c.Reason)
	}
	return out
}

// checkConditions fails the test unless the Job has exactly want.
func checkConditions(t testing.TB, job *batchv1.Job, want ...string) {
	t.Helper()
	if diff := cmp.Diff(want, conditionSummary(job)); diff != "" {
		t.Errorf("conditions (-want +got):\n%s", diff)
	}
}

// podsWithFinalizer counts the namespace's pods holding the tracking finalizer.
func podsWithFinalizer(ctx context.Context, c kubernetes.Interface, ns string) (int, error) {
	pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range pods.Items {
		for _, f := range p.Finalizers {
			if f == batchv1.JobTrackingFinalizer {
				n++
			}
		}
	}
	return n, nil
}

// waitNoFinalizerInNamespace waits until no pod of ns holds the finalizer
// (orphaned pods included).
func waitNoFinalizerInNamespace(t testing.TB, c kubernetes.Interface, ns string) {
	t.Helper()
	framework.WaitFor(t, "no pod in "+ns+" holding the tracking finalizer", func(ctx context.Context) (bool, error) {
		n, err := podsWithFinalizer(ctx, c, ns)
		return err == nil && n == 0, err
	})
}

// activePods lists the Job's active pods.
func activePods(t testing.TB, c kubernetes.Interface, job *batchv1.Job) []corev1.Pod {
	t.Helper()
	pods, err := framework.JobPods(context.Background(), c, job)
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			out = append(out, p)
		}
	}
	return out
}
