package process

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// requirePIDNamespaces skips where containers get no PID namespaces for a
// user other than root; root always gets them.
func requirePIDNamespaces(t *testing.T, rt *Runtime) {
	t.Helper()
	if ok, why := rt.PIDNamespaces(); !ok {
		if strings.Contains(why, "no namespaces") || !isRoot() {
			t.Skipf("no PID namespaces here: %s", why)
		}
		t.Fatalf("no PID namespaces as root: %s", why)
	}
}

// TestPIDNamespacePerContainer: the main process is PID 1 of a namespace of
// its own and sees no other container's processes.
func TestPIDNamespacePerContainer(t *testing.T) {
	rt := newRuntime(t, nil)
	requirePIDNamespaces(t, rt)
	other, err := rt.Start(context.Background(), shellSpec(t, "exec sleep 3610"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Stop(0)
	spec := shellSpec(t, `echo "pid:$$"; cat /proc/[0-9]*/cmdline | tr '\0' ' ' | grep -o 'sleep 36[1]0' | wc -l`)
	h, err := rt.Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if res := wait(t, h); res.ExitCode != 0 {
		t.Fatalf("result %+v", res)
	}
	if got := readLog(t, spec.LogPath); got != "pid:1\n0\n" {
		t.Errorf("log %q, want PID 1 and no other container's process", got)
	}
}

// TestPIDNamespaceSharedByThePod: containers of a pod that shares its
// process namespace see each other's processes, under a pause process as
// PID 1, which ends with the last of them.
func TestPIDNamespaceSharedByThePod(t *testing.T) {
	rt := newRuntime(t, nil)
	requirePIDNamespaces(t, rt)
	if ok, why := rt.SharedPIDNamespaces(); !ok {
		t.Skipf("no shared PID namespaces: %s", why)
	}
	first := shellSpec(t, "exec sleep 3611")
	first.PodUID, first.PIDNamespace = "pod-1", runtime.PIDNamespacePod
	h1, err := rt.Start(context.Background(), first)
	if err != nil {
		t.Fatal(err)
	}
	second := shellSpec(t, `echo "pid:$$"; tr '\0' ' ' < /proc/1/cmdline; echo; cat /proc/[0-9]*/cmdline | tr '\0' ' ' | grep -o 'sleep 36[1]1' | wc -l`)
	second.PodUID, second.PIDNamespace = "pod-1", runtime.PIDNamespacePod
	h2, err := rt.Start(context.Background(), second)
	if err != nil {
		t.Fatal(err)
	}
	if res := wait(t, h2); res.ExitCode != 0 {
		t.Fatalf("result %+v", res)
	}
	got := strings.Split(readLog(t, second.LogPath), "\n")
	if len(got) < 3 || got[0] == "pid:1" || !strings.HasPrefix(got[1], "jobkeeper-sandbox-init") || got[2] != "1" {
		t.Errorf("log %q, want a PID other than 1, the pause process as PID 1 and the first container's sleep", got)
	}
	rt.podNS.mu.Lock()
	ns := rt.podNS.byPod["pod-1"]
	rt.podNS.mu.Unlock()
	if ns == nil {
		t.Fatal("no pause sandbox while a container of the pod runs")
	}
	h1.Stop(0)
	wait(t, h1)
	<-ns.sb.Done()
}

// isRoot reports whether the tests run as root.
func isRoot() bool { return os.Getuid() == 0 }

// TestPauseSandboxEndsWhenItsNamespaceCannotBeOpened: a pause sandbox just
// started for a pod whose namespace then cannot be opened is killed and
// forgotten with the failed start, not left running with no user.
func TestPauseSandboxEndsWhenItsNamespaceCannotBeOpened(t *testing.T) {
	rt := newRuntime(t, nil)
	requirePIDNamespaces(t, rt)
	if ok, why := rt.SharedPIDNamespaces(); !ok {
		t.Skipf("no shared PID namespaces: %s", why)
	}
	pause := 0
	rt.podNS.open = func(pid int) (*os.File, error) {
		pause = pid
		return nil, errors.New("test: no namespace")
	}
	spec := shellSpec(t, "exit 0")
	spec.PodUID, spec.PIDNamespace = "pod-1", runtime.PIDNamespacePod
	h, err := rt.Start(context.Background(), spec)
	if err == nil {
		h.Stop(0)
		t.Fatal("started without its pod's namespace")
	}
	if !strings.Contains(err.Error(), "test: no namespace") {
		t.Errorf("error %v, want the namespace's", err)
	}
	if pause == 0 {
		t.Fatal("no pause sandbox was started")
	}
	rt.podNS.mu.Lock()
	left := len(rt.podNS.byPod)
	rt.podNS.mu.Unlock()
	if left != 0 {
		t.Errorf("%d pod namespaces kept, want none", left)
	}
	waitGone(t, pause)
}
