package process

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// shellSpec is a container running script with the host's sh.
func shellSpec(t *testing.T, script string) runtime.Spec {
	dir := t.TempDir()
	return runtime.Spec{
		PodNamespace: "ns", PodName: "p", ContainerName: "c",
		Command:    []string{"/bin/sh", "-c", script},
		Env:        []string{"PATH=" + os.Getenv("PATH")},
		WorkingDir: dir,
		LogPath:    filepath.Join(dir, "0.log"),
	}
}

// syncBuffer is a buffer written by one goroutine and read by another.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor waits until s holds want.
func waitFor(t *testing.T, what string, s func() string, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(s(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("%s %q never held %q", what, s(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// attach runs an attach in the background; its error arrives on the
// returned channel.
func attach(h runtime.Handle, req runtime.AttachRequest) <-chan error {
	done := make(chan error, 1)
	go func() { done <- h.(runtime.Attacher).Attach(context.Background(), req) }()
	return done
}

// TestStdinIsHeldOpenUntilAttached: a container with stdin reads what a
// client attached later writes (with /dev/null it would read an empty line
// at once and print "got:").
func TestStdinIsHeldOpenUntilAttached(t *testing.T) {
	rt := newRuntime(t, nil)
	spec := shellSpec(t, `echo ready; read line; echo "got:$line"; read line; echo "then:$line"`)
	spec.Stdin = true
	h, err := rt.Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	waitForLog(t, spec.LogPath, "ready")
	inR, inW := io.Pipe()
	var out syncBuffer
	done := attach(h, runtime.AttachRequest{Stdin: inR, Stdout: &out, Stderr: &out})
	if _, err := io.WriteString(inW, "hello\n"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "attached output", out.String, "got:hello\n")
	// The client's stdin ends: it detaches, and the container's stdin
	// stays open (no stdinOnce) for the next client.
	_ = inW.Close()
	if err := <-done; err != nil {
		t.Fatalf("attach: %v", err)
	}
	select {
	case <-h.Done():
		t.Fatalf("the container ended when its client detached: %+v", h.Result())
	default:
	}
	var out2 syncBuffer
	done = attach(h, runtime.AttachRequest{Stdin: strings.NewReader("again\n"), Stdout: &out2})
	if res := wait(t, h); res.ExitCode != 0 {
		t.Fatalf("result %+v", res)
	}
	if err := <-done; err != nil {
		t.Fatalf("second attach: %v", err)
	}
	if got := readLog(t, spec.LogPath); got != "ready\ngot:hello\nthen:again\n" {
		t.Errorf("log %q", got)
	}
}

// TestStdinOnceClosesStdinWhenTheClientLeaves: with stdinOnce the first
// client's end of input is the container's, and the client keeps getting
// output until the container ends.
func TestStdinOnceClosesStdinWhenTheClientLeaves(t *testing.T) {
	rt := newRuntime(t, nil)
	spec := shellSpec(t, `echo ready; cat; echo eof; echo err >&2`)
	spec.Stdin, spec.StdinOnce = true, true
	h, err := rt.Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	waitForLog(t, spec.LogPath, "ready")
	var out, errOut syncBuffer
	err = h.(runtime.Attacher).Attach(context.Background(), runtime.AttachRequest{Stdin: strings.NewReader("a\nb\n"), Stdout: &out, Stderr: &errOut})
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	if res := wait(t, h); res.ExitCode != 0 {
		t.Fatalf("result %+v", res)
	}
	if out.String() != "a\nb\neof\n" || errOut.String() != "err\n" {
		t.Errorf("attached stdout %q, stderr %q", out.String(), errOut.String())
	}
}

// TestTerminal: with tty the main process's streams are a terminal of
// which it is the controlling process; input, resizes and output go
// through it, and the output is in the log as stdout.
func TestTerminal(t *testing.T) {
	rt := newRuntime(t, nil)
	spec := shellSpec(t, `[ -t 0 ] && [ -t 1 ] && echo is-a-tty; echo ready; read line; stty size; echo "got:$line"`)
	spec.Stdin, spec.StdinOnce, spec.TTY = true, true, true
	h, err := rt.Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	waitForLog(t, spec.LogPath, "ready")
	inR, inW := io.Pipe()
	defer func() { _ = inW.Close() }()
	var out syncBuffer
	resize := make(chan runtime.TerminalSize)
	done := attach(h, runtime.AttachRequest{Stdin: inR, Stdout: &out, Resize: resize})
	// The second send returns once the first size was applied.
	resize <- runtime.TerminalSize{Width: 100, Height: 30}
	resize <- runtime.TerminalSize{Width: 100, Height: 30}
	if _, err := io.WriteString(inW, "hi\n"); err != nil {
		t.Fatal(err)
	}
	if res := wait(t, h); res.ExitCode != 0 {
		t.Fatalf("result %+v", res)
	}
	if err := <-done; err != nil {
		t.Fatalf("attach: %v", err)
	}
	// The terminal echoes the input and ends lines with \r\n.
	if want := "hi\r\n30 100\r\ngot:hi\r\n"; out.String() != want {
		t.Errorf("attached output %q, want %q", out.String(), want)
	}
	if got, want := readLog(t, spec.LogPath), "is-a-tty\r\nready\r\nhi\r\n30 100\r\ngot:hi\r\n"; got != want {
		t.Errorf("log %q, want %q", got, want)
	}
}

// TestNoStdin: without stdin the container reads end of file at once, and
// a client's input goes nowhere.
func TestNoStdin(t *testing.T) {
	rt := newRuntime(t, nil)
	spec := shellSpec(t, `read line; echo "got:$line:$?"`)
	h, err := rt.Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if res := wait(t, h); res.ExitCode != 0 {
		t.Fatalf("result %+v", res)
	}
	if got := readLog(t, spec.LogPath); got != "got::1\n" {
		t.Errorf("log %q", got)
	}
	// Attaching to an attempt that ended returns at once.
	if err := h.(runtime.Attacher).Attach(context.Background(), runtime.AttachRequest{Stdin: strings.NewReader("x\n"), Stdout: io.Discard}); err != nil {
		t.Errorf("attach after the end: %v", err)
	}
}
