package process

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/logfile"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// stdio is the main process's standard streams for one attempt, as a
// container runtime's shim keeps them: output goes to the log and to the
// clients attached at the time; stdin, when the container has one, is a
// pipe (or the terminal) held open here, so that the container blocks
// reading it until a client attaches and writes, instead of reading end of
// file at once.
type stdio struct {
	// tty says the streams are one terminal.
	tty bool
	// stdinOnce closes stdin once the first client that attached with
	// stdin detaches (not with a terminal, as containerd).
	stdinOnce bool
	// child are the main process's stdin, stdout and stderr (nil stdin:
	// /dev/null); ours are closed once the sandbox has them (started).
	child [3]*os.File
	// outs fan out stdout and stderr (with a terminal only outs[0] is
	// used).
	outs [2]*fanout
	// readers are our ends of the output: the pipes, or the terminal.
	readers []*os.File
	// copiers copy the output until the container's ends.
	copiers sync.WaitGroup
	// ended is closed once the output has ended (every copier returned).
	ended chan struct{}

	// mu guards in.
	mu sync.Mutex
	// in is where clients' stdin goes (the pipe's write end, or the
	// terminal); nil without stdin, or once closed.
	in *os.File
	// term is the terminal's controlling side, nil without a terminal.
	term *os.File
}

// newStdio creates the streams of spec, the output going to lw.
func newStdio(spec runtime.Spec, lw *logfile.Writer) (s *stdio, err error) {
	s = &stdio{
		tty:       spec.TTY,
		stdinOnce: spec.StdinOnce,
		outs:      [2]*fanout{newFanout(lw.Stream("stdout")), newFanout(lw.Stream("stderr"))},
		ended:     make(chan struct{}),
	}
	defer func() {
		if err != nil {
			s.abort()
		}
	}()
	if spec.TTY {
		term, tt, err := pty.Open()
		if err != nil {
			return s, fmt.Errorf("allocating the container's terminal: %w", err)
		}
		s.term, s.child = term, [3]*os.File{tt, tt, tt}
		s.readers = []*os.File{term}
		if spec.Stdin {
			s.in = term
		}
		return s, nil
	}
	if spec.Stdin {
		r, w, err := os.Pipe()
		if err != nil {
			return s, fmt.Errorf("creating the container's stdin: %w", err)
		}
		s.child[0], s.in = r, w
	}
	for i := 1; i <= 2; i++ {
		r, w, err := os.Pipe()
		if err != nil {
			return s, fmt.Errorf("creating output pipe: %w", err)
		}
		s.child[i] = w
		s.readers = append(s.readers, r)
	}
	return s, nil
}

// started lets go of the main process's ends, which the sandbox now holds,
// and copies the output until it ends. A terminal's end of output is the
// error its controlling side reads once nothing holds the other side.
func (s *stdio) started() {
	s.closeChild()
	for i, r := range s.readers {
		s.copiers.Add(1)
		go func() {
			defer s.copiers.Done()
			_, _ = io.Copy(s.outs[i], r)
		}()
	}
	go func() {
		s.copiers.Wait()
		for _, f := range s.outs {
			f.end()
		}
		close(s.ended)
	}()
}

// wait waits for the output to end, then releases everything: stdin
// included, so that a client still writing is told.
func (s *stdio) wait() {
	<-s.ended
	s.closeIn()
	for _, r := range s.readers {
		_ = r.Close()
	}
}

// abort releases everything of an attempt that did not start.
func (s *stdio) abort() {
	s.closeChild()
	s.closeIn()
	for _, r := range s.readers {
		_ = r.Close()
	}
}

// closeChild closes our copies of the main process's ends.
func (s *stdio) closeChild() {
	seen := map[*os.File]bool{}
	for _, f := range s.child {
		if f != nil && !seen[f] {
			seen[f] = true
			_ = f.Close()
		}
	}
}

// closeIn closes stdin: the container reads end of file (a pipe). The
// terminal is closed by wait, once its output has been read.
func (s *stdio) closeIn() {
	s.mu.Lock()
	in := s.in
	s.in = nil
	s.mu.Unlock()
	if in != nil && in != s.term {
		_ = in.Close()
	}
}

// stdin returns where clients' stdin goes, nil when the container has no
// stdin (or it was closed).
func (s *stdio) stdin() *os.File {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.in
}

// attach implements runtime.Attacher for the attempt; see there.
func (s *stdio) attach(ctx context.Context, req runtime.AttachRequest) error {
	var clients []*client
	if req.Stdout != nil {
		clients = append(clients, s.outs[0].add(req.Stdout))
	}
	if req.Stderr != nil && !s.tty {
		clients = append(clients, s.outs[1].add(req.Stderr))
	}
	defer func() {
		for _, c := range clients {
			c.remove()
		}
	}()
	gone := make(chan struct{}, len(clients)+1)
	for _, c := range clients {
		go func() {
			select {
			case <-c.gone:
				gone <- struct{}{}
			case <-ctx.Done():
			}
		}()
	}
	detach := make(chan struct{})
	if req.Stdin != nil {
		in := s.stdin()
		go func() {
			if in == nil {
				// Nothing reads it: the client's stdin is drained and its
				// end is not a detach (the container has no stdin).
				_, _ = io.Copy(io.Discard, req.Stdin)
				return
			}
			_, _ = io.Copy(in, req.Stdin)
			if s.stdinOnce && !s.tty {
				// The container reads end of file; its output still
				// follows until it ends.
				s.closeIn()
				return
			}
			close(detach)
		}()
	}
	if s.term != nil && req.Resize != nil {
		go func() {
			for {
				select {
				case size, ok := <-req.Resize:
					if !ok {
						return
					}
					s.resize(size)
				case <-s.ended:
					return
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-detach:
	case <-s.ended:
	case <-gone:
	}
	return nil
}

// resize sets the terminal's size. The ioctl goes through the file's
// syscall.RawConn, which holds the descriptor while it runs and refuses
// once wait has closed the terminal: through Fd (pty.Setsize) it raced
// with that Close, and the number could be another file's by then.
func (s *stdio) resize(size runtime.TerminalSize) {
	conn, err := s.term.SyscallConn()
	if err != nil {
		return
	}
	ws := &unix.Winsize{Row: size.Height, Col: size.Width}
	_ = conn.Control(func(fd uintptr) {
		_ = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, ws)
	})
}

// fanout writes a stream to the log and to the clients attached to it. A
// client whose write fails is dropped; the container's output is never held
// up by one that is gone (a client that stops reading holds it up, as with
// containerd).
type fanout struct {
	// log is the stream's log writer.
	log io.Writer
	// mu guards clients and done.
	mu sync.Mutex
	// clients are the attached writers.
	clients map[*client]bool
	// done is set once the stream ended.
	done bool
}

// client is one attached writer.
type client struct {
	// f is the fanout it is attached to.
	f *fanout
	// w receives the stream.
	w io.Writer
	// gone is closed when it is dropped: its write failed, or the stream
	// ended.
	gone chan struct{}
	// once closes gone.
	once sync.Once
}

// newFanout returns a fanout to log.
func newFanout(log io.Writer) *fanout {
	return &fanout{log: log, clients: map[*client]bool{}}
}

// add attaches w. Once the stream has ended the client is gone at once.
func (f *fanout) add(w io.Writer) *client {
	c := &client{f: f, w: w, gone: make(chan struct{})}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		c.once.Do(func() { close(c.gone) })
		return c
	}
	f.clients[c] = true
	return c
}

// remove detaches c.
func (c *client) remove() {
	c.f.mu.Lock()
	delete(c.f.clients, c)
	c.f.mu.Unlock()
	c.once.Do(func() { close(c.gone) })
}

// Write implements io.Writer: the log first, then every client attached
// before the log got p. (A client attaching once p is in the log, where a
// caller may already have read it, does not get p again.)
func (f *fanout) Write(p []byte) (int, error) {
	f.mu.Lock()
	clients := make([]*client, 0, len(f.clients))
	for c := range f.clients {
		clients = append(clients, c)
	}
	f.mu.Unlock()
	n, err := f.log.Write(p)
	for _, c := range clients {
		if _, werr := c.w.Write(p); werr != nil {
			c.remove()
		}
	}
	if err != nil {
		return n, err
	}
	return len(p), nil
}

// end drops every client: the stream is over.
func (f *fanout) end() {
	f.mu.Lock()
	clients := f.clients
	f.clients, f.done = map[*client]bool{}, true
	f.mu.Unlock()
	for c := range clients {
		c.once.Do(func() { close(c.gone) })
	}
}
