package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/creack/pty"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/klog/v2"
	utilexec "k8s.io/utils/exec"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/logfile"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/podconfig"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// Timeouts of the streaming endpoints, the kubelet's defaults.
const (
	// streamIdleTimeout closes an exec, attach or port-forward connection
	// that carried nothing for that long.
	streamIdleTimeout = 4 * time.Hour
	// streamCreationTimeout bounds how long the client may take to open
	// its streams.
	streamCreationTimeout = 30 * time.Second
)

// addStreamingRoutes serves the kubelet's exec, attach and portForward
// endpoints, which the apiserver proxies pods/exec, pods/attach and
// pods/portforward to. The protocols (SPDY and WebSocket) are the
// kubelet's own streaming library's.
func (srv *server) addStreamingRoutes(mux *http.ServeMux) {
	for _, method := range []string{"GET", "POST"} {
		mux.HandleFunc(method+" /exec/{namespace}/{pod}/{container}", srv.serveExec)
		mux.HandleFunc(method+" /exec/{namespace}/{pod}/{uid}/{container}", srv.serveExec)
		mux.HandleFunc(method+" /attach/{namespace}/{pod}/{container}", srv.serveAttach)
		mux.HandleFunc(method+" /attach/{namespace}/{pod}/{uid}/{container}", srv.serveAttach)
		mux.HandleFunc(method+" /portForward/{namespace}/{pod}", srv.servePortForward)
		mux.HandleFunc(method+" /portForward/{namespace}/{pod}/{uid}", srv.servePortForward)
	}
}

// streamTarget finds the pod of a streaming request; it answers the request
// itself when it cannot.
func (srv *server) streamTarget(w http.ResponseWriter, r *http.Request) (*corev1.Pod, bool) {
	ns, name := r.PathValue("namespace"), r.PathValue("pod")
	pod, err := srv.cfg.Pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		http.Error(w, fmt.Sprintf("pod %s/%s not found on node %s", ns, name, srv.cfg.NodeName), http.StatusNotFound)
		return nil, false
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return nil, false
	}
	if uid := r.PathValue("uid"); uid != "" && uid != string(pod.UID) {
		http.Error(w, fmt.Sprintf("pod %s/%s has UID %s, not %s", ns, name, pod.UID, uid), http.StatusNotFound)
		return nil, false
	}
	if c := r.PathValue("container"); c != "" && !hasContainer(pod, c) {
		http.Error(w, fmt.Sprintf("container %s is not valid for pod %s", c, name), http.StatusBadRequest)
		return nil, false
	}
	return pod, true
}

// serveExec answers the apiserver's pods/exec proxy.
func (srv *server) serveExec(w http.ResponseWriter, r *http.Request) {
	srv.serveRemoteCommand(w, r, func(st *streamer, pod *corev1.Pod, opts *remotecommand.Options) {
		remotecommand.ServeExec(w, r, st, pod.Name, string(pod.UID), r.PathValue("container"), r.URL.Query()["command"], opts,
			streamIdleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
	})
}

// serveAttach answers the apiserver's pods/attach proxy.
func (srv *server) serveAttach(w http.ResponseWriter, r *http.Request) {
	srv.serveRemoteCommand(w, r, func(st *streamer, pod *corev1.Pod, opts *remotecommand.Options) {
		remotecommand.ServeAttach(w, r, st, pod.Name, string(pod.UID), r.PathValue("container"), opts,
			streamIdleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
	})
}

// serveRemoteCommand finds the pod and parses the stream options of an exec
// or attach request, answering it itself when it cannot, then serves it.
func (srv *server) serveRemoteCommand(w http.ResponseWriter, r *http.Request, serve func(*streamer, *corev1.Pod, *remotecommand.Options)) {
	pod, ok := srv.streamTarget(w, r)
	if !ok {
		return
	}
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	serve(&streamer{srv: srv, pod: pod}, pod, opts)
}

// servePortForward answers the apiserver's pods/portforward proxy.
func (srv *server) servePortForward(w http.ResponseWriter, r *http.Request) {
	pod, ok := srv.streamTarget(w, r)
	if !ok {
		return
	}
	opts, err := portforward.NewV4Options(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	portforward.ServePortForward(w, r, &streamer{srv: srv, pod: pod}, pod.Name, string(pod.UID), opts,
		streamIdleTimeout, streamCreationTimeout, portforward.SupportedProtocols)
}

// streamer runs one streaming request against a pod; it implements the
// streaming library's Executor, Attacher and PortForwarder.
type streamer struct {
	// srv is the server.
	srv *server
	// pod is the request's pod.
	pod *corev1.Pod
}

var (
	_ remotecommand.Executor    = (*streamer)(nil)
	_ remotecommand.Attacher    = (*streamer)(nil)
	_ portforward.PortForwarder = (*streamer)(nil)
)

// running returns the running attempt of a container.
func (s *streamer) running(container string) (runtime.Handle, error) {
	if st, ok := s.srv.cfg.Container(s.pod.UID, container); ok && st.Running && st.Handle != nil {
		return st.Handle, nil
	}
	return nil, fmt.Errorf("container %s in pod %s/%s is not running", container, s.pod.Namespace, s.pod.Name)
}

// ExecInContainer implements remotecommand.Executor: the command runs in
// the container's sandbox, with its environment, working directory and
// filesystem view.
func (s *streamer) ExecInContainer(ctx context.Context, _ string, _ string, container string, cmd []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, _ time.Duration) error {
	h, err := s.running(container)
	if err != nil {
		return err
	}
	ex, ok := h.(runtime.Execer)
	if !ok {
		return fmt.Errorf("the %s runtime cannot run commands in containers", s.srv.cfg.RuntimeName())
	}
	if len(cmd) == 0 {
		return errors.New("no command to run")
	}
	streams, err := newExecStreams(in, out, errOut, tty, resize)
	if err != nil {
		return err
	}
	req := streams.request(cmd)
	code, err := ex.Exec(ctx, req)
	streams.finish()
	if err != nil {
		var se *runtime.StartError
		if errors.As(err, &se) {
			return fmt.Errorf("%s: %s", se.Reason, se.Message)
		}
		return err
	}
	if code != 0 {
		return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with non-zero exit code: %d", code), Code: int(code)}
	}
	return nil
}

// execStreams connects a streaming request's streams to the files an exec'd
// command gets: pipes, or one terminal.
type execStreams struct {
	// child are the command's stdin, stdout and stderr.
	child [3]*os.File
	// closeAfterStart are our copies of the command's ends.
	closeAfterStart []*os.File
	// copiers copy output; finish waits for them.
	copiers sync.WaitGroup
	// closers end what finish must end.
	closers []io.Closer
	// tty says child is a terminal.
	tty bool
}

// newExecStreams creates the command's files and starts copying.
func newExecStreams(in io.Reader, out, errOut io.Writer, tty bool, resize <-chan remotecommand.TerminalSize) (*execStreams, error) {
	e := &execStreams{tty: tty}
	if tty {
		ptmx, tt, err := pty.Open()
		if err != nil {
			return nil, fmt.Errorf("allocating a terminal: %w", err)
		}
		e.child = [3]*os.File{tt, tt, tt}
		e.closeAfterStart = []*os.File{tt}
		e.closers = []io.Closer{ptmx}
		if in != nil {
			go func() { _, _ = io.Copy(ptmx, in) }()
		}
		if out != nil {
			e.copiers.Add(1)
			go func() { defer e.copiers.Done(); _, _ = io.Copy(out, ptmx) }()
		}
		go func() {
			for size := range resize {
				_ = pty.Setsize(ptmx, &pty.Winsize{Rows: size.Height, Cols: size.Width})
			}
		}()
		return e, nil
	}
	devNull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	e.closeAfterStart = append(e.closeAfterStart, devNull)
	e.child = [3]*os.File{devNull, devNull, devNull}
	if in != nil {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		e.child[0] = r
		e.closeAfterStart = append(e.closeAfterStart, r)
		e.closers = append(e.closers, w)
		go func() { _, _ = io.Copy(w, in); _ = w.Close() }()
	}
	for i, dst := range []io.Writer{out, errOut} {
		if dst == nil {
			continue
		}
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		e.child[i+1] = w
		e.closeAfterStart = append(e.closeAfterStart, w)
		e.copiers.Add(1)
		go func() { defer e.copiers.Done(); _, _ = io.Copy(dst, r); _ = r.Close() }()
	}
	return e, nil
}

// request returns the runtime's exec request for cmd. Our copies of the
// command's ends are closed once the runtime has passed them on (Exec
// returns only after the command started or failed), in finish.
func (e *execStreams) request(cmd []string) runtime.ExecRequest {
	return runtime.ExecRequest{Command: cmd, TTY: e.tty, Stdin: e.child[0], Stdout: e.child[1], Stderr: e.child[2]}
}

// finish waits, briefly, for the command's output to drain and releases
// everything. Output of processes the command left running in the
// background is not waited for beyond a second.
func (e *execStreams) finish() {
	for _, f := range e.closeAfterStart {
		_ = f.Close()
	}
	done := make(chan struct{})
	go func() { e.copiers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
	}
	for _, c := range e.closers {
		_ = c.Close()
	}
}

// AttachContainer implements remotecommand.Attacher: the client gets the
// main process's output from now on and, when the container has stdin,
// writes to it; with a terminal, resizes reach it. It ends as containerd's
// attach: when the container's output ends, or the client's stdin ends
// (with stdinOnce and no terminal the container's stdin is closed instead
// and the output follows until the container ends). A runtime that cannot
// attach (simulated) streams the container's log from now on.
func (s *streamer) AttachContainer(ctx context.Context, _ string, _ string, container string, in io.Reader, out, errOut io.WriteCloser, _ bool, resize <-chan remotecommand.TerminalSize) error {
	h, err := s.running(container)
	if err != nil {
		return err
	}
	if at, ok := h.(runtime.Attacher); ok {
		req := runtime.AttachRequest{Stdin: in}
		// A nil interface, not a nil stream in one.
		if out != nil {
			req.Stdout = out
		}
		if errOut != nil {
			req.Stderr = errOut
		}
		if resize != nil {
			sizes := make(chan runtime.TerminalSize)
			go func() {
				defer close(sizes)
				for size := range resize {
					select {
					case sizes <- runtime.TerminalSize{Width: size.Width, Height: size.Height}:
					case <-ctx.Done():
						return
					case <-h.Done():
						return
					}
				}
			}()
			req.Resize = sizes
		}
		return at.Attach(ctx, req)
	}
	return s.followLog(ctx, container, out, errOut)
}

// followLog streams a container's log from now on until the attempt ends or
// the client leaves.
func (s *streamer) followLog(ctx context.Context, container string, out, errOut io.WriteCloser) error {
	attempt, _ := s.srv.logAttempt(s.pod, container)
	dst := io.Writer(out)
	if out == nil {
		dst = errOut
	}
	if errOut == nil && out == nil {
		<-ctx.Done()
		return nil
	}
	opts := logfile.ReadOptions{
		TailLines:    -1,
		SinceTime:    s.srv.cfg.Clock.Now(),
		Follow:       true,
		PollInterval: 100 * time.Millisecond,
		Running: func() bool {
			att, running := s.srv.logAttempt(s.pod, container)
			return running && att == attempt
		},
	}
	return logfile.Read(ctx, s.srv.cfg.LogPath(s.pod.UID, container, attempt), opts, dst)
}

// PortForward implements portforward.PortForwarder: the pod's port is
// dialled inside its network namespace, as CRI runtimes do, where it has
// one; a pod sharing the host's network has its port on 127.0.0.1.
func (s *streamer) PortForward(ctx context.Context, _ string, _ string, port int32, stream io.ReadWriteCloser) error {
	defer func() { _ = stream.Close() }()
	var conn net.Conn
	var err error
	own := false
	if s.srv.cfg.DialPod != nil {
		conn, own, err = s.srv.cfg.DialPod(ctx, s.pod, port)
	}
	if !own {
		var d net.Dialer
		conn, err = d.DialContext(ctx, "tcp", net.JoinHostPort(podconfig.NodeIP, strconv.Itoa(int(port))))
	}
	if err != nil {
		return fmt.Errorf("forwarding to port %d of pod %s/%s: %w", port, s.pod.Namespace, s.pod.Name, err)
	}
	defer func() { _ = conn.Close() }()
	klog.FromContext(ctx).V(3).Info("Forwarding", "pod", klog.KObj(s.pod), "port", port)
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(conn, stream)
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}()
	go func() { _, _ = io.Copy(stream, conn); done <- struct{}{} }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return nil
}
