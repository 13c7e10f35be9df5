package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"jobkeeper.dev/jobkeeper/test/builder"
)

// nodeTimeout bounds the waits of the node agent end-to-end tests (a failing
// Job's pod back-off alone is 10s + 20s).
const nodeTimeout = 2 * time.Minute

// waitJob polls until cond holds for the Job.
func waitJob(t *testing.T, c kubernetes.Interface, ns, name, what string, cond func(*batchv1.Job) bool) *batchv1.Job {
	t.Helper()
	var last *batchv1.Job
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, nodeTimeout, true, func(ctx context.Context) (bool, error) {
		j, err := c.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = j
		return cond(j), nil
	})
	if err != nil {
		status := "never read"
		if last != nil {
			status = fmt.Sprintf("%+v", last.Status)
		}
		t.Fatalf("job %s/%s never %s; last status %s\nits pods: %s", ns, name, what, status, jobPodsAndEvents(c, ns, name))
	}
	return last
}

// jobPodsAndEvents describes the pods of Job ns/name, with their waiting
// messages and events, for a failure message.
func jobPodsAndEvents(c kubernetes.Interface, ns, name string) string {
	ctx := context.Background()
	pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + name})
	if err != nil {
		return "listing them: " + err.Error()
	}
	var out []string
	for _, p := range pods.Items {
		line := describePods([]corev1.Pod{p})
		for _, s := range p.Status.ContainerStatuses {
			if s.State.Waiting != nil && s.State.Waiting.Message != "" {
				line += fmt.Sprintf("\n  %s waiting: %s", s.Name, s.State.Waiting.Message)
			}
		}
		events, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name})
		if err == nil {
			for _, e := range events.Items {
				line += fmt.Sprintf("\n  event %s %s: %s (x%d)", e.Type, e.Reason, e.Message, e.Count)
			}
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

// hasCondition reports whether the Job has condition ct True.
func hasCondition(ct batchv1.JobConditionType) func(*batchv1.Job) bool {
	return func(j *batchv1.Job) bool {
		for _, c := range j.Status.Conditions {
			if c.Type == ct && c.Status == corev1.ConditionTrue {
				return true
			}
		}
		return false
	}
}

// podsOf lists the pods of a Job.
func podsOf(t *testing.T, c kubernetes.Interface, job *batchv1.Job) []corev1.Pod {
	t.Helper()
	pods, err := c.CoreV1().Pods(job.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + job.Name})
	if err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// pidOf reads the process id from a process runtime container ID.
func pidOf(t *testing.T, cs corev1.ContainerStatus) int {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimPrefix(cs.ContainerID, "process://"))
	if err != nil {
		t.Fatalf("container ID %q: %v", cs.ContainerID, err)
	}
	return pid
}

// alive reports whether pid runs (and is not a zombie).
func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(data))
	return len(f) <= 2 || f[2] != "Z"
}

// TestUpRunsJobsOnTheLocalNode is the node agent issue's acceptance test:
// real shell commands run as host processes by `jobkeeper up`.
func TestUpRunsJobsOnTheLocalNode(t *testing.T) {
	ctx := context.Background()
	dataDir := t.TempDir()
	up, c, _ := startUp(t, dataDir)
	defer up.stop(t)
	ns := "default"

	t.Run("indexed job logs its index", func(t *testing.T) {
		job := builder.MakeJob("hello", ns).Indexed().Completions(3).Parallelism(3).
			Command("sh", "-c", "echo hello from $JOB_COMPLETION_INDEX").Obj()
		job, err := c.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		waitJob(t, c, ns, job.Name, "completed", hasCondition(batchv1.JobComplete))
		var idx []string
		for _, p := range podsOf(t, c, job) {
			i := p.Annotations[batchv1.JobCompletionIndexAnnotation]
			logs, err := c.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
			if err != nil {
				t.Fatalf("logs of %s: %v", p.Name, err)
			}
			if want := "hello from " + i + "\n"; string(logs) != want {
				t.Errorf("pod %s: logs %q, want %q", p.Name, logs, want)
			}
			idx = append(idx, i)
		}
		sort.Strings(idx)
		if strings.Join(idx, ",") != "0,1,2" {
			t.Errorf("indexes %v", idx)
		}
	})

	t.Run("failing job hits its backoff limit", func(t *testing.T) {
		job := builder.MakeJob("failing", ns).BackoffLimit(2).Command("sh", "-c", "exit 1").Obj()
		job, err := c.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := waitJob(t, c, ns, job.Name, "failed", hasCondition(batchv1.JobFailed))
		for _, cond := range got.Status.Conditions {
			if cond.Type == batchv1.JobFailed && cond.Reason != batchv1.JobReasonBackoffLimitExceeded {
				t.Errorf("Failed reason %q", cond.Reason)
			}
		}
		if got.Status.Failed != 3 || len(podsOf(t, c, job)) != 3 {
			t.Errorf("failed %d, pods %d; want 3 and 3", got.Status.Failed, len(podsOf(t, c, job)))
		}
	})

	t.Run("suspend kills the processes and resume starts new ones", func(t *testing.T) {
		// A PID 1 that handles SIGTERM, so the deletion does not take the
		// grace period.
		job := builder.MakeJob("sleepers", ns).Parallelism(2).Completions(2).Command("sh", "-c", "trap 'exit 143' TERM; sleep 300 & wait").Obj()
		job, err := c.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		running := func() map[types.UID]int {
			pids := map[types.UID]int{}
			err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, nodeTimeout, true, func(context.Context) (bool, error) {
				clear(pids)
				for _, p := range podsOf(t, c, job) {
					if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
						pids[p.UID] = pidOf(t, p.Status.ContainerStatuses[0])
					}
				}
				return len(pids) == 2, nil
			})
			if err != nil {
				t.Fatalf("want 2 running pods, have %v", pids)
			}
			return pids
		}
		before := running()
		for _, pid := range before {
			if !alive(pid) {
				t.Errorf("process %d of a running pod is not alive", pid)
			}
		}
		if _, err := c.BatchV1().Jobs(ns).Patch(ctx, job.Name, types.MergePatchType, []byte(`{"spec":{"suspend":true}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		waitJob(t, c, ns, job.Name, "suspended", hasCondition(batchv1.JobSuspended))
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, nodeTimeout, true, func(context.Context) (bool, error) {
			return len(podsOf(t, c, job)) == 0, nil
		}); err != nil {
			t.Fatal("pods of the suspended Job were not deleted")
		}
		for _, pid := range before {
			if alive(pid) {
				t.Errorf("process %d survived the suspension", pid)
			}
		}
		if _, err := c.BatchV1().Jobs(ns).Patch(ctx, job.Name, types.MergePatchType, []byte(`{"spec":{"suspend":false}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		for uid, pid := range running() {
			if _, old := before[uid]; old || !alive(pid) {
				t.Errorf("resumed pod %s: old=%v, process %d alive=%v", uid, old, pid, alive(pid))
			}
		}
		bg := metav1.DeletePropagationForeground
		if err := c.BatchV1().Jobs(ns).Delete(ctx, job.Name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("ttl removes the job, its pods, their dirs and logs", func(t *testing.T) {
		// Record the Job's pods as they appear: it may finish and be cleaned
		// up faster than a poll would see them.
		w, err := c.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=ttl"})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		var mu sync.Mutex
		uids := map[types.UID]bool{}
		go func() {
			for ev := range w.ResultChan() {
				if p, ok := ev.Object.(*corev1.Pod); ok {
					mu.Lock()
					uids[p.UID] = true
					mu.Unlock()
				}
			}
		}()
		job := builder.MakeJob("ttl", ns).TTLSecondsAfterFinished(0).Command("sh", "-c", "echo bye").Obj()
		job, err = c.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pollGone(t, func(ctx context.Context) error {
			_, err := c.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{})
			return err
		})
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, nodeTimeout, true, func(context.Context) (bool, error) {
			return len(podsOf(t, c, job)) == 0, nil
		}); err != nil {
			t.Fatal("pods of the expired Job were not deleted")
		}
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, nodeTimeout, true, func(context.Context) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			if len(uids) == 0 {
				return false, nil
			}
			for uid := range uids {
				if _, err := os.Stat(filepath.Join(dataDir, "node", "pods", string(uid))); err == nil {
					return false, nil
				}
			}
			return true, nil
		}); err != nil {
			t.Errorf("pod directories of %v were not removed", uids)
		}
	})
}

// TestUpSimulatedRuntimeBigJob runs a big Job on the simulated runtime. It
// runs only with JOBKEEPER_E2E_SIMULATED_COMPLETIONS set (the check
// is 10000), and reports the time. JOBKEEPER_E2E_UP_ARGS adds flags to `up`.
func TestUpSimulatedRuntimeBigJob(t *testing.T) {
	v := os.Getenv("JOBKEEPER_E2E_SIMULATED_COMPLETIONS")
	if v == "" {
		t.Skip("set JOBKEEPER_E2E_SIMULATED_COMPLETIONS to run")
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--runtime", "simulated", "--max-pods", "1000"}
	// For example "--kube-api-qps=1000 --kube-api-burst=2000" to measure the
	// node agent rather than the controllers' default client rate limit.
	args = append(args, strings.Fields(os.Getenv("JOBKEEPER_E2E_UP_ARGS"))...)
	up, c, _ := startUp(t, t.TempDir(), args...)
	defer up.stop(t)
	start := time.Now()
	job := builder.MakeJob("big", "default").Completions(int32(n)).Parallelism(500).Obj()
	if _, err := c.BatchV1().Jobs("default").Create(context.Background(), job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(context.Background(), time.Second, 30*time.Minute, true, func(ctx context.Context) (bool, error) {
		j, err := c.BatchV1().Jobs("default").Get(ctx, job.Name, metav1.GetOptions{})
		return err == nil && hasCondition(batchv1.JobComplete)(j), nil
	})
	if err != nil {
		t.Fatal("the big Job did not complete")
	}
	t.Logf("%d completions on the simulated runtime: Complete in %s", n, time.Since(start).Round(time.Millisecond))
}
