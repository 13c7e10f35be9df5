package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeEnv makes the test binary a fake sandbox (see fakeSandbox) instead
// of running the tests.
const fakeEnv = "JOBKEEPER_SANDBOX_TEST_FAKE"

func TestMain(m *testing.M) {
	if mode := os.Getenv(fakeEnv); mode != "" {
		os.Exit(fakeSandbox(mode))
	}
	os.Exit(m.Run())
}

// fakeSandbox plays a sandbox that reports its main process (itself) as
// started and then misbehaves: "mute" reads requests but never answers
// them (it exits on a kill request), "deaf" never reads again.
func fakeSandbox(mode string) int {
	// Nothing of a test outlives it.
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0)
	f := os.NewFile(controlFD, "control")
	conn, err := net.FileConn(f)
	if err != nil {
		return 2
	}
	ctrl := conn.(*net.UnixConn)
	_, _ = io.ReadAll(os.NewFile(configFD, "config"))
	if err := send(ctrl, message{Kind: kindStarted, PID: os.Getpid()}); err != nil {
		return 2
	}
	if mode == "deaf" {
		time.Sleep(time.Hour)
		return 0
	}
	for {
		m, files, err := receive(ctrl)
		closeAll(files)
		if err != nil || m.Kind == kindKill {
			return 0
		}
	}
}

// script writes an executable shell script and returns its path.
func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "sandbox.sh")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// fakeStart starts the test binary as a fake sandbox in mode.
func fakeStart(t *testing.T, mode string) *Sandbox {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s, err := startWithin(t, 30*time.Second, StartOptions{
		Executable: script(t, fmt.Sprintf("export %s=%s\nexec '%s'", fakeEnv, mode, exe)),
		Timeout:    10 * time.Second,
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		KillSession(s.SandboxPID(), s.SandboxStartTime())
		<-s.Done()
	})
	return s
}

// waitGone waits a little for the test's sleep processes to be gone.
func waitGone(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(sleepers()) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if left := sleepers(); len(left) > 0 {
		t.Errorf("processes left running: %v", left)
	}
}

func TestStartOfASilentSandboxTimesOut(t *testing.T) {
	// The sandbox never reports; it left a process in its session.
	exe := script(t, "sleep 307 &\nexec sleep 308")
	for name, tc := range map[string]struct {
		// timeout is StartOptions.Timeout; cancel cancels the context
		// after that long.
		timeout, cancel time.Duration
		// wantMsg is part of the start failure's message.
		wantMsg string
	}{
		"timeout":   {timeout: 300 * time.Millisecond, wantMsg: "the container did not start within 300ms"},
		"cancelled": {timeout: time.Minute, cancel: 300 * time.Millisecond, wantMsg: "context canceled"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel > 0 {
				time.AfterFunc(tc.cancel, cancel)
			}
			start := time.Now()
			s, err := startWithin(t, 30*time.Second, StartOptions{Executable: exe, Timeout: tc.timeout}, ctx)
			var sf *StartFailure
			if s != nil || !errors.As(err, &sf) || sf.Reason != ReasonCreateContainerError || !strings.Contains(sf.Message, tc.wantMsg) {
				t.Errorf("Start = %v, %v; want %s saying %q", s, err, ReasonCreateContainerError, tc.wantMsg)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("Start took %v", d)
			}
			waitGone(t)
		})
	}
}

func TestExecOfAWedgedSandboxEndsWithTheContext(t *testing.T) {
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = devNull.Close() }()
	// mute: the request is sent but never answered. deaf: the socket's
	// buffer fills up, and sending blocks.
	for _, mode := range []string{"mute", "deaf"} {
		t.Run(mode, func(t *testing.T) {
			s := fakeStart(t, mode)
			argv := []string{"true", strings.Repeat("x", 100<<10)}
			for i := 0; i < 10; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				start := time.Now()
				_, err := s.Exec(ctx, argv, false, devNull, devNull, devNull)
				cancel()
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("Exec %d = %v, want the context's deadline", i, err)
				}
				if d := time.Since(start); d > 5*time.Second {
					t.Fatalf("Exec %d took %v", i, d)
				}
			}
			s.mu.Lock()
			n := len(s.execs)
			s.mu.Unlock()
			if n != 0 {
				t.Errorf("%d abandoned exec requests still wait for an answer", n)
			}
		})
	}
}

func TestExecGivenUpIsKilled(t *testing.T) {
	s, _ := startTest(t, false, Config{Command: []string{"sleep", "60"}})
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = devNull.Close() }()
	// Deadlines so short that most requests are given up while the
	// sandbox starts them; the few that are answered in time run on.
	started := 0
	for i := 0; i < 20; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%4)*time.Millisecond)
		_, err := s.Exec(ctx, []string{"sleep", "309"}, false, devNull, devNull, devNull)
		cancel()
		switch {
		case err == nil:
			started++
		case !errors.Is(err, context.DeadlineExceeded):
			t.Errorf("Exec %d = %v, want the context's deadline", i, err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(sleepers()) != started && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := len(sleepers()); n != started {
		t.Errorf("%d commands run, want the %d whose Exec succeeded", n, started)
	}
}
