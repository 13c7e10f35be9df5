package cgroup

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// newManager is a Manager below a root of the test's own, removed at the
// end; the test is skipped where cgroups cannot be written.
func newManager(t *testing.T) *Manager {
	t.Helper()
	root, err := DefaultRoot(fmt.Sprintf("test-%d", os.Getpid()))
	if err != nil {
		t.Skip(err)
	}
	missing := missingAncestors(root)
	m, err := New(context.Background(), root)
	if err != nil {
		t.Skipf("no cgroups here: %v", err)
	}
	t.Cleanup(func() {
		if err := m.RemoveAll(); err != nil {
			t.Error(err)
		}
		for _, mp := range m.mounts {
			if _, err := os.Stat(filepath.Join(mp, m.Root())); !os.IsNotExist(err) {
				t.Errorf("%s left in %s (%v)", m.Root(), mp, err)
			}
		}
		for _, dir := range missing {
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("%s, made above the root, left (%v)", dir, err)
			}
		}
	})
	return m
}

// missingAncestors are the directories above root that do not exist yet,
// in every hierarchy: where this process's cgroup differs between
// hierarchies (v1), the manager makes them for its root.
func missingAncestors(root string) []string {
	var dirs []string
	mounts, _ := filepath.Glob("/sys/fs/cgroup/*/cgroup.procs")
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.procs"); err == nil {
		mounts = append(mounts, "/sys/fs/cgroup/cgroup.procs")
	}
	for _, procs := range mounts {
		for dir := filepath.Dir(root); dir != "/"; dir = filepath.Dir(dir) {
			p := filepath.Join(filepath.Dir(procs), dir)
			if _, err := os.Stat(p); os.IsNotExist(err) {
				dirs = append(dirs, p)
			}
		}
	}
	return dirs
}

// limitedPod is a Burstable pod whose one container has a memory limit.
func limitedPod(limit string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: types.UID("1234-abcd")},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "main",
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(limit)},
			},
		}}},
	}
}

// TestOOMKillCounted runs a process that allocates more than its
// container's memory limit in the container's cgroup: the kernel kills it
// (SIGKILL), OOMKills counts it, and the pod's cgroups go with RemovePod.
func TestOOMKillCounted(t *testing.T) {
	m := newManager(t)
	pod := limitedPod("16Mi")
	podName, err := m.EnsurePod(pod)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := podName.ToCgroupfs(), m.Root()+"/kubepods/burstable/pod1234-abcd"; got != want {
		t.Errorf("pod cgroup %s, want %s", got, want)
	}
	c, err := m.CreateContainer(podName.ToCgroupfs(), ContainerLeaf("main", 0), ContainerResources(pod, &pod.Spec.Containers[0], m.Unified()))
	if err != nil {
		t.Fatal(err)
	}
	mp, _ := m.memoryHierarchy()
	limitFile := "memory.limit_in_bytes"
	if m.unified {
		limitFile = "memory.max"
	}
	b, err := os.ReadFile(filepath.Join(mp, c.Path(), limitFile))
	if err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(16<<20) {
		t.Errorf("%s = %q, %v; want %d", limitFile, b, err, 16<<20)
	}
	enter, leave, err := c.ProcsFiles()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, f := range append(enter, leave...) {
			_ = f.Close()
		}
	}()
	if len(enter) == 0 || len(enter) != len(leave) {
		t.Fatalf("%d files to enter, %d to leave", len(enter), len(leave))
	}
	// The shell waits for a line before it allocates, so that it is in
	// the cgroup first.
	cmd := exec.Command("sh", "-c", "read x; exec dd if=/dev/zero of=/dev/null bs=64M count=1")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for _, f := range enter {
		if _, err := f.WriteString(strconv.Itoa(cmd.Process.Pid)); err != nil {
			t.Fatalf("moving the process: %v", err)
		}
	}
	_, _ = in.Write([]byte("go\n"))
	err = cmd.Wait()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("the process ended with %v (%v), want killed by SIGKILL", cmd.ProcessState, err)
	}
	if n, err := c.OOMKills(); err != nil || n == 0 {
		t.Errorf("OOMKills = %d, %v; want at least 1", n, err)
	}
	if got := m.PodUIDs(); len(got) != 1 || got[0] != "1234-abcd" {
		t.Errorf("PodUIDs = %v", got)
	}
	if err := m.RemovePod(string(pod.UID)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(mp, podName.ToCgroupfs())); !os.IsNotExist(err) {
		t.Errorf("the pod's cgroup is still there: %v", err)
	}
}

// TestPodPidsLimit: --pod-max-pids is the pod cgroup's pids.max.
func TestPodPidsLimit(t *testing.T) {
	m := newManager(t)
	m.SetPodPidsLimit(42)
	name, err := m.EnsurePod(limitedPod("16Mi"))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join("/sys/fs/cgroup/pids", name.ToCgroupfs())
	if m.Unified() {
		dir = filepath.Join("/sys/fs/cgroup", name.ToCgroupfs())
	}
	if b, err := os.ReadFile(filepath.Join(dir, "pids.max")); err != nil || strings.TrimSpace(string(b)) != "42" {
		t.Errorf("pids.max = %q, %v; want 42", b, err)
	}
}

// TestBurstableCPU: the Burstable QoS cgroup gets the CPU weight of what
// its pods request together, as the kubelet's QoS manager writes it (v1
// shares; v2 the weight converted from them), and again when it changes.
func TestBurstableCPU(t *testing.T) {
	m := newManager(t)
	burstable := filepath.Join(m.mounts[0], m.Root(), podsName, "burstable")
	// Not made by it: no Burstable pod yet.
	if err := m.SetBurstableCPU(100); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(burstable); !os.IsNotExist(err) {
		t.Fatalf("SetBurstableCPU made the Burstable cgroup (%v)", err)
	}
	if _, err := m.EnsurePod(limitedPod("16Mi")); err != nil {
		t.Fatal(err)
	}
	read := func() string {
		name := filepath.Join(m.Root(), podsName, "burstable")
		for _, f := range []string{filepath.Join("/sys/fs/cgroup/cpu", name, "cpu.shares"), filepath.Join("/sys/fs/cgroup", name, "cpu.weight")} {
			if b, err := os.ReadFile(f); err == nil {
				return strings.TrimSpace(string(b))
			}
		}
		t.Fatal("the Burstable cgroup has no CPU weight file")
		return ""
	}
	for _, tc := range []struct {
		milli        int64
		shares, v2wt string
	}{
		// 1.5 CPUs: 1536 shares; v2: 1 + ((1536-2)*9999)/262142.
		{1500, "1536", "59"},
		{0, "2", "1"},
		{250, "256", "10"},
	} {
		if err := m.SetBurstableCPU(tc.milli); err != nil {
			t.Fatal(err)
		}
		want := tc.shares
		if m.Unified() {
			want = tc.v2wt
		}
		if got := read(); got != want {
			t.Errorf("%dm: weight %s, want %s", tc.milli, got, want)
		}
	}
	// Once removed, a later update (a pod's cgroup removed during the
	// stop) does not make it again.
	if err := m.RemoveAll(); err != nil {
		t.Fatal(err)
	}
	if err := m.SetBurstableCPU(700); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(m.mounts[0], m.Root())); !os.IsNotExist(err) {
		t.Errorf("SetBurstableCPU after RemoveAll made the root again (%v)", err)
	}
}

// TestAboveRootShared starts two managers whose roots share directories
// made above them (where this process's cgroup differs between v1
// hierarchies): the first removal keeps them for the second manager,
// whose removal takes them away.
func TestAboveRootShared(t *testing.T) {
	roots := make([]string, 2)
	for i := range roots {
		r, err := DefaultRoot(fmt.Sprintf("test-shared-%d-%d", os.Getpid(), i))
		if err != nil {
			t.Skip(err)
		}
		roots[i] = r
	}
	made := missingAncestors(roots[0])
	if len(made) == 0 {
		t.Skip("this process's cgroup is the same in every hierarchy: nothing is made above a root")
	}
	var ms []*Manager
	for _, r := range roots {
		m, err := New(context.Background(), r)
		if err != nil {
			t.Skipf("no cgroups here: %v", err)
		}
		ms = append(ms, m)
	}
	// Those of the hierarchies the manager makes cgroups in.
	made = slices.DeleteFunc(made, func(dir string) bool {
		_, err := os.Stat(dir)
		return err != nil
	})
	if err := ms[0].RemoveAll(); err != nil {
		t.Fatal(err)
	}
	for _, dir := range made {
		if _, err := os.Stat(dir); err != nil {
			t.Errorf("%s removed while the second manager's root is below it: %v", dir, err)
		}
	}
	if err := ms[1].RemoveAll(); err != nil {
		t.Fatal(err)
	}
	for _, dir := range made {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s left after both managers removed their roots (%v)", dir, err)
		}
	}
}
