package process

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// agentSpecEnv carries the spec the "agent" child starts, as JSON.
const agentSpecEnv = "JOBKEEPER_TEST_AGENT_SPEC"

// agentChild plays an agent: it starts the spec of agentSpecEnv with a
// runtime on the state directory of JOBKEEPER_TEST_AGENT_STATE, says
// "started" and waits to be killed.
func agentChild() {
	var spec runtime.Spec
	if err := json.Unmarshal([]byte(os.Getenv(agentSpecEnv)), &spec); err != nil {
		os.Exit(2)
	}
	rt, err := New(context.Background(), Options{StateDir: os.Getenv("JOBKEEPER_TEST_AGENT_STATE")})
	if err != nil {
		os.Exit(2)
	}
	if _, err := rt.Start(context.Background(), spec); err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	fmt.Println("started")
	time.Sleep(time.Hour)
}

// crashAfterStart starts spec from an agent process, then kills that
// process with SIGKILL, as `kill -9` kills `jobkeeper up`.
func crashAfterStart(t *testing.T, state string, spec runtime.Spec) {
	t.Helper()
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = []string{childEnv + "=agent", agentSpecEnv + "=" + string(b), "JOBKEEPER_TEST_AGENT_STATE=" + state}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if line != "started\n" {
		t.Fatalf("the agent did not start the container: %q", line)
	}
}

// durableSpec is childSpec with a state directory.
func durableSpec(t *testing.T, mode string, env ...string) runtime.Spec {
	spec := childSpec(t, mode, env...)
	spec.StateDir = filepath.Join(filepath.Dir(spec.LogPath), "attempt")
	if err := os.Mkdir(spec.StateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	spec.GracePeriod = 5 * time.Second
	return spec
}

// TestAdoptAfterTheAgentCrashed: the attempt of a spec with a StateDir
// keeps running when its agent is killed; the next runtime on the same
// state leaves it alone, adopts it with its PID and start time, its log
// goes on, and Stop ends it with SIGTERM's exit code.
func TestAdoptAfterTheAgentCrashed(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	spec := durableSpec(t, "count")
	crashAfterStart(t, state, spec)
	rt, err := New(context.Background(), Options{StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	got, err := rt.Adopt(context.Background(), spec.StateDir)
	if err != nil || !got.Found || got.Handle == nil {
		t.Fatalf("Adopt = %+v, %v; want the running attempt", got, err)
	}
	if got.PID != got.Handle.PID() || got.StartedAt.IsZero() || time.Since(got.StartedAt) > time.Minute {
		t.Errorf("adopted PID %d (handle %d), started at %v", got.PID, got.Handle.PID(), got.StartedAt)
	}
	n := strings.Count(readLog(t, spec.LogPath), "\n")
	for deadline := time.Now().Add(20 * time.Second); strings.Count(readLog(t, spec.LogPath), "\n") < n+5; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the adopted container's log does not grow")
		}
	}
	got.Handle.Stop(10 * time.Second)
	res := wait(t, got.Handle)
	want := runtime.Result{ExitCode: 143, Signal: int32(syscall.SIGTERM)}
	if ok, _ := rt.PIDNamespaces(); ok {
		// PID 1 of its namespace: Go's runtime exits with 2 on SIGTERM
		// (see TestStopSendsSIGTERM).
		want = runtime.Result{ExitCode: 2}
	}
	if res.ExitCode != want.ExitCode || res.Signal != want.Signal {
		t.Errorf("result = %+v, want exit code %d, signal %d", res, want.ExitCode, want.Signal)
	}
	if !strings.HasPrefix(readLog(t, spec.LogPath), "count 0\ncount 1\n") {
		t.Errorf("log does not start with the first lines: %q", readLog(t, spec.LogPath)[:40])
	}
}

// TestAdoptAnAttemptThatEndedWhileAway: a container that exits while no
// agent holds its sandbox is reported with its own exit code and time,
// and an attempt that never ran is not found.
func TestAdoptAnAttemptThatEndedWhileAway(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	spec := durableSpec(t, "count", "COUNT_TO=3")
	before := time.Now()
	crashAfterStart(t, state, spec)
	rt, err := New(context.Background(), Options{StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	var got runtime.Adopted
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got, err = rt.Adopt(context.Background(), spec.StateDir)
		if err != nil {
			t.Fatal(err)
		}
		if got.Handle == nil {
			break
		}
		// Adopted before the end: let it end, then look again.
		<-got.Handle.Done()
		if time.Now().After(deadline) {
			t.Fatal("the container did not end")
		}
	}
	if !got.Found || got.Result.ExitCode != 5 || got.Result.Reason != "Error" || got.Result.FinishedAt.Before(before) || !got.Result.FinishedAt.After(got.StartedAt) {
		t.Errorf("Adopt = %+v, want the recorded exit code 5 and its time", got)
	}
	if strings.Count(readLog(t, spec.LogPath), "count") != 4 {
		t.Errorf("log = %q, want four lines", readLog(t, spec.LogPath))
	}
	none := filepath.Join(t.TempDir(), "never")
	if err := os.Mkdir(none, 0o700); err != nil {
		t.Fatal(err)
	}
	if got, err := rt.Adopt(context.Background(), none); err != nil || got.Found {
		t.Errorf("Adopt of an attempt that never ran = %+v, %v", got, err)
	}
}

// TestKillRecordedStopsWhatACrashLeft: the durable sandboxes a crashed agent
// left are recorded, and KillRecorded (jobkeeper reset) kills them.
func TestKillRecordedStopsWhatACrashLeft(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	spec := durableSpec(t, "count")
	crashAfterStart(t, state, spec)
	recs := ReadRecorded(state)
	if len(recs) != 1 || !recs[0].Durable || !recs[0].Alive() {
		t.Fatalf("records = %+v, want one durable sandbox running", recs)
	}
	if n := KillRecorded(recs); n == 0 {
		t.Fatal("KillRecorded signalled nothing")
	}
	for deadline := time.Now().Add(20 * time.Second); recs[0].Alive(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the sandbox is still alive")
		}
	}
}
