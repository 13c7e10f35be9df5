package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Timeouts of the end-to-end tests.
const (
	// startTimeout bounds how long `jobkeeper up` may take to print its kubeconfig.
	startTimeout = 90 * time.Second
	// stopTimeout is the contract for a clean shutdown after SIGTERM.
	stopTimeout = 10 * time.Second
)

// process is a running jobkeeper binary.
type process struct {
	// cmd is the child process, in its own process group.
	cmd *exec.Cmd
	// mu guards out.
	mu sync.Mutex
	// out collects stdout and stderr.
	out bytes.Buffer
	// lines receives stdout lines as they are printed.
	lines chan string
	// exited is closed when the process has exited; err is its Wait error.
	exited chan struct{}
	err    error
}

// start runs the jobkeeper binary with args.
func start(t *testing.T, args ...string) *process {
	t.Helper()
	return startBinary(t, binary, args...)
}

// startBinary runs the binary at path with args.
func startBinary(t *testing.T, path string, args ...string) *process {
	t.Helper()
	return startBinaryAs(t, nil, nil, path, args...)
}

// startBinaryAs runs the binary at path with args as cred (nil: this
// process's user), with env added to this process's environment.
func startBinaryAs(t *testing.T, cred *syscall.Credential, env []string, path string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(path, args...), lines: make(chan string, 100), exited: make(chan struct{})}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = writerFunc(func(b []byte) (int, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.out.Write(b)
	})
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			p.mu.Lock()
			p.out.WriteString(s.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.lines <- s.Text():
			default:
			}
		}
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		// Never leave a process behind, whatever the test did.
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	})
	return p
}

// output returns everything printed so far.
func (p *process) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// waitForLine waits until a stdout line matches re and returns its submatches.
func (p *process) waitForLine(t *testing.T, re *regexp.Regexp, timeout time.Duration) []string {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case line := <-p.lines:
			if m := re.FindStringSubmatch(line); m != nil {
				return m
			}
		case <-p.exited:
			t.Fatalf("jobkeeper exited (%v) before printing %q; output:\n%s", p.err, re, p.output())
		case <-deadline:
			t.Fatalf("jobkeeper did not print %q within %s; output:\n%s", re, timeout, p.output())
		}
	}
}

// stop sends SIGTERM and checks that the process exits 0 within stopTimeout
// and that no process of its group survives it.
func (p *process) stop(t *testing.T) time.Duration {
	t.Helper()
	begin := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(stopTimeout):
		t.Fatalf("jobkeeper did not exit within %s of SIGTERM; output:\n%s", stopTimeout, p.output())
	}
	took := time.Since(begin)
	if p.err != nil {
		t.Fatalf("jobkeeper exited with %v after SIGTERM; output:\n%s", p.err, p.output())
	}
	// The group is gone once its last member has exited.
	if err := syscall.Kill(-p.cmd.Process.Pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("processes of jobkeeper's process group are still running after it exited (kill -0: %v)", err)
	}
	return took
}

// waitExit waits for the process to exit on its own and returns its exit
// code and combined output.
func (p *process) waitExit(t *testing.T, timeout time.Duration) (int, string) {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(timeout):
		t.Fatalf("jobkeeper did not exit within %s; output:\n%s", timeout, p.output())
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode(), p.output()
	}
	if p.err != nil {
		t.Fatal(p.err)
	}
	return 0, p.output()
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

var _ io.Writer = writerFunc(nil)

// oneLine fails the test unless s is exactly one non-empty line.
func oneLine(t *testing.T, what, s string) {
	t.Helper()
	s = strings.TrimRight(s, "\n")
	if s == "" || strings.Contains(s, "\n") {
		t.Errorf("%s: want a one-line error, got:\n%s", what, s)
	}
}

// waitForOutput polls everything printed (stdout and stderr) until re
// matches, and returns the submatches.
func (p *process) waitForOutput(t *testing.T, re *regexp.Regexp, timeout time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if m := re.FindStringSubmatch(p.output()); m != nil {
			return m
		}
		select {
		case <-p.exited:
			t.Fatalf("jobkeeper exited (%v) before printing %q; output:\n%s", p.err, re, p.output())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("jobkeeper did not print %q within %s; output:\n%s", re, timeout, p.output())
	return nil
}
