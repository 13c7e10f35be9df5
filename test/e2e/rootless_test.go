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

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"jobkeeper.dev/jobkeeper/test/builder"
)

// rootlessUp prepares up as a user with --network=pod (the rootless
// node): a data directory of that user's with the image archives loaded
// into it (as that user), and the binary where it may run it. It returns
// the data directory and how to start up there.
func rootlessUp(t *testing.T, archives ...string) (string, func(t *testing.T, extra ...string) (*process, kubernetes.Interface)) {
	t.Helper()
	requireRootless(t)
	base, dataDir, exe := userInstall(t, "jobkeeper-rootless-")
	cred := &syscall.Credential{Uid: escapeUID, Gid: escapeUID}
	env := []string{"HOME=" + base}
	for _, archive := range archives {
		load := startBinaryAs(t, cred, env, exe, "image", "load", "--data-dir", dataDir, archive)
		if code, out := load.waitExit(t, startTimeout); code != 0 {
			t.Fatalf("jobkeeper image load as a user exited %d:\n%s", code, out)
		}
	}
	return dataDir, func(t *testing.T, extra ...string) (*process, kubernetes.Interface) {
		up, c, _ := startUpAs(t, cred, env, exe, dataDir, append([]string{"--network=pod"}, extra...)...)
		return up, c
	}
}

// userInstall makes what up as the user escapeUID needs: a directory
// others may enter (base), a data directory of that user's in it, and the
// binary copied where that user may run it.
func userInstall(t *testing.T, prefix string) (base, dataDir, exe string) {
	t.Helper()
	base = enterableDir(t, prefix)
	dataDir = filepath.Join(base, "data")
	if err := os.Mkdir(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dataDir, escapeUID, escapeUID); err != nil {
		t.Fatal(err)
	}
	exe = filepath.Join(base, "jobkeeper")
	copyFile(t, binary, exe, 0o755)
	return base, dataDir, exe
}

// processesBelow are the pids of the processes below pid.
func processesBelow(t *testing.T, pid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 {
			if f := strings.Fields(s[i+1:]); len(f) > 1 {
				if pp, err := strconv.Atoi(f[1]); err == nil {
					children[pp] = append(children[pp], p)
				}
			}
		}
	}
	var out []int
	for queue := children[pid]; len(queue) > 0; queue = queue[1:] {
		out = append(out, queue[0])
		queue = append(queue, children[queue[0]]...)
	}
	return out
}

// innerUp is the pid of the up that runs inside the rootless node: the
// outer up's child whose command line pins the apiserver's port.
func innerUp(t *testing.T, outer int) int {
	t.Helper()
	for _, pid := range processesBelow(t, outer) {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if err == nil && strings.Contains(string(b), "\x00up\x00") && strings.Contains(string(b), "\x00--port=") {
			return pid
		}
	}
	t.Fatalf("no up runs below %d", outer)
	return 0
}

// gone waits until none of pids runs (a zombie has ended: whoever
// inherited it has not reaped it yet).
func gone(t *testing.T, what string, pids ...int) {
	t.Helper()
	running := func(pid int) bool {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		if err != nil {
			return false
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		f := strings.Fields(s[i+1:])
		return i < 0 || len(f) == 0 || f[0] != "Z"
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, stopTimeout, true, func(context.Context) (bool, error) {
		for _, pid := range pids {
			if running(pid) {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		var states []string
		for _, pid := range pids {
			b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
			w, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "wchan"))
			states = append(states, string(b)[:min(len(b), 60)]+" wchan="+string(w))
		}
		t.Errorf("%s still run: %v %q", what, pids, states)
	}
}

// TestUpRootlessNodeCrashAndKill: up as a user with --network=pod, whose
// pods' network lives in up's own namespaces.
//   - kill -9 of the up inside the node: the outer up exits 137 and pasta
//     ends; the next up kills the containers left running (their network
//     ended with the node), with the kubelet's SandboxChanged event, and
//     reports them terminated with exit code 137, for a pod with a network
//     of its own and a hostNetwork pod alike;
//   - kill -9 of the outer up: the inside one stops as on SIGTERM (a
//     graceful node shutdown of its pods), and pasta with it.
func TestUpRootlessNodeCrashAndKill(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the test runs up as another user, as root")
	}
	_, start := rootlessUp(t)
	ctx := context.Background()
	up, c := start(t)
	ns := "default"
	for _, host := range []bool{false, true} {
		name := "own"
		if host {
			name = "host"
		}
		p := builder.MakePod(name, ns).Obj()
		p.Spec.RestartPolicy = corev1.RestartPolicyNever
		p.Spec.HostNetwork = host
		p.Spec.Containers[0].Command = []string{"sleep", "3600"}
		if _, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"own", "host"} {
		waitPod(t, c, ns, name, "Running", 2*time.Minute, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	}
	outer := up.cmd.Process.Pid
	inner := innerUp(t, outer)
	below := processesBelow(t, outer)
	noCapabilitiesBelow(t, inner)
	pastas := map[int]bool{}
	for pid := range pastaProcesses(t) {
		pastas[pid] = true
	}
	if err := syscall.Kill(inner, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code, out := up.waitExit(t, stopTimeout); code != 128+int(syscall.SIGKILL) {
		t.Errorf("the outer up exited %d after kill -9 of the inner one, want 137:\n%s", code, out)
	}
	var leftPasta []int
	for _, pid := range below {
		if pastas[pid] {
			leftPasta = append(leftPasta, pid)
		}
	}
	gone(t, "pasta processes of the killed node", leftPasta...)

	up, c = start(t)
	for _, name := range []string{"own", "host"} {
		got := waitPod(t, c, ns, name, "Failed", 2*time.Minute, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
		term := got.Status.ContainerStatuses[0].State.Terminated
		if term == nil || term.ExitCode != 137 || !strings.Contains(term.Message, "network namespace") {
			t.Errorf("pod %s after the node's crash: %+v", name, got.Status.ContainerStatuses[0].State)
		}
		evs, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=SandboxChanged"})
		if err != nil || len(evs.Items) == 0 {
			t.Errorf("no SandboxChanged event for pod %s (%v)", name, err)
		}
	}

	outer = up.cmd.Process.Pid
	inner = innerUp(t, outer)
	below = processesBelow(t, outer)
	if err := syscall.Kill(outer, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	gone(t, "the node's up and pasta after kill -9 of the outer up", below...)
}

// noCapabilitiesBelow checks that nothing the node's up (pid) started
// holds its capabilities: no ambient or inheritable ones anywhere below
// it, and no effective ones in its user namespace (sandboxes have their
// own, where they are root).
func noCapabilitiesBelow(t *testing.T, pid int) {
	t.Helper()
	nodeNS, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "ns", "user"))
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, p := range processesBelow(t, pid) {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p), "status"))
		if err != nil {
			continue
		}
		caps := map[string]string{}
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.HasPrefix(k, "Cap") {
				caps[k] = strings.TrimSpace(v)
			}
		}
		seen++
		ns, _ := os.Readlink(filepath.Join("/proc", strconv.Itoa(p), "ns", "user"))
		zero := "0000000000000000"
		if caps["CapAmb"] != zero || caps["CapInh"] != zero || (ns == nodeNS && caps["CapEff"] != zero) {
			cmd, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p), "cmdline"))
			t.Errorf("process %d (%q, user namespace %s, the node's %s) has capabilities: %v", p, strings.ReplaceAll(string(cmd), "\x00", " "), ns, nodeNS, caps)
		}
	}
	if seen == 0 {
		t.Error("no process runs below the node's up")
	}
}

// TestUpRootlessNodeStopsOnce: a stop sent to both ups at once (as systemd
// signals every process of a unit) is one graceful stop: the outer up
// exits 0 after the inner one said it stopped, and pasta ends.
func TestUpRootlessNodeStopsOnce(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the test runs up as another user, as root")
	}
	_, start := rootlessUp(t)
	up, _ := start(t)
	outer := up.cmd.Process.Pid
	inner := innerUp(t, outer)
	below := processesBelow(t, outer)
	for _, pid := range []int{inner, outer} {
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	if code, out := up.waitExit(t, stopTimeout); code != 0 || !strings.Contains(out, "jobkeeper stopped") {
		t.Errorf("SIGTERM to both ups: exit %d, want 0 after a graceful stop:\n%s", code, out)
	}
	gone(t, "the node's up and pasta after the stop", below...)
}
