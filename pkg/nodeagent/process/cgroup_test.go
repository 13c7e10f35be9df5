package process

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/cgroup"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// testCgroups is a cgroup manager below a root of the test's own,
// removed at its end; the test is skipped where cgroups cannot be written.
func testCgroups(tb testing.TB, name string) *cgroup.Manager {
	tb.Helper()
	root, err := cgroup.DefaultRoot(fmt.Sprintf("%s-%d", name, os.Getpid()))
	if err != nil {
		tb.Skip(err)
	}
	m, err := cgroup.New(context.Background(), root)
	if err != nil {
		tb.Skipf("no cgroups: %v", err)
	}
	tb.Cleanup(func() {
		if err := m.RemoveAll(); err != nil {
			tb.Errorf("removing the test's cgroups: %v", err)
		}
	})
	return m
}

// startAttempt starts spec's attempt, stopped at the test's end.
func startAttempt(t *testing.T, rt *Runtime, spec runtime.Spec) runtime.Handle {
	t.Helper()
	h, err := rt.Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.Stop(0)
		<-h.Done()
	})
	return h
}

// cgroupRuntime is a runtime with a cgroup manager of the test's own and
// a spec whose pod has a cgroup, its container with limits; the test is
// skipped where cgroups cannot be written (not root).
func cgroupRuntime(t *testing.T, mode string, limits corev1.ResourceList) (*Runtime, runtime.Spec, *cgroup.Manager) {
	t.Helper()
	rt, spec, m, _ := cgroupRuntimeAndPod(t, mode, limits)
	return rt, spec, m
}

// cgroupRuntimeAndPod is cgroupRuntime that also returns the pod.
func cgroupRuntimeAndPod(t *testing.T, mode string, limits corev1.ResourceList) (*Runtime, runtime.Spec, *cgroup.Manager, *corev1.Pod) {
	t.Helper()
	m := testCgroups(t, "process-test")
	rt, err := New(context.Background(), Options{StateDir: filepath.Join(t.TempDir(), "state"), Cgroups: m})
	if err != nil {
		t.Fatal(err)
	}
	c := corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Limits: limits}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID("u-" + strings.ReplaceAll(t.Name(), "/", "-"))}, Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}
	name, err := m.EnsurePod(pod)
	if err != nil {
		t.Fatal(err)
	}
	spec := childSpec(t, mode)
	spec.CgroupParent, spec.Resources = name.ToCgroupfs(), cgroup.ContainerResources(nil, &c, m.Unified())
	return rt, spec, m, pod
}

// TestMemoryLimit: a container that touches more memory than its limit
// is killed by the kernel and reported as container runtimes report it,
// OOMKilled with exit code 137; with room enough it completes.
func TestMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		limit string
		want  runtime.Result
	}{
		{"64Mi", runtime.Result{ExitCode: 137, Signal: int32(syscall.SIGKILL), Reason: runtime.ReasonOOMKilled}},
		{"512Mi", runtime.Result{ExitCode: 0, Reason: "Completed"}},
	} {
		t.Run(tc.limit, func(t *testing.T) {
			rt, spec, _ := cgroupRuntime(t, "alloc", corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(tc.limit)})
			res := wait(t, startAttempt(t, rt, spec))
			if res.ExitCode != tc.want.ExitCode || res.Signal != tc.want.Signal || res.Reason != tc.want.Reason {
				t.Errorf("result = %+v, want exit code %d, signal %d, reason %s", res, tc.want.ExitCode, tc.want.Signal, tc.want.Reason)
			}
		})
	}
}

// TestCPULimit: a busy container limited to 200m CPU uses at most that
// (with 25% for the measure's edges), read from its cgroup's accounting.
// Only the upper bound is checked: a loaded machine may give it less.
func TestCPULimit(t *testing.T) {
	rt, spec, m := cgroupRuntime(t, "", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m")})
	spec.Command, spec.Env = []string{"/bin/sh", "-c", "while :; do :; done"}, []string{"PATH=/usr/bin:/bin"}
	startAttempt(t, rt, spec)
	cg := m.OpenContainer(spec.CgroupParent + "/" + cgroup.ContainerLeaf(spec.ContainerName, spec.Attempt))
	before, err := cg.CPUUsage()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	time.Sleep(2 * time.Second)
	used, _ := cg.CPUUsage()
	share := float64(used-before) / float64(time.Since(start))
	t.Logf("CPU used: %.3f of a CPU, limit 0.2", share)
	if share > 0.25 {
		t.Errorf("the container used %.3f of a CPU over 2s; its limit is 0.2", share)
	}
}

// TestContainerProcessesInTheirCgroup: the main process and an exec'd
// command are in the container's cgroup, the sandbox is not, and the
// cgroup is removed once the attempt ended.
func TestContainerProcessesInTheirCgroup(t *testing.T) {
	rt, spec, m := cgroupRuntime(t, "sleep", corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")})
	h := startAttempt(t, rt, spec)
	leaf := spec.CgroupParent + "/" + cgroup.ContainerLeaf(spec.ContainerName, spec.Attempt)
	// The process's memory cgroup: v1's line naming memory, or v2's
	// one line.
	memoryCgroup := func(pid int) string {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			parts := strings.SplitN(l, ":", 3)
			if len(parts) != 3 {
				continue
			}
			if slices.Contains(strings.Split(parts[1], ","), "memory") || parts[0] == "0" && parts[1] == "" && !strings.Contains(string(b), "memory") {
				return parts[2]
			}
		}
		return ""
	}
	if got := memoryCgroup(h.PID()); got != leaf {
		t.Errorf("main process in %q, want %q", got, leaf)
	}
	sb := h.(*handle).sb
	if got := memoryCgroup(sb.SandboxPID()); got == leaf {
		t.Errorf("the sandbox is in the container's cgroup %q", got)
	}
	out := filepath.Join(t.TempDir(), "exec")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = devNull.Close() }()
	code, err := h.(runtime.Execer).Exec(context.Background(), runtime.ExecRequest{Command: []string{"/bin/cat", "/proc/self/cgroup"}, Stdin: devNull, Stdout: f, Stderr: f})
	_ = f.Close()
	if err != nil || code != 0 {
		t.Fatalf("exec: %d, %v", code, err)
	}
	b, _ := os.ReadFile(out)
	if !strings.Contains(string(b), leaf+"\n") {
		t.Errorf("an exec'd command is not in %s:\n%s", leaf, b)
	}
	if ok, _ := rt.Isolation(); ok {
		// The container reads its own limit where programs look for it.
		limitFile := "/sys/fs/cgroup/memory/memory.limit_in_bytes"
		if m.Unified() {
			limitFile = "/sys/fs/cgroup/memory.max"
		}
		f, err := os.Create(out)
		if err != nil {
			t.Fatal(err)
		}
		code, err := h.(runtime.Execer).Exec(context.Background(), runtime.ExecRequest{Command: []string{"/bin/cat", limitFile}, Stdin: devNull, Stdout: f, Stderr: f})
		_ = f.Close()
		b, _ := os.ReadFile(out)
		if err != nil || code != 0 || strings.TrimSpace(string(b)) != "268435456" {
			t.Errorf("%s in the container: %q (exit %d, %v); want 268435456 (256Mi)", limitFile, b, code, err)
		}
	}
	h.Stop(0)
	wait(t, h)
	dir := filepath.Join("/sys/fs/cgroup", leaf)
	if !m.Unified() {
		dir = filepath.Join("/sys/fs/cgroup/memory", leaf)
	}
	// Removed right after the result is out.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := os.Stat(dir)
		if os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the container's cgroup %s is left after the attempt (%v)", dir, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// BenchmarkStartWithCgroups is the cost of an attempt's start and end
// (`true` in its sandbox, the runtime's default namespaces) without and
// with cgroups: the pod's cgroup ensured (as the agent does before each
// attempt), the attempt's made, the init stage moved into it, the
// OOM count read and the cgroup removed. Skipped without cgroups.
func BenchmarkStartWithCgroups(b *testing.B) {
	m := testCgroups(b, "process-bench")
	c := corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "bench"}, Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}
	for _, withCgroups := range []bool{false, true} {
		b.Run(fmt.Sprintf("cgroups=%t", withCgroups), func(b *testing.B) {
			opts := Options{StateDir: filepath.Join(b.TempDir(), "state")}
			if withCgroups {
				opts.Cgroups = m
			}
			rt, err := New(context.Background(), opts)
			if err != nil {
				b.Fatal(err)
			}
			dir := b.TempDir()
			spec := runtime.Spec{PodNamespace: "ns", PodName: "p", ContainerName: "c", Command: []string{"/bin/true"}, WorkingDir: dir}
			for i := 0; b.Loop(); i++ {
				spec.Attempt, spec.LogPath = int32(i), filepath.Join(dir, fmt.Sprintf("%d.log", i))
				if withCgroups {
					name, err := m.EnsurePod(pod)
					if err != nil {
						b.Fatal(err)
					}
					spec.CgroupParent, spec.Resources = name.ToCgroupfs(), cgroup.ContainerResources(nil, &c, m.Unified())
				}
				h, err := rt.Start(context.Background(), spec)
				if err != nil {
					b.Fatal(err)
				}
				<-h.Done()
				if res := h.Result(); res.ExitCode != 0 {
					b.Fatalf("result %+v", res)
				}
			}
		})
	}
}

// cgroupValue reads the first line of file in whichever of the
// container's cgroup directories has it.
func cgroupValue(t *testing.T, c *cgroup.Container, files ...string) string {
	t.Helper()
	for _, d := range c.Dirs() {
		for _, f := range files {
			if b, err := os.ReadFile(filepath.Join(d.Source, f)); err == nil {
				return strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])
			}
		}
	}
	t.Fatalf("no cgroup directory of %s has %v", c.Path(), files)
	return ""
}

// TestUpdateResources: the resources of a running container change in its
// cgroup (an in-place resize): raised, then lifted; the container runs on.
func TestUpdateResources(t *testing.T) {
	rt, spec, m, pod := cgroupRuntimeAndPod(t, "sleep", corev1.ResourceList{
		corev1.ResourceMemory: resource.MustParse("64Mi"), corev1.ResourceCPU: resource.MustParse("100m")})
	h := startAttempt(t, rt, spec)
	cg := m.OpenContainer(spec.CgroupParent + "/" + cgroup.ContainerLeaf(spec.ContainerName, spec.Attempt))
	memory := func() string { return cgroupValue(t, cg, "memory.max", "memory.limit_in_bytes") }
	quota := func() string { return cgroupValue(t, cg, "cpu.max", "cpu.cfs_quota_us") }
	if got := memory(); got != "67108864" {
		t.Fatalf("memory limit %s before the update, want 67108864", got)
	}
	r, ok := h.(runtime.Resizer)
	if !ok || !r.Resizable() {
		t.Fatal("a container with a cgroup cannot be resized")
	}
	bigger := corev1.Container{Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
		corev1.ResourceMemory: resource.MustParse("128Mi"), corev1.ResourceCPU: resource.MustParse("300m")}}}
	// The pod's cgroup first: on v1 a child's quota may not exceed its
	// parent's.
	lifted := pod.DeepCopy()
	lifted.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
	if err := m.SetPodConfig(pod, m.PodConfig(lifted)); err != nil {
		t.Fatal(err)
	}
	if err := r.UpdateResources(cgroup.ContainerResources(nil, &bigger, m.Unified())); err != nil {
		t.Fatal(err)
	}
	if got, q := memory(), quota(); got != "134217728" || !strings.HasPrefix(q, "30000") {
		t.Errorf("after raising: memory limit %s, cpu quota %s; want 134217728 and 30000", got, q)
	}
	if err := r.UpdateResources(cgroup.ContainerResources(nil, &corev1.Container{}, m.Unified())); err != nil {
		t.Fatal(err)
	}
	if got, q := memory(), quota(); got == "134217728" || !(strings.HasPrefix(q, "max") || q == "-1") {
		t.Errorf("after lifting: memory limit %s, cpu quota %s; want none", got, q)
	}
	if used, err := r.MemoryUsage(); err != nil || used <= 0 {
		t.Errorf("memory usage %d (err %v), want some", used, err)
	}
	select {
	case <-h.Done():
		t.Fatalf("the container ended: %+v", h.Result())
	default:
	}
}

// TestContainerStartsInItsCgroup: the container's command is in its
// cgroups from its first instruction (the init stage is moved into them
// while the view is built, and runs the command only once it is there):
// cat, the main process itself, reads its own /proc/self/cgroup.
func TestContainerStartsInItsCgroup(t *testing.T) {
	rt, spec, _ := cgroupRuntime(t, "", corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")})
	spec.Command = []string{"/bin/cat", "/proc/self/cgroup"}
	if res := wait(t, startAttempt(t, rt, spec)); res.ExitCode != 0 {
		t.Fatalf("result %+v: %s", res, readLog(t, spec.LogPath))
	}
	out := readLog(t, spec.LogPath)
	leaf := spec.CgroupParent + "/" + cgroup.ContainerLeaf(spec.ContainerName, spec.Attempt)
	found := false
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if slices.Contains(strings.Split(parts[1], ","), "memory") || parts[0] == "0" && !strings.Contains(out, "memory") {
			found = true
			if parts[2] != leaf {
				t.Errorf("the command started in memory cgroup %q, want %q", parts[2], leaf)
			}
		}
	}
	if !found {
		t.Fatalf("no memory cgroup in the command's /proc/self/cgroup:\n%s", out)
	}
}

// TestContainerSeesOnlyItsCgroups: at /sys/fs/cgroup a container finds
// its own cgroups and nothing else of the host's: on v1 only the
// hierarchies it is in (with the host's links for co-mounted ones) and no
// cgroup2 mount at all, even on a hybrid host; on v2 its own directory.
// Run as a user with a delegated cgroup, the host's cgroup mounts are
// covered but still listed (locked to the user namespace).
func TestContainerSeesOnlyItsCgroups(t *testing.T) {
	rt, spec, m := cgroupRuntime(t, "", corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("96Mi")})
	spec.Command = []string{"/bin/sh", "-c", "grep ' /sys/fs/cgroup' /proc/self/mounts | cut -d' ' -f2,3; echo files: $(ls /sys/fs/cgroup | tr '\\n' ' '); " +
		"cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/memory.max 2>/dev/null; touch /sys/fs/cgroup/x 2>/dev/null && echo writable; true"}
	spec.Env = []string{"PATH=/usr/bin:/bin"}
	if res := wait(t, startAttempt(t, rt, spec)); res.ExitCode != 0 {
		t.Fatalf("result %+v: %s", res, readLog(t, spec.LogPath))
	}
	out := readLog(t, spec.LogPath)
	t.Logf("container's view:\n%s", out)
	if !strings.Contains(out, "100663296") {
		t.Errorf("the container does not read its own memory limit (96Mi) at /sys/fs/cgroup")
	}
	if m.Unified() {
		if !strings.Contains(out, "/sys/fs/cgroup cgroup2") {
			t.Errorf("no cgroup2 mount at /sys/fs/cgroup on a v2 host")
		}
		return
	}
	if strings.Contains(out, "writable") {
		t.Errorf("the container can write its /sys/fs/cgroup")
	}
	for _, l := range strings.Split(out, "\n") {
		files, ok := strings.CutPrefix(l, "files: ")
		if !ok {
			continue
		}
		for _, f := range strings.Fields(files) {
			// Its own hierarchies, and links for co-mounted ones.
			for _, c := range strings.Split(f, ",") {
				if !slices.Contains([]string{"cpu", "cpuacct", "memory", "pids"}, c) {
					t.Errorf("the container's /sys/fs/cgroup holds %s, not one of its hierarchies", f)
				}
			}
		}
	}
	if os.Geteuid() != 0 {
		// In the sandbox's user namespace the host's mounts under /sys
		// are locked to it (the kernel's rule for mounts a less
		// privileged namespace inherits): they are covered, out of
		// reach, but still listed in the mount table.
		return
	}
	if strings.Contains(out, "cgroup2") {
		t.Errorf("a cgroup2 mount shows in the container on a v1 host")
	}
	if strings.Count(out, "/sys/fs/cgroup tmpfs") != 1 {
		t.Errorf("want /sys/fs/cgroup mounted once")
	}
	for _, hidden := range []string{"devices", "freezer", "systemd", "unified"} {
		if strings.Contains(out, "/sys/fs/cgroup/"+hidden+" ") || strings.Contains(out, " "+hidden+" ") {
			t.Errorf("the host's %s hierarchy shows in the container", hidden)
		}
	}
}
