package nodeagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/manager"
	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

var startControllers sync.Once

// startJobControllers runs jobkeeper's Job and TTL controllers (as in
// `jobkeeper up`) for the rest of the test binary.
func startJobControllers(t *testing.T) {
	startControllers.Do(func() {
		opts := manager.NewOptions()
		opts.ManageUnclaimedJobs = true
		opts.MetricsBindAddress, opts.HealthProbeBindAddress = "0", "0"
		opts.PodFailureBackoff = 10 * time.Millisecond
		opts.SyncBatchPeriod = 10 * time.Millisecond
		opts.KubeAPIQPS, opts.KubeAPIBurst = 500, 1000
		m, err := manager.New(framework.Config(), opts)
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = m.Run(context.Background()) }()
	})
}

// childJob is a Job whose pods re-run this test binary in mode.
func childJob(name, ns, mode string) *builder.JobWrapper {
	j := builder.MakeJob(name, ns).Command(os.Args[0])
	c := &j.Job.Spec.Template.Spec.Containers[0]
	c.Env = append(c.Env, corev1.EnvVar{Name: childEnv, Value: mode})
	return j
}

func createJob(t *testing.T, c kubernetes.Interface, job *batchv1.Job) *batchv1.Job {
	t.Helper()
	got, err := c.BatchV1().Jobs(job.Namespace).Create(context.Background(), job, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating job: %v", err)
	}
	return got
}

func jobPods(t *testing.T, c kubernetes.Interface, job *batchv1.Job) []corev1.Pod {
	t.Helper()
	pods, err := framework.JobPods(context.Background(), c, job)
	if err != nil {
		t.Fatal(err)
	}
	return pods
}

func TestIndexedJobCompletesAndEachPodLogsItsIndex(t *testing.T) {
	startSharedAgent(t)
	startJobControllers(t)
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	job := createJob(t, c, childJob("indexed", ns, "hello").Indexed().Completions(3).Parallelism(3).Obj())
	framework.WaitForJobCondition(t, c, job, batchv1.JobComplete)
	var got []string
	for _, p := range jobPods(t, c, job) {
		idx := p.Annotations[batchv1.JobCompletionIndexAnnotation]
		logs := logsOf(t, c, ns, p.Name, &corev1.PodLogOptions{})
		if want := fmt.Sprintf("hello from %s\n", idx); logs != want {
			t.Errorf("pod %s (index %s) logs = %q, want %q", p.Name, idx, logs, want)
		}
		got = append(got, idx)
	}
	sort.Strings(got)
	if strings.Join(got, ",") != "0,1,2" {
		t.Errorf("indexes = %v, want 0,1,2", got)
	}
}

func TestFailingJobHitsBackoffLimit(t *testing.T) {
	startSharedAgent(t)
	startJobControllers(t)
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	job := createJob(t, c, childJob("failing", ns, "fail").BackoffLimit(2).Obj())
	job = framework.WaitForJobCondition(t, c, job, batchv1.JobFailed)
	for _, cond := range job.Status.Conditions {
		if cond.Type == batchv1.JobFailed && cond.Reason != batchv1.JobReasonBackoffLimitExceeded {
			t.Errorf("Failed reason = %q, want %q", cond.Reason, batchv1.JobReasonBackoffLimitExceeded)
		}
	}
	if job.Status.Failed != 3 {
		t.Errorf("failed = %d, want 3", job.Status.Failed)
	}
	if n := len(jobPods(t, c, job)); n != 3 {
		t.Errorf("pods = %d, want 3", n)
	}
}

func TestSuspendStopsProcessesAndResumeStartsNewOnes(t *testing.T) {
	startSharedAgent(t)
	startJobControllers(t)
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	job := createJob(t, c, childJob("sleepers", ns, "sleep").Parallelism(2).Completions(2).Obj())
	runningPIDs := func() map[types.UID]int {
		out := map[types.UID]int{}
		framework.WaitFor(t, "2 running pods", func(ctx context.Context) (bool, error) {
			pods, err := framework.JobPods(ctx, c, job)
			if err != nil {
				return false, err
			}
			clear(out)
			for _, p := range pods {
				if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
					out[p.UID] = pidOf(t, p.Status.ContainerStatuses[0])
				}
			}
			return len(out) == 2, nil
		})
		return out
	}
	before := runningPIDs()

	patch := []byte(`{"spec":{"suspend":true}}`)
	if _, err := c.BatchV1().Jobs(ns).Patch(context.Background(), job.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.WaitForJobCondition(t, c, job, batchv1.JobSuspended)
	framework.WaitFor(t, "the job's pods to be deleted", func(ctx context.Context) (bool, error) {
		pods, err := framework.JobPods(ctx, c, job)
		return len(pods) == 0, err
	})
	for uid, pid := range before {
		if !processGone(pid) {
			t.Errorf("process %d of pod %s survived the suspension", pid, uid)
		}
	}

	patch = []byte(`{"spec":{"suspend":false}}`)
	if _, err := c.BatchV1().Jobs(ns).Patch(context.Background(), job.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	after := runningPIDs()
	for uid, pid := range after {
		if _, old := before[uid]; old {
			t.Errorf("pod %s is from before the suspension", uid)
		}
		if processGone(pid) {
			t.Errorf("process %d of resumed pod %s is not running", pid, uid)
		}
	}
	// Do not leave sleeping processes behind.
	if err := c.BatchV1().Jobs(ns).Delete(context.Background(), job.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
		t.Fatal(err)
	}
}

func TestFinishedJobWithTTLIsCleanedUp(t *testing.T) {
	startSharedAgent(t)
	startJobControllers(t)
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	// Record every pod of the namespace as it appears: the Job may finish and
	// be cleaned up faster than a poll would see its pods.
	w, err := c.CoreV1().Pods(ns).Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var mu sync.Mutex
	var uids []types.UID
	go func() {
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type == watch.Added {
				mu.Lock()
				uids = append(uids, p.UID)
				mu.Unlock()
			}
		}
	}()
	job := createJob(t, c, childJob("ttl", ns, "hello").Completions(2).Parallelism(2).TTLSecondsAfterFinished(0).Obj())
	framework.WaitFor(t, "the job to be deleted", func(ctx context.Context) (bool, error) {
		_, err := c.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	framework.WaitFor(t, "the pods to be deleted", func(ctx context.Context) (bool, error) {
		pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0, err
	})
	framework.WaitFor(t, "the pods' directories and logs to be removed", func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		if len(uids) != 2 {
			return false, fmt.Errorf("saw %d pods, want 2", len(uids))
		}
		for _, uid := range uids {
			if _, err := os.Stat(filepath.Join(sharedDataDir, "pods", string(uid))); err == nil {
				return false, nil
			}
		}
		return true, nil
	})
}
