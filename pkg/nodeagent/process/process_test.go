package process

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/logfile"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/sandbox"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/sandbox/imagetest"
)

// childEnv selects what the test binary does when re-run as a container.
const childEnv = "JOBKEEPER_TEST_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		child(mode)
		return
	}
	os.Exit(m.Run())
}

// child is the container process.
func child(mode string) {
	switch mode {
	case "print":
		wd, _ := os.Getwd()
		fmt.Printf("index=%s\n", os.Getenv("JOB_COMPLETION_INDEX"))
		fmt.Printf("wd=%s\n", wd)
		fmt.Fprintln(os.Stderr, "to stderr")
		os.Exit(3)
	case "sleep":
		fmt.Println("sleeping")
		time.Sleep(time.Hour)
	case "ignore-term":
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("ignoring")
		time.Sleep(time.Hour)
	case "agent":
		agentChild()
	case "count":
		for i := 0; ; i++ {
			fmt.Printf("count %d\n", i)
			time.Sleep(20 * time.Millisecond)
			if os.Getenv("COUNT_TO") == strconv.Itoa(i) {
				os.Exit(5)
			}
		}
	case "alloc":
		// Touches every page, so that each is charged.
		b := make([]byte, 256<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		fmt.Println("allocated")
		os.Exit(0)
	case "spawn":
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), childEnv+"=sleep")
		if err := cmd.Start(); err != nil {
			os.Exit(1)
		}
		fmt.Printf("grandchild=%d\n", cmd.Process.Pid)
		os.Exit(0)
	}
	os.Exit(99)
}

func newRuntime(t *testing.T, clk clock.WithTicker) *Runtime {
	t.Helper()
	rt, err := New(context.Background(), Options{StateDir: filepath.Join(t.TempDir(), "state"), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

func childSpec(t *testing.T, mode string, env ...string) runtime.Spec {
	dir := t.TempDir()
	return runtime.Spec{
		PodNamespace: "ns", PodName: "p", ContainerName: "c",
		Command:    []string{os.Args[0]},
		Env:        append([]string{childEnv + "=" + mode}, env...),
		WorkingDir: dir,
		LogPath:    filepath.Join(dir, "0.log"),
	}
}

func readLog(t *testing.T, path string) string {
	t.Helper()
	var out bytes.Buffer
	if err := logfile.Read(context.Background(), path, logfile.ReadOptions{TailLines: -1}, &out); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

func wait(t *testing.T, h runtime.Handle) runtime.Result {
	t.Helper()
	select {
	case <-h.Done():
		return h.Result()
	case <-time.After(30 * time.Second):
		t.Fatal("container did not end")
		return runtime.Result{}
	}
}

func TestExitCodeEnvWorkingDirAndLogs(t *testing.T) {
	rt := newRuntime(t, nil)
	spec := childSpec(t, "print", "JOB_COMPLETION_INDEX=2")
	h, err := rt.Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if h.PID() <= 0 {
		t.Errorf("PID() = %d", h.PID())
	}
	res := wait(t, h)
	if res.ExitCode != 3 || res.Reason != "Error" || res.Signal != 0 {
		t.Errorf("result = %+v, want exit code 3, reason Error", res)
	}
	got := strings.Split(strings.TrimSpace(readLog(t, spec.LogPath)), "\n")
	want := []string{"index=2", "wd=" + spec.WorkingDir, "to stderr"}
	// stdout and stderr are copied concurrently: compare without order.
	slices.Sort(got)
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("log lines (-want +got):\n%s", diff)
	}
}

func TestStopSendsSIGTERM(t *testing.T) {
	rt := newRuntime(t, nil)
	spec := childSpec(t, "sleep")
	h, err := rt.Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	waitForLog(t, spec.LogPath, "sleeping")
	h.Stop(time.Hour)
	res := wait(t, h)
	if ok, _ := rt.PIDNamespaces(); ok {
		// PID 1 of its namespace: the kernel does not let SIGTERM kill
		// it, so Go's runtime, whose handler got it, exits with 2, as
		// a Go program that is a container's PID 1 does.
		if res.ExitCode != 2 || res.Signal != 0 {
			t.Errorf("result = %+v, want exit code 2 after SIGTERM as PID 1", res)
		}
		return
	}
	if res.ExitCode != 143 || res.Signal != int32(syscall.SIGTERM) {
		t.Errorf("result = %+v, want exit code 143 by SIGTERM", res)
	}
}

func TestStopSignalsTheMainProcessOnly(t *testing.T) {
	// A shell that traps TERM stops its child itself; the child, which
	// traps TERM too, says whether the shell's handler had run first.
	rt := newRuntime(t, nil)
	spec := childSpec(t, "")
	child := `trap '[ -e handled ] && echo child stopped by the handler || echo child signalled first; exit 0' TERM; while :; do sleep 0.1; done`
	spec.Command = []string{"/bin/sh", "-c", `trap 'echo got TERM; touch handled; kill $child; wait; exit 0' TERM; sh -c "$CHILD" & child=$!; echo ready; wait`}
	spec.Env = []string{"PATH=/usr/bin:/bin", "CHILD=" + child}
	h, err := rt.Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	waitForLog(t, spec.LogPath, "ready")
	// Give the child time to set its trap.
	time.Sleep(300 * time.Millisecond)
	h.Stop(time.Hour)
	if res := wait(t, h); res.ExitCode != 0 || res.Signal != 0 {
		t.Errorf("result = %+v, want exit code 0 from the shell's handler", res)
	}
	if got, want := readLog(t, spec.LogPath), "ready\ngot TERM\nchild stopped by the handler\n"; got != want {
		t.Errorf("log = %q, want %q", got, want)
	}
}

func TestHostnameIsThePods(t *testing.T) {
	rt := newRuntime(t, nil)
	if ok, reason := rt.UTS(); !ok {
		if os.Getuid() == 0 {
			t.Fatalf("no UTS namespace as root: %s", reason)
		}
		t.Skipf("no UTS namespace: %s", reason)
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	const name = "my-pod-0"
	t.Run("host", func(t *testing.T) {
		spec := childSpec(t, "")
		spec.Command = []string{"sh", "-c", "hostname; uname -n"}
		spec.Env = []string{"PATH=/usr/bin:/bin"}
		spec.Hostname = name
		h, err := rt.Start(context.Background(), spec)
		if err != nil {
			t.Fatal(err)
		}
		if res := wait(t, h); res.ExitCode != 0 {
			t.Errorf("result = %+v", res)
		}
		if got, want := readLog(t, spec.LogPath), name+"\n"+name+"\n"; got != want {
			t.Errorf("log = %q, want %q", got, want)
		}
	})
	t.Run("image", func(t *testing.T) {
		spec := imageSpec(t, "hostname")
		spec.Hostname = name
		h, err := rt.Start(context.Background(), spec)
		if err != nil {
			t.Fatal(err)
		}
		if res := wait(t, h); res.ExitCode != 0 {
			t.Errorf("result = %+v", res)
		}
		if got, want := readLog(t, spec.LogPath), name+"\n"; got != want {
			t.Errorf("log = %q, want %q", got, want)
		}
	})
	if now, _ := os.Hostname(); now != host {
		t.Errorf("the host's hostname changed from %q to %q", host, now)
	}
}

func TestHostnameWithoutUTSNamespaceIsTheHosts(t *testing.T) {
	// Without namespaces the container keeps the host's name and still
	// runs.
	rt, err := New(context.Background(), Options{StateDir: filepath.Join(t.TempDir(), "state"), Isolation: IsolationOff})
	if err != nil {
		t.Fatal(err)
	}
	if ok, reason := rt.UTS(); ok || !strings.Contains(reason, "disabled by the agent's options") {
		t.Errorf("UTS() = %t, %q; want no UTS namespace, saying why", ok, reason)
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	spec := childSpec(t, "")
	spec.Command = []string{"hostname"}
	spec.Env = []string{"PATH=/usr/bin:/bin"}
	spec.Hostname = "my-pod-0"
	h, err := rt.Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if res := wait(t, h); res.ExitCode != 0 {
		t.Errorf("result = %+v", res)
	}
	if got := readLog(t, spec.LogPath); got != host+"\n" {
		t.Errorf("log = %q, want the host's name %q", got, host)
	}
}

func TestStopKillsAfterGracePeriod(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	rt := newRuntime(t, clk)
	spec := childSpec(t, "ignore-term")
	h, err := rt.Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	waitForLog(t, spec.LogPath, "ignoring")
	h.Stop(30 * time.Second)
	select {
	case <-h.Done():
		t.Fatal("the container ignoring SIGTERM ended before the grace period")
	case <-time.After(200 * time.Millisecond):
	}
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clk.Step(30 * time.Second)
	res := wait(t, h)
	if res.ExitCode != 137 || res.Signal != int32(syscall.SIGKILL) {
		t.Errorf("result = %+v, want exit code 137 by SIGKILL", res)
	}
}

func TestGroupKilledWhenMainProcessExits(t *testing.T) {
	rt := newRuntime(t, nil)
	// The grandchild's PID as it prints it is its PID namespace's: it is
	// found on the host by a variable of its environment instead.
	marker := fmt.Sprintf("JOBKEEPER_TEST_MARKER=%d-%d", os.Getpid(), time.Now().UnixNano())
	spec := childSpec(t, "spawn", marker)
	h, err := rt.Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if res := wait(t, h); res.ExitCode != 0 || res.Reason != "Completed" {
		t.Fatalf("result = %+v, want Completed", res)
	}
	if line := strings.TrimSpace(readLog(t, spec.LogPath)); !strings.HasPrefix(line, "grandchild=") {
		t.Fatalf("log %q: the grandchild did not start", line)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		alive := processesWithEnv(marker)
		if len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes %v of the container are still alive", alive)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// processesWithEnv lists the live (not zombie) processes of this host
// whose environment holds the variable kv.
func processesWithEnv(kv string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil || !bytes.Contains(append(append([]byte{0}, env...), 0), []byte("\x00"+kv+"\x00")) {
			continue
		}
		if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); strings.Contains(string(st), ") Z") {
			continue
		}
		out = append(out, pid)
	}
	return out
}

func TestStartErrors(t *testing.T) {
	rt := newRuntime(t, nil)
	cases := map[string]struct {
		command    []string
		wantReason string
	}{
		"no command":     {command: nil, wantReason: ReasonNoCommand},
		"not found":      {command: []string{"jobkeeper-no-such-binary"}, wantReason: ReasonStartError},
		"not executable": {command: []string{"/etc/hostname"}, wantReason: ReasonStartError},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			spec := childSpec(t, "print")
			spec.Command = tc.command
			_, err := rt.Start(context.Background(), spec)
			var se *runtime.StartError
			if !errors.As(err, &se) || se.Reason != tc.wantReason {
				t.Errorf("Start() error = %v, want StartError %s", err, tc.wantReason)
			}
		})
	}
}

func TestNewKillsGroupsOfAPreviousRun(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = []string{childEnv + "=sleep"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(waited) }()
	// The record as a sandbox writes it: its pod's container, then its
	// start time, which tells it from a process that reused the PID (a
	// record without one spares a live process:
	// TestKillStaleSparesAnUnreadableRecord).
	record := fmt.Sprintf("ns/p/c\n%d\n", sandbox.StartTime(cmd.Process.Pid))
	if err := os.WriteFile(filepath.Join(state, strconv.Itoa(cmd.Process.Pid)), []byte(record), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(context.Background(), Options{StateDir: state}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-waited:
	case <-time.After(30 * time.Second):
		t.Fatal("the process of the previous run is still alive")
	}
	if entries, _ := os.ReadDir(state); len(entries) != 1 || entries[0].Name() != "scratch" {
		t.Errorf("state dir still lists %d groups", len(entries)-1)
	}
}

func TestNewKillsSessionsWhoseLeaderIsGone(t *testing.T) {
	// A sandbox killed with SIGKILL leaves its session behind: here a
	// shell that started two background processes and exited.
	state := filepath.Join(t.TempDir(), "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", "sleep 3071 >/dev/null 2>&1 & (set -m; sleep 3072 >/dev/null 2>&1 &); echo $!")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	leader := cmd.Process.Pid
	left := sessionMembers(leader)
	if len(left) != 2 {
		t.Fatalf("session %d has %d processes, want 2 (%s)", leader, len(left), out)
	}
	// The leader's start time is unknown once it is gone: a record
	// without one trusts the PID, as files of older versions did.
	if err := os.WriteFile(filepath.Join(state, strconv.Itoa(leader)), []byte("ns/p/c\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(context.Background(), Options{StateDir: state}); err != nil {
		t.Fatal(err)
	}
	for _, pid := range left {
		waitGone(t, pid)
	}
}

// sessionMembers lists the processes of session sid.
func sessionMembers(sid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 3 && f[3] == strconv.Itoa(sid) && f[0] != "Z" {
			out = append(out, pid)
		}
	}
	return out
}

// waitForLog polls the log until it contains s (the child is a real process).
func waitForLog(t *testing.T, path, s string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(readLog(t, path), s) {
		if time.Now().After(deadline) {
			t.Fatalf("log never contained %q", s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitGone polls until pid no longer exists (or is a zombie).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		if f := strings.Fields(string(data)); len(f) > 2 && f[2] == "Z" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d is still alive", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// imageSpec is a spec running the test image's program with steps.
func imageSpec(t *testing.T, steps ...string) runtime.Spec {
	dir := t.TempDir()
	return runtime.Spec{
		PodNamespace: "ns", PodName: "p", ContainerName: "c",
		Command:    append([]string{"tool"}, steps...),
		Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
		WorkingDir: "/work",
		LogPath:    filepath.Join(dir, "0.log"),
		Rootfs:     &runtime.Rootfs{Layers: imagetest.Layers(t, filepath.Join(dir, "image"))},
		User:       &runtime.User{},
	}
}

func TestImageMode(t *testing.T) {
	rt := newRuntime(t, nil)
	if ok, reason := rt.Isolation(); !ok {
		if os.Getuid() == 0 {
			t.Fatalf("no isolation as root: %s", reason)
		}
		t.Skipf("no isolation: %s", reason)
	}
	hosts := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hosts, []byte("10.0.0.1 pod"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := imageSpec(t, "pwd", "absent:/etc/os-release", "absent:/etc/gone", "cat:/etc/hosts", "id", "env:HOME", "write:/etc/x=1", "sleep")
	spec.Mounts = []runtime.Mount{{Source: hosts, Target: "/etc/hosts", ReadOnly: true}}
	uid := int64(0)
	spec.User.RunAsUser = &uid
	h, err := rt.Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	waitForLog(t, spec.LogPath, "wrote /etc/x")
	want := "/work\nabsent /etc/os-release\nabsent /etc/gone\n10.0.0.1 pod\nuid=0 gid=0"
	if got := readLog(t, spec.LogPath); !strings.HasPrefix(got, want) || !strings.Contains(got, "HOME=/root\n") {
		t.Errorf("log = %q, want it to start with %q and hold HOME=/root", got, want)
	}
	var out bytes.Buffer
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	devNull, _ := os.Open(os.DevNull)
	defer func() { _ = devNull.Close() }()
	done := make(chan struct{})
	go func() { _, _ = out.ReadFrom(r); close(done) }()
	code, err := h.(runtime.Execer).Exec(context.Background(), runtime.ExecRequest{Command: []string{"tool", "cat:/etc/x", "pwd", "exit:2"}, Stdin: devNull, Stdout: w, Stderr: w})
	_ = w.Close()
	<-done
	if err != nil || code != 2 || out.String() != "1\n/work\n" {
		t.Errorf("exec = %d, %v, output %q; want 2 and the container's file", code, err, out.String())
	}
	h.Stop(0)
	if res := wait(t, h); res.ExitCode != 137 {
		t.Errorf("result = %+v, want killed", res)
	}

	// A restarted container starts from the image again.
	spec2 := imageSpec(t, "absent:/etc/x")
	spec2.Rootfs = spec.Rootfs
	h, err = rt.Start(context.Background(), spec2)
	if err != nil {
		t.Fatal(err)
	}
	if res := wait(t, h); res.ExitCode != 0 || readLog(t, spec2.LogPath) != "absent /etc/x\n" {
		t.Errorf("second attempt: %+v, log %q", res, readLog(t, spec2.LogPath))
	}
}

func TestImageModeStartErrors(t *testing.T) {
	off, err := New(context.Background(), Options{StateDir: filepath.Join(t.TempDir(), "state"), Isolation: IsolationOff})
	if err != nil {
		t.Fatal(err)
	}
	var se *runtime.StartError
	if _, err := off.Start(context.Background(), imageSpec(t, "exit:0")); !errors.As(err, &se) || se.Reason != ReasonCreateContainerError || !strings.Contains(se.Message, "needs a private mount namespace") {
		t.Errorf("image without isolation: %v", err)
	}
	if ok, _ := off.Isolation(); ok {
		t.Errorf("Isolation() = true with isolation off")
	}
	rt := newRuntime(t, nil)
	if ok, _ := rt.Isolation(); !ok {
		t.Skip("no isolation")
	}
	spec := imageSpec(t)
	spec.Command = nil
	if _, err := rt.Start(context.Background(), spec); !errors.As(err, &se) || se.Reason != ReasonNoCommand || !strings.Contains(se.Message, "nor its image") {
		t.Errorf("no command: %v", err)
	}
	spec = imageSpec(t, "exit:0")
	spec.User = &runtime.User{Image: "nobody-here"}
	if _, err := rt.Start(context.Background(), spec); !errors.As(err, &se) || se.Reason != ReasonCreateContainerError || !strings.Contains(se.Message, "unable to find user") {
		t.Errorf("unknown user: %v", err)
	}
	spec = imageSpec(t, "exit:0")
	spec.Command = []string{"sh", "-c", "true"}
	if _, err := rt.Start(context.Background(), spec); !errors.As(err, &se) || se.Reason != ReasonStartError {
		t.Errorf("the host's sh in an image: %v", err)
	}
}

// startWithin calls rt.Start and fails the test when it has not returned
// within limit.
func startWithin(t *testing.T, ctx context.Context, rt *Runtime, spec runtime.Spec, limit time.Duration) (runtime.Handle, error) {
	t.Helper()
	type result struct {
		h   runtime.Handle
		err error
	}
	ch := make(chan result, 1)
	go func() {
		h, err := rt.Start(ctx, spec)
		ch <- result{h, err}
	}()
	select {
	case r := <-ch:
		return r.h, r.err
	case <-time.After(limit):
		t.Fatalf("Start did not return within %v", limit)
		return nil, nil
	}
}

func TestImageWithAFIFOPasswdFailsToStart(t *testing.T) {
	rt := newRuntime(t, nil)
	if ok, _ := rt.Isolation(); !ok {
		t.Skip("no isolation")
	}
	spec := imageSpec(t, "exit:0")
	passwd := filepath.Join(spec.Rootfs.Layers[0], "etc/passwd")
	if err := os.Remove(passwd); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(passwd, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := startWithin(t, context.Background(), rt, spec, 30*time.Second)
	var se *runtime.StartError
	if !errors.As(err, &se) || se.Reason != ReasonCreateContainerError || !strings.Contains(se.Message, "/etc/passwd of the image is not a regular file") {
		t.Errorf("Start = %v, want %s saying /etc/passwd is not a regular file", err, ReasonCreateContainerError)
	}
	if n := recorded(rt); n != 0 {
		t.Errorf("state dir lists %d sandboxes after a failed start", n)
	}
}

func TestStartOfASilentSandboxTimesOut(t *testing.T) {
	// A sandbox that never reports, having started a process of its own.
	exe := filepath.Join(t.TempDir(), "sandbox.sh")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\nsleep 3073 &\nexec sleep 3074\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	rt, err := New(context.Background(), Options{StateDir: filepath.Join(t.TempDir(), "state"), Executable: exe, StartTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if ok, reason := rt.Isolation(); ok || !strings.Contains(reason, "did not start within 300ms") {
		t.Errorf("Isolation() = %t, %q; want no isolation, the probe having timed out", ok, reason)
	}
	for name, cancelAfter := range map[string]time.Duration{"timeout": 0, "cancelled": 100 * time.Millisecond} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			want := "the container did not start within 300ms"
			if cancelAfter > 0 {
				time.AfterFunc(cancelAfter, cancel)
				want = "context canceled"
			}
			spec := childSpec(t, "print")
			start := time.Now()
			_, err := startWithin(t, ctx, rt, spec, 30*time.Second)
			var se *runtime.StartError
			if !errors.As(err, &se) || se.Reason != ReasonCreateContainerError || !strings.Contains(se.Message, want) {
				t.Errorf("Start = %v, want %s saying %q", err, ReasonCreateContainerError, want)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("Start took %v", d)
			}
			if n := recorded(rt); n != 0 {
				t.Errorf("state dir lists %d sandboxes after a failed start", n)
			}
			for _, pid := range silentSandboxes() {
				waitGone(t, pid)
			}
		})
	}
}

// silentSandboxes lists the processes of TestStartOfASilentSandboxTimesOut's
// sandboxes.
func silentSandboxes() []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		if s := string(b); s == "sleep\x003073\x00" || s == "sleep\x003074\x00" {
			pid, _ := strconv.Atoi(e.Name())
			out = append(out, pid)
		}
	}
	return out
}

// recorded counts the sandboxes recorded in rt's state directory.
func recorded(rt *Runtime) int {
	n := 0
	entries, _ := os.ReadDir(rt.opts.StateDir)
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err == nil {
			n++
		}
	}
	return n
}

// canLowerOOMScore reports whether this process holds CAP_SYS_RESOURCE,
// which lowering an oom_score_adj takes (root usually does; some
// container sandboxes drop it).
func canLowerOOMScore(t *testing.T) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<unix.CAP_SYS_RESOURCE) != 0
		}
	}
	return false
}

// TestOOMScoreAdj: the container's processes, main and exec'd, get the
// oom_score_adj the agent asks for (the kubelet's, by QoS class); without
// CAP_SYS_RESOURCE (a user) only a value above the agent's own can be set.
func TestOOMScoreAdj(t *testing.T) {
	rt := newRuntime(t, nil)
	want := 1000 // above anyone's: always allowed
	if canLowerOOMScore(t) {
		want = -997 // a Guaranteed pod's
	}
	spec := childSpec(t, "")
	spec.Command = []string{"sh", "-c", "cat /proc/self/oom_score_adj; sleep 30"}
	spec.Env = []string{"PATH=/usr/bin:/bin"}
	spec.OOMScoreAdj = &want
	h := startAttempt(t, rt, spec)
	got := ""
	for i := 0; i < 100 && got == ""; i++ {
		time.Sleep(20 * time.Millisecond)
		got = strings.TrimSpace(readLog(t, spec.LogPath))
	}
	if got != strconv.Itoa(want) {
		t.Errorf("main process's oom_score_adj %q, want %d", got, want)
	}
	ex, ok := h.(runtime.Execer)
	if !ok {
		t.Fatal("the process runtime's handle does not exec")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = devNull.Close() }()
	code, err := ex.Exec(context.Background(), runtime.ExecRequest{Command: []string{"/bin/cat", "/proc/self/oom_score_adj"}, Stdin: devNull, Stdout: w, Stderr: w})
	_ = w.Close()
	if err != nil || code != 0 {
		t.Fatalf("exec: code %d, err %v", code, err)
	}
	b, _ := io.ReadAll(r)
	if got := strings.TrimSpace(string(b)); got != strconv.Itoa(want) {
		t.Errorf("exec'd command's oom_score_adj %q, want %d", got, want)
	}
}
