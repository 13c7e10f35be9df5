package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent"
	"jobkeeper.dev/jobkeeper/test/builder"
)

// Shape of the restart tests: the repro (an Indexed Job of 100
// completions, parallelism 20, `sleep 3`, default backoffLimit, `up` stopped
// at about 7 s) shrunk to keep each test near a minute.
const (
	restartCompletions = 40
	restartParallelism = 10
	// restartAfter is when `up` is stopped after the Job's creation.
	restartAfter = 7 * time.Second
)

// indexedSleeper is the restart tests' Job: each pod appends its pod name
// to <runs>/<index> on the host (a hostPath volume), so an index that ran
// twice shows as a file of two lines, then sleeps 3 s.
func indexedSleeper(name, runs string) *batchv1.Job {
	job := builder.MakeJob(name, "default").Indexed().Completions(restartCompletions).Parallelism(restartParallelism).BackoffLimit(6).
		Command("sh", "-c", "echo $HOSTNAME >> /runs/$JOB_COMPLETION_INDEX && sleep 3").Obj()
	spec := &job.Spec.Template.Spec
	spec.Volumes = []corev1.Volume{{Name: "runs", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: runs, Type: ptr.To(corev1.HostPathDirectoryOrCreate)}}}}
	spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "runs", MountPath: "/runs"}}
	return job
}

// finishAfterRestart waits for the Job to finish, then for its pods to
// lose the tracking finalizer, and returns the Job and its pods.
func finishAfterRestart(t *testing.T, c kubernetes.Interface, job *batchv1.Job) (*batchv1.Job, []corev1.Pod) {
	t.Helper()
	got := waitJob(t, c, job.Namespace, job.Name, "finished", func(j *batchv1.Job) bool {
		return hasCondition(batchv1.JobComplete)(j) || hasCondition(batchv1.JobFailed)(j)
	})
	var pods []corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		pods = podsOf(t, c, job)
		for _, p := range pods {
			for _, f := range p.Finalizers {
				if f == batchv1.JobTrackingFinalizer {
					return false, nil
				}
			}
		}
		return true, nil
	})
	if err != nil {
		t.Errorf("pods still hold the %s finalizer a minute after the Job finished", batchv1.JobTrackingFinalizer)
	}
	return got, pods
}

// runsPerIndex reads how many times each index ran.
func runsPerIndex(t *testing.T, runs string) map[int]int {
	t.Helper()
	out := map[int]int{}
	entries, err := os.ReadDir(runs)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		i, err := strconv.Atoi(e.Name())
		if err != nil {
			t.Errorf("unexpected file %s in the runs directory", e.Name())
			continue
		}
		b, err := os.ReadFile(filepath.Join(runs, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[i] = strings.Count(string(b), "\n")
	}
	return out
}

// TestUpKill9RestartLosesNoWork is issue 26's repro with kill -9: `up` dies
// while ten pods of an Indexed Job run; their containers run on (each
// under its sandbox), and the restarted `up` takes them over or reads how
// they ended. The Job completes with exactly its completions, no failure,
// every index run once, and no finalizer left.
func TestUpKill9RestartLosesNoWork(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	runs := filepath.Join(t.TempDir(), "runs")
	up, c, _ := startUp(t, dir)
	job, err := c.BatchV1().Jobs("default").Create(ctx, indexedSleeper("killed", runs), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(restartAfter)
	running := 0
	for _, p := range podsOf(t, c, job) {
		if p.Status.Phase == corev1.PodRunning {
			running++
		}
	}
	if err := syscall.Kill(-up.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-up.exited
	t.Logf("killed up with %d pods running", running)
	up, c, _ = startUp(t, dir)
	defer up.stop(t)

	got, pods := finishAfterRestart(t, c, job)
	if !hasCondition(batchv1.JobComplete)(got) {
		t.Fatalf("the Job did not complete: %+v", got.Status)
	}
	succeeded, failed := 0, 0
	for _, p := range pods {
		switch p.Status.Phase {
		case corev1.PodSucceeded:
			succeeded++
		case corev1.PodFailed:
			failed++
			t.Errorf("pod %s failed: %s %q", p.Name, p.Status.Reason, p.Status.Message)
		}
	}
	if got.Status.Succeeded != restartCompletions || succeeded != restartCompletions || got.Status.Failed != 0 || failed != 0 {
		t.Errorf("status succeeded %d failed %d, pods succeeded %d failed %d; want %d and 0", got.Status.Succeeded, got.Status.Failed, succeeded, failed, restartCompletions)
	}
	perIndex := runsPerIndex(t, runs)
	for i := range restartCompletions {
		if perIndex[i] != 1 {
			t.Errorf("index %d ran %d times, want once", i, perIndex[i])
		}
	}
}

// TestUpSIGTERMIsAGracefulNodeShutdown: SIGTERM stops `up` as a graceful
// node shutdown. The running pods get DisruptionTarget (reason
// TerminationByKubelet) and end Failed with the kubelet's reason and
// message; a Job whose podFailurePolicy ignores disruptions does not count
// them, replaces them after the restart, and completes with exactly its
// completions and no finalizer left.
func TestUpSIGTERMIsAGracefulNodeShutdown(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	runs := filepath.Join(t.TempDir(), "runs")
	// As upstream's, the Job controller's pod failure back-off counts the
	// ignored failures too: ten of them would hold the replacements for
	// minutes. A short one keeps the test short.
	args := []string{"--pod-failure-backoff=100ms", "--max-pod-failure-backoff=1s"}
	up, c, _ := startUp(t, dir, args...)
	job := indexedSleeper("stopped", runs)
	// The shell is its container's PID 1, which SIGTERM does not kill
	// without a handler (as on any node): it stops on SIGTERM as a
	// well-behaved workload does.
	job.Spec.Template.Spec.Containers[0].Command = []string{"sh", "-c", "trap 'exit 143' TERM; echo $HOSTNAME >> /runs/$JOB_COMPLETION_INDEX; sleep 3 & wait $!"}
	job.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
		Action:          batchv1.PodFailurePolicyActionIgnore,
		OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}},
	}}}
	job, err := c.BatchV1().Jobs("default").Create(ctx, job, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(restartAfter)
	up.stop(t)
	up, c, _ = startUp(t, dir, args...)
	defer up.stop(t)

	got, pods := finishAfterRestart(t, c, job)
	if !hasCondition(batchv1.JobComplete)(got) {
		t.Fatalf("the Job did not complete: %+v", got.Status)
	}
	succeeded, disrupted := 0, 0
	for _, p := range pods {
		switch p.Status.Phase {
		case corev1.PodSucceeded:
			succeeded++
		case corev1.PodFailed:
			var cond *corev1.PodCondition
			for i := range p.Status.Conditions {
				if p.Status.Conditions[i].Type == corev1.DisruptionTarget {
					cond = &p.Status.Conditions[i]
				}
			}
			if cond == nil || cond.Status != corev1.ConditionTrue || cond.Reason != corev1.PodReasonTerminationByKubelet ||
				p.Status.Reason != "Terminated" || p.Status.Message != "Pod was terminated in response to imminent node shutdown." {
				t.Errorf("failed pod %s: reason %q message %q DisruptionTarget %+v; want the node shutdown's", p.Name, p.Status.Reason, p.Status.Message, cond)
				continue
			}
			disrupted++
		}
	}
	t.Logf("%d pods disrupted by the shutdown", disrupted)
	if disrupted == 0 {
		t.Errorf("no pod was disrupted: the shutdown came after the Job's pods ran?")
	}
	if got.Status.Succeeded != restartCompletions || succeeded != restartCompletions || got.Status.Failed != 0 {
		t.Errorf("status succeeded %d failed %d, pods succeeded %d; want %d succeeded, no failure counted", got.Status.Succeeded, got.Status.Failed, succeeded, restartCompletions)
	}
}

// TestResetKillsWhatACrashLeft: the containers a `kill -9`ed `up` left
// running for the next one are killed by `jobkeeper reset`, which removes
// what they would have been taken over from.
func TestResetKillsWhatACrashLeft(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data")
	tag := strconv.FormatInt(time.Now().UnixNano()%1000000, 10)
	up, c, _ := startUp(t, dir)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "left"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox", Command: []string{"sleep", "3019" + tag},
			// As root: a tmpfs mounted in the data directory, and a
			// cgroup, both of which reset removes.
			VolumeMounts: []corev1.VolumeMount{{Name: "mem", MountPath: "/mem"}}}},
			Volumes: []corev1.Volume{{Name: "mem", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}}},
	}
	if _, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, c, "default", pod.Name, "running", time.Minute, phaseIs(corev1.PodRunning))
	cgroupRoot := nodeagent.RecordedCgroupRoot(filepath.Join(dir, "node"))
	if os.Geteuid() == 0 && cgroupRoot == "" {
		t.Error("up as root recorded no cgroup root")
	}
	sleeping := func() bool {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			if err == nil && string(b) == "sleep\x003019"+tag+"\x00" && alivePID(e.Name()) {
				return true
			}
		}
		return false
	}
	if !sleeping() {
		t.Fatal("the pod's process is not running")
	}
	if err := syscall.Kill(-up.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-up.exited
	if !sleeping() {
		t.Fatal("the pod's process died with up")
	}
	code, out := start(t, "reset", "--data-dir", dir).waitExit(t, 30*time.Second)
	if code != 0 || !strings.Contains(out, "containers left running by a previous up") {
		t.Errorf("reset: exit %d, output:\n%s", code, out)
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return !sleeping(), nil
	}); err != nil {
		t.Error("the pod's process still runs after reset")
	}
	if cgroupRoot != "" {
		if !strings.Contains(out, "Removed the pods' cgroups below "+cgroupRoot) {
			t.Errorf("reset did not say it removed the cgroups below %s:\n%s", cgroupRoot, out)
		}
		for _, dir := range []string{filepath.Join("/sys/fs/cgroup/memory", cgroupRoot), filepath.Join("/sys/fs/cgroup", cgroupRoot)} {
			if _, err := os.Stat(dir); err == nil {
				t.Errorf("%s is left after reset", dir)
			}
		}
	}
}
