package sandbox

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// requirePID skips, for a user other than root, when this machine cannot
// give containers PID namespaces. Root always can: a failure is a bug.
func requirePID(t *testing.T) {
	t.Helper()
	requireNamespaces(t)
	exe, _ := os.Executable()
	if err := ProbePID(context.Background(), exe, filepath.Join(t.TempDir(), "probe"), 0); err != nil {
		if os.Getuid() == 0 {
			t.Fatalf("PID namespace probe failed as root: %v", err)
		}
		t.Skipf("no PID namespaces for this user: %v", err)
	}
}

// execOutput runs argv in s and returns its output and exit code.
func execOutput(t *testing.T, s *Sandbox, argv ...string) (string, int32) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	devNull, _ := os.Open(os.DevNull)
	defer func() { _ = devNull.Close() }()
	p, err := s.Exec(context.Background(), argv, false, devNull, w, w)
	_ = w.Close()
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	b, _ := io.ReadAll(r)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, err := p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), code
}

// TestPIDNamespaceOfItsOwn: the main process is PID 1 of a namespace of its
// own, whose /proc the view shows, and exec'd commands join it; the end of
// the main process ends everything in it.
func TestPIDNamespaceOfItsOwn(t *testing.T) {
	requirePID(t)
	s, out := startTest(t, true, Config{
		Command:      []string{"sh", "-c", `echo "main:$$"; sleep 3600 & echo started; wait`},
		PIDNamespace: PIDContainer,
	})
	got, code := execOutput(t, s, "sh", "-c", `echo "exec:$$"; cat /proc/1/cmdline | tr '\0' ' '; echo; ls /proc | grep -c '^[0-9]'`)
	if code != 0 {
		t.Fatalf("exec exited %d: %q", code, got)
	}
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if len(lines) != 3 || lines[0] == "exec:1" || !strings.HasPrefix(lines[1], "sh -c echo \"main:$$\"") {
		t.Fatalf("exec output %q: want its own PID, and the main process as PID 1 in /proc", got)
	}
	// main, its sleep, the exec'd sh and ls and grep (or fewer if they
	// are gone): nothing of the host.
	if n, _ := strconv.Atoi(lines[2]); n < 3 || n > 6 {
		t.Errorf("%d processes in the container's /proc, want the container's few", n)
	}
	if host, err := os.ReadDir("/proc"); err == nil && len(host) < 10 {
		t.Errorf("the host's /proc changed: %d entries", len(host))
	}
	// The shell as PID 1 ignores SIGTERM it has no handler for, as a
	// container's PID 1; Kill ends it and its sleep.
	if err := s.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	ex := waitDone(t, s)
	if ex.Code != 137 {
		t.Errorf("exit %+v, want killed (137)", ex)
	}
	if o := out(); !strings.HasPrefix(o, "main:1\nstarted\n") {
		t.Errorf("main output %q, want it to be PID 1", o)
	}
}

// TestPIDNamespaceJoined: a sandbox joining another's PID namespace sees
// its processes, as an ephemeral container with a target or a container
// of a pod that shares its process namespace.
func TestPIDNamespaceJoined(t *testing.T) {
	requirePID(t)
	if os.Getuid() != 0 {
		// Each sandbox has a user namespace of its own, which may not
		// enter a PID namespace another owns (the runtime then uses the
		// host's: SharedPIDNamespaces).
		t.Skip("joining another sandbox's PID namespace needs root")
	}
	target, _ := startTest(t, true, Config{Command: []string{"sleep", "3603"}, PIDNamespace: PIDContainer})
	ns, err := os.Open("/proc/" + strconv.Itoa(target.PID()) + "/ns/pid")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ns.Close() }()
	s, out := startTestWith(t, true, StartOptions{JoinPIDNamespace: ns}, Config{
		Command:      []string{"sh", "-c", `echo "pid:$$"; tr '\0' ' ' < /proc/1/cmdline; echo`},
		PIDNamespace: PIDJoin,
	})
	if ex := waitDone(t, s); ex.Code != 0 {
		t.Fatalf("exit %+v", ex)
	}
	o := out()
	if strings.HasPrefix(o, "pid:1\n") || !strings.Contains(o, "\nsleep 3603 \n") {
		t.Errorf("output %q: want a PID other than 1 and the target's sleep as PID 1", o)
	}
	select {
	case <-target.Done():
		t.Errorf("the target ended with the container that joined it: %+v", target.Exit())
	default:
	}
}

// TestAwaitForkKillsAChildThatDoesNotRun: a fork whose child does not
// execute its program (stopped by a container's process; here a child of
// the forking thread that the thread waits for) is killed after the
// timeout, and the fork fails with the reason: the supervisor's loop is
// not held.
func TestAwaitForkKillsAChildThatDoesNotRun(t *testing.T) {
	tids := make(chan forkThread, 1)
	ch := make(chan forkResult, 1)
	older := make(chan *exec.Cmd, 1)
	exited := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		// A child the thread had before: left alone.
		old := exec.Command("sleep", "3600")
		if err := old.Start(); err != nil {
			ch <- forkResult{err: err}
			return
		}
		older <- old
		tids <- thisForkThread()
		cmd := exec.Command("sleep", "3600")
		if err := cmd.Start(); err != nil {
			ch <- forkResult{err: err}
			return
		}
		// As vfork's parent: suspended until the child is gone.
		_ = cmd.Wait()
		close(exited)
		ch <- forkResult{pid: cmd.Process.Pid}
	}()
	start := time.Now()
	_, err := awaitFork(tids, ch, 100*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "did not start within 100ms") {
		t.Errorf("awaitFork = %v, want the child killed after the timeout", err)
	}
	if d := time.Since(start); d > time.Minute {
		t.Errorf("awaitFork took %v", d)
	}
	select {
	case <-exited:
	default:
		t.Errorf("awaitFork returned with the child still there")
	}
	old := <-older
	if err := old.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the thread's earlier child was killed too: %v", err)
	}
	_ = old.Process.Kill()
	_ = old.Wait()
	// A fork that completes in time is untouched.
	tids <- forkThread{tid: 1}
	ch <- forkResult{pid: 42}
	if pid, err := awaitFork(tids, ch, time.Minute); pid != 42 || err != nil {
		t.Errorf("awaitFork of a completed fork = %d, %v", pid, err)
	}
}
