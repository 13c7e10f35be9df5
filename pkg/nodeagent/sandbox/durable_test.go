package sandbox

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/logfile"
)

// startDurable starts a durable sandbox running command (host mode, or
// isolated), its state in a new directory whose path is longer than a
// socket's path may be; it returns the sandbox and the state directory.
func startDurable(t *testing.T, isolate bool, cfg Config) (*Sandbox, string) {
	t.Helper()
	base := t.TempDir()
	cfg.StateDir = filepath.Join(base, strings.Repeat("d", 60), strings.Repeat("e", 60))
	cfg.LogPath = filepath.Join(base, "logs", "0.log")
	for _, d := range []string{cfg.StateDir, filepath.Dir(cfg.LogPath)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Isolate = isolate
	if isolate {
		cfg.Scratch = filepath.Join(base, "scratch")
		if err := os.Mkdir(cfg.Scratch, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	cfg.Env = append(cfg.Env, "PATH=/usr/local/bin:/usr/bin:/bin")
	s, err := Start(context.Background(), StartOptions{Executable: exe, Config: cfg, Namespaces: isolate})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		KillSession(s.SandboxPID(), s.SandboxStartTime())
		<-s.Done()
	})
	return s, cfg.StateDir
}

// logOf reads the log of a sandbox started by startDurable.
func logOf(t *testing.T, stateDir string) string {
	t.Helper()
	var b strings.Builder
	path := filepath.Join(filepath.Dir(filepath.Dir(stateDir)), "logs", "0.log")
	if err := logfile.Read(context.Background(), path, logfile.ReadOptions{TailLines: -1}, &b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// goAway plays the agent's death: its end of the control socket closes.
// The sandbox it started is its child, so it is also reaped here, as init
// would reap it once the agent is gone.
func goAway(s *Sandbox) {
	_ = s.ctrl.Close()
}

// adopt adopts the sandbox in dir, failing the test on error.
func adopt(t *testing.T, dir string) *Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := Adopt(ctx, dir)
	if err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	return s
}

// waitFor polls cond for up to 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestDurableSandboxOutlivesItsAgent: the agent goes away; the container
// keeps running and writing its log; a new agent adopts it, execs into it
// and stops it; the exit it gets is the container's.
func TestDurableSandboxOutlivesItsAgent(t *testing.T) {
	for _, isolate := range []bool{false, true} {
		t.Run(map[bool]string{false: "host", true: "isolated"}[isolate], func(t *testing.T) {
			if isolate {
				requireNamespaces(t)
			}
			s, dir := startDurable(t, isolate, Config{Command: []string{"sh", "-c", "i=0; while :; do echo line $i; i=$((i+1)); sleep 0.05; done"}})
			rec, err := ReadRecord(dir)
			if err != nil || rec.MainPID != s.PID() || rec.Exited || !rec.Alive() {
				t.Fatalf("record = %+v, %v; want main %d running", rec, err, s.PID())
			}
			goAway(s)
			before := strings.Count(logOf(t, dir), "\n")
			waitFor(t, "the log to grow while no agent holds the sandbox", func() bool {
				return strings.Count(logOf(t, dir), "\n") > before+10
			})
			if _, err := os.Stat(filepath.Join(dir, exitName)); !os.IsNotExist(err) {
				t.Fatalf("exit recorded while the container runs: %v", err)
			}

			a := adopt(t, dir)
			if a.PID() != s.PID() {
				t.Errorf("adopted main PID %d, want %d", a.PID(), s.PID())
			}
			r, w, _ := os.Pipe()
			devNull, _ := os.Open(os.DevNull)
			defer devNull.Close()
			p, err := a.Exec(context.Background(), []string{"sh", "-c", "echo adopted; exit 4"}, false, devNull, w, w)
			_ = w.Close()
			if err != nil {
				t.Fatalf("Exec after adoption: %v", err)
			}
			out, _ := io.ReadAll(r)
			if code, err := p.Wait(context.Background()); err != nil || code != 4 || string(out) != "adopted\n" {
				t.Errorf("exec = %q, %d, %v; want \"adopted\\n\", 4", out, code, err)
			}
			if err := a.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			ex := waitDone(t, a)
			if ex.Code != 143 || ex.Signal != int32(syscall.SIGTERM) || ex.Lost || ex.FinishedAt.IsZero() {
				t.Errorf("exit = %+v, want SIGTERM's 143 with its time", ex)
			}
			rec, err = ReadRecord(dir)
			if err != nil || !rec.Exited || rec.Exit.Code != 143 {
				t.Errorf("record after the exit = %+v, %v", rec, err)
			}
			if _, err := Adopt(context.Background(), dir); !errors.Is(err, ErrNotRunning) {
				t.Errorf("Adopt of an ended sandbox: %v, want ErrNotRunning", err)
			}
		})
	}
}

// TestDurableExitWhileAway: the container ends while no agent holds its
// sandbox; its exit code and time are recorded for the next agent, and
// nothing of it is left.
func TestDurableExitWhileAway(t *testing.T) {
	s, dir := startDurable(t, false, Config{Command: []string{"sh", "-c", "setsid sleep 307 & echo bye; sleep 0.3; exit 7"}})
	goAway(s)
	<-s.Done()
	rec, err := ReadRecord(dir)
	if err != nil || !rec.Exited || rec.Exit.Code != 7 || rec.Exit.FinishedAt.Before(rec.StartedAt) {
		t.Fatalf("record = %+v, %v; want exit 7 after its start", rec, err)
	}
	if _, err := Adopt(context.Background(), dir); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Adopt: %v, want ErrNotRunning", err)
	}
	if got := logOf(t, dir); got != "bye\n" {
		t.Errorf("log = %q", got)
	}
	if left := sleepers(); len(left) > 0 {
		t.Errorf("processes left: %v", describeProcs(left))
	}
}

// TestOrphanedSandboxStopsItsContainer: a durable sandbox whose agent never
// comes back stops its container once OrphanTimeout is over: SIGTERM to
// the main process, and after StopGrace everything is killed.
func TestOrphanedSandboxStopsItsContainer(t *testing.T) {
	t.Run("SIGTERM", func(t *testing.T) {
		s, dir := startDurable(t, false, Config{Command: []string{"sh", "-c", "trap 'echo got TERM; exit 3' TERM; sleep 308 & wait"}, OrphanTimeout: 500 * time.Millisecond})
		goAway(s)
		<-s.Done()
		rec, err := ReadRecord(dir)
		if err != nil || !rec.Exited || rec.Exit.Code != 3 {
			t.Fatalf("record = %+v, %v; want exit 3 from the TERM trap", rec, err)
		}
		if got := logOf(t, dir); got != "got TERM\n" {
			t.Errorf("log = %q", got)
		}
		if left := sleepers(); len(left) > 0 {
			t.Errorf("processes left: %v", describeProcs(left))
		}
	})
	t.Run("SIGKILL after the grace period", func(t *testing.T) {
		s, dir := startDurable(t, false, Config{Command: []string{"sh", "-c", "trap '' TERM; sleep 309 & wait; sleep 309"}, OrphanTimeout: 300 * time.Millisecond, StopGrace: 300 * time.Millisecond})
		goAway(s)
		<-s.Done()
		rec, err := ReadRecord(dir)
		if err != nil || !rec.Exited || rec.Exit.Code != 137 {
			t.Fatalf("record = %+v, %v; want 137", rec, err)
		}
		if left := sleepers(); len(left) > 0 {
			t.Errorf("processes left: %v", describeProcs(left))
		}
	})
	t.Run("adopted in time", func(t *testing.T) {
		s, dir := startDurable(t, false, Config{Command: []string{"sleep", "301"}, OrphanTimeout: time.Second})
		goAway(s)
		a := adopt(t, dir)
		time.Sleep(2 * time.Second)
		select {
		case <-a.Done():
			t.Fatalf("the adopted container ended: %+v", a.Exit())
		default:
		}
		a.Kill()
		if ex := waitDone(t, a); ex.Code != 137 {
			t.Errorf("exit = %+v", ex)
		}
	})
}

// describeProcs names processes for a failure message.
func describeProcs(pids []int) []string {
	var out []string
	for _, pid := range pids {
		st, _ := readStat(pid)
		cmd, _ := os.ReadFile("/proc/" + itoa(pid) + "/cmdline")
		out = append(out, itoa(pid)+" ppid "+itoa(st.ppid)+" sid "+itoa(st.session)+" "+strings.ReplaceAll(string(cmd), "\x00", " "))
	}
	return out
}
