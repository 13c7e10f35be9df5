package sandbox

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// startTest starts a sandbox running command, its output in a pipe.
func startTest(t *testing.T, isolate bool, cfg Config) (*Sandbox, func() string) {
	t.Helper()
	return startTestWith(t, isolate, StartOptions{}, cfg)
}

// startTestWith is startTest with more options (Executable, Config,
// Namespaces, Stdout and Stderr are set here).
func startTestWith(t *testing.T, isolate bool, o StartOptions, cfg Config) (*Sandbox, func() string) {
	t.Helper()
	s, output, err := startSandbox(t, isolate, o, cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return s, output
}

// startSandbox starts a sandbox of cfg (isolated or not, with a scratch
// directory and a PATH) whose output goes to a pipe, and returns the start's
// error instead of failing the test; the sandbox is killed at the test's
// end.
func startSandbox(t *testing.T, isolate bool, o StartOptions, cfg Config) (*Sandbox, func() string, error) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Isolate = isolate
	if isolate {
		cfg.Scratch = filepath.Join(t.TempDir(), "scratch")
		if err := os.Mkdir(cfg.Scratch, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	cfg.Env = append(cfg.Env, "PATH=/usr/local/bin:/usr/bin:/bin")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	o.Executable, o.Config, o.Namespaces, o.Stdout, o.Stderr = exe, cfg, isolate, w, w
	s, err := Start(context.Background(), o)
	_ = w.Close()
	if err != nil {
		_ = r.Close()
		return nil, nil, err
	}
	out := make(chan string, 1)
	go func() { b, _ := io.ReadAll(r); _ = r.Close(); out <- string(b) }()
	t.Cleanup(func() {
		s.Kill()
		<-s.Done()
	})
	return s, func() string { return <-out }, nil
}

// requireNamespaces skips, for a user other than root, when this machine
// cannot build the view. Root always can: a failure is a bug.
func requireNamespaces(t *testing.T) {
	t.Helper()
	exe, _ := os.Executable()
	if err := Probe(context.Background(), exe, filepath.Join(t.TempDir(), "probe"), 0); err != nil {
		if os.Getuid() == 0 {
			t.Fatalf("probe failed as root: %v", err)
		}
		t.Skipf("no private mount namespaces for this user: %v", err)
	}
}

// waitDone waits for the sandbox to exit.
func waitDone(t *testing.T, s *Sandbox) Exit {
	t.Helper()
	select {
	case <-s.Done():
		return s.Exit()
	case <-time.After(30 * time.Second):
		t.Fatal("sandbox did not exit")
		return Exit{}
	}
}

func TestIsolatedWritesStayInTheContainer(t *testing.T) {
	requireNamespaces(t)
	// A host directory outside /tmp, which is private in the view anyway.
	hostDir, err := os.MkdirTemp("/var/tmp", "jobkeeper-sandbox-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(hostDir) })
	vol := t.TempDir()
	ro := t.TempDir()
	if err := os.WriteFile(filepath.Join(ro, "key"), []byte("value"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := strings.Join([]string{
		"echo root > " + hostDir + "/written",
		"cat " + hostDir + "/written",
		"echo vol > /work/x",
		"cat /etc/cfg/key; echo",
		"if (echo no > /etc/cfg/key) 2>/dev/null; then echo WRITABLE; fi",
		"echo tmp > " + vol + "/../private-" + filepath.Base(vol) + " && cat " + vol + "/../private-" + filepath.Base(vol),
		"pwd",
	}, "; ")
	s, output := startTest(t, true, Config{
		Command:    []string{"sh", "-c", script},
		WorkingDir: "/srv/app",
		Mounts:     []Mount{{Source: vol, Target: "/work"}, {Source: ro, Target: "/etc/cfg", ReadOnly: true}},
	})
	if ex := waitDone(t, s); ex.Code != 0 {
		t.Errorf("exit = %+v, output %q", ex, output())
	}
	got, want := output(), "root\nvalue\ntmp\n/srv/app\n"
	if os.Getuid() != 0 {
		// In a user namespace, a directory owned by a user who is not
		// mapped (here root's /var/tmp) cannot be copied up: the write
		// fails instead of staying in the container. Either way the host
		// is untouched, as checked below.
		got = got[strings.Index(got, "value\n"):]
		want = want[strings.Index(want, "value\n"):]
	}
	if got != want {
		t.Errorf("output = %q, want %q", got, want)
	}
	if _, err := os.Stat(filepath.Join(hostDir, "written")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the container's write reached the host: stat = %v", err)
	}
	if _, err := os.Stat("/srv/app"); err == nil {
		t.Errorf("the working directory was created on the host")
	}
	if b, err := os.ReadFile(filepath.Join(vol, "x")); err != nil || string(b) != "vol\n" {
		t.Errorf("volume write: %q, %v", b, err)
	}
	if b, _ := os.ReadFile(filepath.Join(ro, "key")); string(b) != "value" {
		t.Errorf("read-only volume changed: %q", b)
	}
}

func TestExecRunsInTheView(t *testing.T) {
	for _, isolate := range []bool{false, true} {
		t.Run(map[bool]string{false: "host", true: "isolated"}[isolate], func(t *testing.T) {
			if isolate {
				requireNamespaces(t)
			}
			dir := t.TempDir()
			s, _ := startTest(t, isolate, Config{Command: []string{"sleep", "60"}, WorkingDir: dir, Env: []string{"GREETING=hello"}})
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			devNull, _ := os.Open(os.DevNull)
			defer func() { _ = devNull.Close() }()
			p, err := s.Exec(context.Background(), []string{"sh", "-c", "echo $GREETING; pwd; exit 3"}, false, devNull, w, w)
			_ = w.Close()
			if err != nil {
				t.Fatalf("Exec: %v", err)
			}
			b, _ := io.ReadAll(r)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			code, err := p.Wait(ctx)
			if err != nil || code != 3 {
				t.Errorf("Wait = %d, %v; want 3", code, err)
			}
			if got, want := string(b), "hello\n"+dir+"\n"; got != want {
				t.Errorf("output = %q, want %q", got, want)
			}
			if _, err := s.Exec(context.Background(), []string{"no-such-command"}, false, devNull, devNull, devNull); err == nil {
				t.Errorf("Exec of a missing command succeeded")
			}
		})
	}
}

func TestNothingOutlivesTheAgent(t *testing.T) {
	// The main process leaves a daemon in a session of its own and a
	// child in another process group; the agent then disappears.
	s, _ := startTest(t, false, Config{Command: []string{"sh", "-c", "setsid sleep 301 & (set -m; sleep 302 &) ; sleep 303"}})
	deadline := time.Now().Add(10 * time.Second)
	for len(sleepers()) < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := len(sleepers()); n < 3 {
		t.Fatalf("%d sleepers started, want 3", n)
	}
	_ = s.ctrl.Close()
	waitDone(t, s)
	if left := sleepers(); len(left) > 0 {
		t.Errorf("processes left after the agent went away: %v", left)
	}
}

func TestMainExitEndsTheContainer(t *testing.T) {
	s, _ := startTest(t, false, Config{Command: []string{"sh", "-c", "setsid sleep 304 & exit 7"}})
	if ex := waitDone(t, s); ex.Code != 7 || ex.Lost {
		t.Errorf("exit = %+v, want code 7", ex)
	}
	if left := sleepers(); len(left) > 0 {
		t.Errorf("processes left after the main process exited: %v", left)
	}
}

func TestSignalAndKill(t *testing.T) {
	s, _ := startTest(t, false, Config{Command: []string{"sleep", "305"}})
	if err := s.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if ex := waitDone(t, s); ex.Signal != int32(syscall.SIGTERM) || ex.Code != 128+15 {
		t.Errorf("exit = %+v, want SIGTERM", ex)
	}
	s2, _ := startTest(t, false, Config{Command: []string{"sh", "-c", "trap '' TERM; sleep 306"}})
	s2.Kill()
	if ex := waitDone(t, s2); ex.Code != 137 {
		t.Errorf("exit = %+v, want 137", ex)
	}
}

func TestStartFailures(t *testing.T) {
	exe, _ := os.Executable()
	_, err := Start(context.Background(), StartOptions{Executable: exe, Config: Config{Command: []string{"definitely-not-a-command"}, Env: []string{"PATH=/bin"}}})
	var sf *StartFailure
	if !errors.As(err, &sf) || sf.Reason != ReasonStartError || !strings.Contains(sf.Message, "executable file not found") {
		t.Errorf("missing command: %v", err)
	}
	_, err = Start(context.Background(), StartOptions{Executable: exe, Config: Config{Isolate: true, Command: []string{"true"}}})
	if !errors.As(err, &sf) || sf.Reason != ReasonCreateContainerError {
		t.Errorf("isolation without namespaces: %v", err)
	}
}

// sleepers lists the test's sleep processes (arguments 301 to 309).
func sleepers() []int {
	var out []int
	for _, p := range processes() {
		b, err := os.ReadFile("/proc/" + itoa(p.pid) + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) == 2 && args[0] == "sleep" && len(args[1]) == 3 && args[1] >= "301" && args[1] <= "309" && p.ppid != 0 {
			if st, _ := os.ReadFile("/proc/" + itoa(p.pid) + "/stat"); !strings.Contains(string(st), ") Z") {
				out = append(out, p.pid)
			}
		}
	}
	return out
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestSignalGoesToTheMainProcessOnly(t *testing.T) {
	// The shell's child traps TERM too: it says whether the shell's
	// handler had run when TERM reached it.
	dir := t.TempDir()
	child := `trap '[ -e "$DIR/handled" ] && echo child stopped by the handler || echo child signalled first; exit 0' TERM; while :; do sleep 0.1; done`
	script := `trap 'echo got TERM; touch "$DIR/handled"; kill $child; wait; exit 0' TERM; sh -c "$CHILD" & child=$!; echo ready; wait`
	s, output := startTest(t, false, Config{Command: []string{"/bin/sh", "-c", script}, Env: []string{"DIR=" + dir, "CHILD=" + child}})
	// Give the shell time to start its child, and the child to set its
	// trap.
	time.Sleep(300 * time.Millisecond)
	if err := s.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if ex := waitDone(t, s); ex.Code != 0 || ex.Signal != 0 {
		t.Errorf("exit = %+v, want 0 from the shell's handler", ex)
	}
	if got, want := output(), "ready\ngot TERM\nchild stopped by the handler\n"; got != want {
		t.Errorf("output = %q, want %q", got, want)
	}
}

func TestHostnameIsThePods(t *testing.T) {
	requireNamespaces(t)
	if err := ProbeUTS(context.Background(), mustExecutable(t), 0); err != nil {
		if os.Getuid() == 0 {
			t.Fatalf("no UTS namespace as root: %v", err)
		}
		t.Skipf("no UTS namespace: %v", err)
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	const name = "pod-hostname-test"
	s, output := startTestWith(t, true, StartOptions{UTS: true}, Config{Hostname: name, Command: []string{"sh", "-c", "hostname; uname -n; touch /tmp/printed; sleep 60"}})
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	devNull, _ := os.Open(os.DevNull)
	defer func() { _ = devNull.Close() }()
	// Once the main process has printed (/tmp is the view's own).
	p, err := s.Exec(context.Background(), []string{"sh", "-c", "while [ ! -e /tmp/printed ]; do sleep 0.05; done; hostname"}, false, devNull, w, w)
	_ = w.Close()
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	b, _ := io.ReadAll(r)
	if got := string(b); got != name+"\n" {
		t.Errorf("exec'd hostname = %q, want %q", got, name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if code, err := p.Wait(ctx); err != nil || code != 0 {
		t.Errorf("exec Wait = %d, %v", code, err)
	}
	s.Kill()
	waitDone(t, s)
	if got, want := output(), name+"\n"+name+"\n"; got != want {
		t.Errorf("output = %q, want %q", got, want)
	}
	if now, _ := os.Hostname(); now != host {
		t.Errorf("the host's hostname changed from %q to %q", host, now)
	}
}

func TestHostnameNeedsAUTSNamespace(t *testing.T) {
	// Without StartOptions.UTS the name is not set, least of all the
	// host's.
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	s, output := startTest(t, false, Config{Hostname: "not-the-host", Command: []string{"hostname"}})
	if ex := waitDone(t, s); ex.Code != 0 {
		t.Errorf("exit = %+v", ex)
	}
	if got := output(); got != host+"\n" {
		t.Errorf("output = %q, want the host's name %q", got, host)
	}
	if now, _ := os.Hostname(); now != host {
		t.Errorf("the host's hostname changed from %q to %q", host, now)
	}
}

// mustExecutable is the test binary, which links the sandbox.
func mustExecutable(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

func TestReadOnlyRootAndPrivateDev(t *testing.T) {
	requireNamespaces(t)
	vol := t.TempDir()
	term := filepath.Join(t.TempDir(), "termination-log")
	if err := os.WriteFile(term, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	script := strings.Join([]string{
		"if (echo x > /etc/jobkeeper-ro-test) 2>/dev/null; then echo ROOT WRITABLE; else echo root read-only; fi",
		"if (echo x > /tmp/jobkeeper-ro-test) 2>/dev/null; then echo TMP WRITABLE; else echo tmp read-only; fi",
		"echo vol > /work/x && echo volume writable",
		"echo bye > /dev/termination-log && echo message written",
		"echo null > /dev/null && echo devices work",
		"test -c /dev/pts/ptmx && echo pts mounted",
		"stat -f -c %T /dev",
		"pwd",
	}, "; ")
	s, output := startTest(t, true, Config{
		Command:      []string{"sh", "-c", script},
		WorkingDir:   "/srv/ro-app",
		ReadOnlyRoot: true,
		Mounts:       []Mount{{Source: vol, Target: "/work"}, {Source: term, Target: "/dev/termination-log"}},
	})
	if ex := waitDone(t, s); ex.Code != 0 {
		t.Errorf("exit = %+v, output %q", ex, output())
	}
	// A container runtime's /dev: a tmpfs of its own.
	want := "root read-only\ntmp read-only\nvolume writable\nmessage written\ndevices work\npts mounted\ntmpfs\n/srv/ro-app\n"
	if got := output(); got != want {
		t.Errorf("output = %q, want %q", got, want)
	}
	if b, err := os.ReadFile(term); err != nil || string(b) != "bye\n" {
		t.Errorf("termination message file: %q, %v", b, err)
	}
	if _, err := os.Stat("/dev/termination-log"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the termination message file's mount point reached the host's /dev: %v", err)
	}
}

func TestNoNewPrivileges(t *testing.T) {
	checkNoNewPrivileges(t, false, Config{})
}

func TestNoNewPrivilegesInAPIDNamespace(t *testing.T) {
	requirePID(t)
	checkNoNewPrivileges(t, true, Config{PIDNamespace: PIDContainer})
}

// checkNoNewPrivileges starts sandboxes of cfg (isolated or not) without
// and with NoNewPrivileges and checks that the command's process has the
// flag exactly when it is asked for.
func checkNoNewPrivileges(t *testing.T, isolate bool, cfg Config) {
	t.Helper()
	cfg.Command = []string{"sh", "-c", "grep NoNewPrivs /proc/self/status"}
	for _, nnp := range []bool{false, true} {
		cfg.NoNewPrivileges = nnp
		s, output := startTest(t, isolate, cfg)
		if ex := waitDone(t, s); ex.Code != 0 {
			t.Errorf("exit = %+v, output %q", ex, output())
		}
		want := "NoNewPrivs:\t0\n"
		if nnp {
			want = "NoNewPrivs:\t1\n"
		}
		if got := output(); got != want {
			t.Errorf("NoNewPrivileges %v: %q, want %q", nnp, got, want)
		}
	}
}

// TestRecursiveReadOnlyVolume: a read-only volume with a mount below its
// source is read-only at its top only (the kubelet's readOnly), and with
// RecursiveReadOnly (recursiveReadOnly Enabled) below it too. As root: the
// mount below the source is made on the host.
func TestRecursiveReadOnlyVolume(t *testing.T) {
	requireNamespaces(t)
	if os.Getuid() != 0 {
		t.Skip("mounting below the volume's source on the host needs root")
	}
	if !RecursiveReadOnlySupported() {
		t.Skip("no mount_setattr (Linux 5.12)")
	}
	vol := t.TempDir()
	sub := filepath.Join(vol, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", sub, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(sub, unix.MNT_DETACH) })
	script := "if touch /data/top 2>/dev/null; then echo top writable; else echo top read-only; fi; " +
		"if touch /data/sub/below 2>/dev/null; then echo below writable; else echo below read-only; fi"
	for _, tc := range []struct {
		recursive bool
		want      string
	}{
		{false, "top read-only\nbelow writable\n"},
		{true, "top read-only\nbelow read-only\n"},
	} {
		s, output := startTest(t, true, Config{
			Command: []string{"sh", "-c", script},
			Mounts:  []Mount{{Source: vol, Target: "/data", ReadOnly: true, RecursiveReadOnly: tc.recursive}},
		})
		if ex := waitDone(t, s); ex.Code != 0 {
			t.Errorf("recursive %v: exit = %+v, output %q", tc.recursive, ex, output())
		}
		if got := output(); got != tc.want {
			t.Errorf("recursive %v: output %q, want %q", tc.recursive, got, tc.want)
		}
	}
}
