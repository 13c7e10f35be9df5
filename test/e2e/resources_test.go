package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/test/builder"
)

// TestUpOOMKilledJobs runs, on up as root (where pods get cgroups) and on
// up as a user in a cgroup delegated to it, two Jobs whose container
// touches 300 MB under a 32Mi memory limit: the kernel kills it and the
// node reports the container terminated OOMKilled with exit code 137, as
// a kubelet does. The Job with a podFailurePolicy rule on exit code 137
// fails at once by that rule; the one without counts each failure against
// its backoffLimit. up's banner says that limits are enforced.
func TestUpOOMKilledJobs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the test runs up as root, and delegates a cgroup to a user as root")
	}
	t.Run("root", func(t *testing.T) {
		up, c, _ := startUp(t, t.TempDir())
		defer up.stop(t)
		oomKilledJobs(t, up, c)
	})
	t.Run("delegated", func(t *testing.T) {
		base, dataDir, exe := userInstall(t, "jobkeeper-delegated-")
		cred := &syscall.Credential{Uid: escapeUID, Gid: escapeUID}
		wrapper := delegateCgroup(t, base, exe, escapeUID)
		up, c, _ := startUpAs(t, cred, []string{"HOME=" + base}, wrapper, dataDir)
		defer up.stop(t)
		oomKilledJobs(t, up, c)
	})
}

// delegateCgroup hands uid a cgroup below this process's own, in every
// cgroup v1 hierarchy, as an administrator does (cgcreate -a/-t), and
// writes a script that starts exe in it: the path to run instead of exe.
// The cgroups are removed at the test's end, and must then be empty: up
// as a user removes what it made. cgroup v2 delegation is systemd's
// (Delegate=yes), which this test does not set up: skipped there.
func delegateCgroup(t *testing.T, base, exe string, uid int) string {
	t.Helper()
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		t.Skip("cgroup v2: a user's cgroups are delegated by systemd (Delegate=yes), not set up by this test")
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	own := ""
	for _, l := range strings.Split(string(b), "\n") {
		if parts := strings.SplitN(l, ":", 3); len(parts) == 3 && slices.Contains(strings.Split(parts[1], ","), "memory") {
			own = parts[2]
		}
	}
	if own == "" {
		t.Skip("no cgroup v1 memory hierarchy")
	}
	// One name in every hierarchy, as cgcreate -g '*:PATH' makes it: this
	// process may be elsewhere in the other hierarchies (a runtime that
	// only gives it a memory cgroup), where the parents are made too.
	name := filepath.Join(own, fmt.Sprintf("jobkeeper-e2e-delegated-%d", os.Getpid()))
	mounts, _ := filepath.Glob("/sys/fs/cgroup/*/cgroup.procs")
	var script strings.Builder
	script.WriteString("#!/bin/sh\nset -e\n")
	var dirs []string
	t.Cleanup(func() {
		// Deepest first: the delegated cgroups, then the parents made,
		// which another package's agent run as root at the same time may
		// still use (it removes them then).
		for i := len(dirs) - 1; i >= 0; i-- {
			err := os.Remove(dirs[i])
			if err != nil && (strings.HasSuffix(dirs[i], name) || !errors.Is(err, syscall.EBUSY) && !errors.Is(err, syscall.ENOTEMPTY)) {
				t.Errorf("removing %s: %v", dirs[i], err)
			}
		}
	})
	for _, procs := range mounts {
		mp := filepath.Dir(procs)
		dir := filepath.Join(mp, name)
		if err := mkdirCgroup(mp, dir, &dirs); err != nil {
			t.Fatal(err)
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range append(entries, nil) {
			p := dir
			if e != nil {
				p = filepath.Join(dir, e.Name())
			}
			if err := os.Chown(p, uid, uid); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := os.Stat(filepath.Join(mp, "cgroup.controllers")); err == nil {
			// A hybrid host's v2 hierarchy: the kernel lets a user move
			// a process there only within a subtree it owns from the
			// common ancestor on, which an administrator's v1 delegation
			// does not give; nor does up need it, as no controller is
			// there. Its directory is the user's, for up to make its own.
			continue
		}
		fmt.Fprintf(&script, "echo $$ > %s/cgroup.procs\n", dir)
	}
	fmt.Fprintf(&script, "exec %s \"$@\"\n", exe)
	t.Cleanup(func() {
		for _, mp := range mounts {
			left, _ := filepath.Glob(filepath.Join(filepath.Dir(mp), name, "*", "cgroup.procs"))
			if len(left) > 0 {
				t.Errorf("up left cgroups below the delegated one: %v", left)
				for _, l := range left {
					_ = os.Remove(filepath.Dir(l))
				}
			}
		}
	})
	wrapper := filepath.Join(base, "jobkeeper-in-cgroup")
	if err := os.WriteFile(wrapper, []byte(script.String()), 0o755); err != nil {
		t.Fatal(err)
	}
	return wrapper
}

// mkdirCgroup makes cgroup dir in the hierarchy mounted at mp, with the
// parents it lacks, appending each one made to made (parents first). A
// cpuset cgroup takes no process before it has cpus and memory nodes: each
// made gets its parent's.
func mkdirCgroup(mp, dir string, made *[]string) error {
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("%s exists", dir)
	}
	if parent := filepath.Dir(dir); parent != mp {
		if _, err := os.Stat(parent); os.IsNotExist(err) {
			if err := mkdirCgroup(mp, parent, made); err != nil {
				return err
			}
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	*made = append(*made, dir)
	if _, err := os.Stat(filepath.Join(dir, "cpuset.cpus")); err == nil {
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			v, err := os.ReadFile(filepath.Join(filepath.Dir(dir), f))
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, f), v, 0)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// oomKilledJobs is TestUpOOMKilledJobs on one up.
func oomKilledJobs(t *testing.T, up *process, c kubernetes.Interface) {
	ctx := context.Background()
	up.waitForOutput(t, regexp.MustCompile(`Pods and containers get cgroups with their cpu and memory limits`), 30*time.Second)
	ns := "default"
	hog := func(name string) *builder.JobWrapper {
		w := builder.MakeJob(name, ns).Command("dd", "if=/dev/zero", "of=/dev/null", "bs=300M", "count=1")
		w.Job.Spec.Template.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi")}
		return w
	}
	byRule := hog("oom-by-rule").BackoffLimit(6).PodFailurePolicy(
		builder.ExitCodeRule(batchv1.PodFailurePolicyActionFailJob, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 137)).Obj()
	byBackoff := hog("oom-by-backoff").BackoffLimit(1).Obj()
	for _, j := range []*batchv1.Job{byRule, byBackoff} {
		if _, err := c.BatchV1().Jobs(ns).Create(ctx, j, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		job        *batchv1.Job
		reason     string
		failedPods int32
	}{
		{byRule, batchv1.JobReasonPodFailurePolicy, 1},
		{byBackoff, batchv1.JobReasonBackoffLimitExceeded, 2},
	} {
		t.Run(tc.job.Name, func(t *testing.T) {
			var got *batchv1.Job
			err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, nodeTimeout, true, func(ctx context.Context) (bool, error) {
				j, err := c.BatchV1().Jobs(ns).Get(ctx, tc.job.Name, metav1.GetOptions{})
				got = j
				return err == nil && hasCondition(batchv1.JobFailed)(j), nil
			})
			if err != nil {
				t.Fatalf("job %s never failed; its pods:\n%s", tc.job.Name, jobPodsAndEvents(c, ns, tc.job.Name))
			}
			for _, cond := range got.Status.Conditions {
				if cond.Type == batchv1.JobFailed && cond.Reason != tc.reason {
					t.Errorf("Failed condition reason %q (%s), want %q", cond.Reason, cond.Message, tc.reason)
				}
			}
			if got.Status.Failed != tc.failedPods {
				t.Errorf("failed %d, want %d", got.Status.Failed, tc.failedPods)
			}
			for _, p := range podsOf(t, c, tc.job) {
				if len(p.Status.ContainerStatuses) != 1 {
					t.Errorf("pod %s: container statuses %+v", p.Name, p.Status.ContainerStatuses)
					continue
				}
				term := p.Status.ContainerStatuses[0].State.Terminated
				if term == nil || term.Reason != "OOMKilled" || term.ExitCode != 137 {
					t.Errorf("pod %s: container terminated %+v, want OOMKilled with exit code 137", p.Name, term)
				}
			}
		})
	}
}

// TestUpExtendedResources: a pod asking for an extended resource the node
// does not advertise stays Pending with the scheduler's FailedScheduling
// message; on an up started with --extended-resource example.com/gpu=1
// one such pod runs and a second waits until the first is gone.
func TestUpExtendedResources(t *testing.T) {
	ctx := context.Background()
	ns := "default"
	gpuPod := func(name string) *corev1.Pod {
		p := builder.MakePod(name, ns).Command("sleep", "3600").Obj()
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{"example.com/gpu": resource.MustParse("1")}
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"example.com/gpu": resource.MustParse("1")}
		return p
	}
	unscheduled := func(p *corev1.Pod) bool {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				return true
			}
		}
		return false
	}
	want := "0/1 nodes are available: 1 Insufficient example.com/gpu."

	t.Run("not advertised", func(t *testing.T) {
		up, c, _ := startUp(t, t.TempDir())
		defer up.stop(t)
		p, err := c.CoreV1().Pods(ns).Create(ctx, gpuPod("wants-gpu"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := waitPod(t, c, ns, p.Name, "unschedulable", nodeTimeout, unscheduled)
		for _, cond := range got.Status.Conditions {
			if cond.Type == corev1.PodScheduled && (cond.Reason != corev1.PodReasonUnschedulable || cond.Message != want) {
				t.Errorf("PodScheduled %+v, want Unschedulable %q", cond, want)
			}
		}
		events := podEvents(t, c, got, func(evs []string) bool { return strings.Contains(strings.Join(evs, "\n"), want) })
		if !strings.Contains(strings.Join(events, "\n"), "FailedScheduling: "+want) {
			t.Errorf("no FailedScheduling event %q: %q", want, events)
		}
	})

	t.Run("advertised", func(t *testing.T) {
		up, c, _ := startUp(t, t.TempDir(), "--extended-resource", "example.com/gpu=1")
		defer up.stop(t)
		node := waitNode(t, c)
		if q := node.Status.Allocatable["example.com/gpu"]; q.Value() != 1 {
			t.Errorf("node allocatable example.com/gpu %v, want 1", q.String())
		}
		if node.Status.NodeInfo.KernelVersion == "" || node.Status.NodeInfo.OSImage == "" {
			t.Errorf("node info %+v lacks the kernel or the OS image", node.Status.NodeInfo)
		}
		first, err := c.CoreV1().Pods(ns).Create(ctx, gpuPod("gpu-1"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		waitPod(t, c, ns, first.Name, "running", nodeTimeout, phaseIs(corev1.PodRunning))
		second, err := c.CoreV1().Pods(ns).Create(ctx, gpuPod("gpu-2"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The node has no room for it while the first runs.
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 3*time.Second, true, func(ctx context.Context) (bool, error) {
			p, err := c.CoreV1().Pods(ns).Get(ctx, second.Name, metav1.GetOptions{})
			return err == nil && p.Spec.NodeName != "", nil
		})
		if err == nil {
			t.Fatal("the second pod was bound while the first held the node's only example.com/gpu")
		}
		if err := c.CoreV1().Pods(ns).Delete(ctx, first.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
		waitPod(t, c, ns, second.Name, "running", nodeTimeout, phaseIs(corev1.PodRunning))
	})
}

// waitNode waits for up's one Node to be Ready and returns it.
func waitNode(t *testing.T, c kubernetes.Interface) *corev1.Node {
	t.Helper()
	var node *corev1.Node
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, nodeTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 1 {
			return false, nil
		}
		node = &list.Items[0]
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal("up's node did not become Ready")
	}
	return node
}

// TestUpEvictsOverLocalStorageLimits: a pod that writes 4Mi into an
// emptyDir whose sizeLimit is 1Mi, and one that logs 3MB under a 1Mi
// ephemeral-storage limit, are evicted as the kubelet evicts them: Failed,
// reason Evicted, the kubelet's message, a DisruptionTarget condition and
// a Warning event.
func TestUpEvictsOverLocalStorageLimits(t *testing.T) {
	ctx := context.Background()
	ns := "default"
	up, c, _ := startUp(t, t.TempDir())
	defer up.stop(t)
	limit := resource.MustParse("1Mi")
	fills := builder.MakePod("fills-its-volume", ns).Command("sh", "-c", "dd if=/dev/zero of=/data/f bs=1M count=4 && sleep 3600").Obj()
	fills.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	fills.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &limit}}}}
	chatty := builder.MakePod("logs-too-much", ns).Command("sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' x; echo; sleep 3600").Obj()
	chatty.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceEphemeralStorage: limit}
	for _, tc := range []struct {
		pod  *corev1.Pod
		want string
	}{
		{fills, `Usage of EmptyDir volume "data" exceeds the limit "1Mi". `},
		// Its only container's limit is also the pod's, which the
		// kubelet checks first.
		{chatty, "Pod ephemeral local storage usage exceeds the total limit of containers 1Mi. "},
	} {
		t.Run(tc.pod.Name, func(t *testing.T) {
			p, err := c.CoreV1().Pods(ns).Create(ctx, tc.pod, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got := waitPod(t, c, ns, p.Name, "failed", nodeTimeout, phaseIs(corev1.PodFailed))
			if got.Status.Reason != "Evicted" || got.Status.Message != tc.want {
				t.Errorf("status reason %q, message %q; want Evicted, %q", got.Status.Reason, got.Status.Message, tc.want)
			}
			found := false
			for _, cond := range got.Status.Conditions {
				if cond.Type == corev1.DisruptionTarget {
					found = cond.Status == corev1.ConditionTrue && cond.Reason == corev1.PodReasonTerminationByKubelet && cond.Message == tc.want
				}
			}
			if !found {
				t.Errorf("no DisruptionTarget condition TerminationByKubelet %q: %+v", tc.want, got.Status.Conditions)
			}
			events := podEvents(t, c, got, func(evs []string) bool { return strings.Contains(strings.Join(evs, "\n"), "Evicted: "+tc.want) })
			if !strings.Contains(strings.Join(events, "\n"), "Evicted: "+tc.want) {
				t.Errorf("no Evicted event: %q", events)
			}
		})
	}
}
