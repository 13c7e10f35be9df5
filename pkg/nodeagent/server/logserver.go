package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/logfile"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// Config is what the server needs from the agent.
type Config struct {
	// NodeName is the node's name, for the errors it answers.
	NodeName string
	// Address is the address it listens on (the node's), and Port the
	// port; 0 picks a free one.
	Address string
	Port    int
	// ServingCertFile and ServingKeyFile are its certificate and key.
	ServingCertFile, ServingKeyFile string
	// ClientCAFile signs the certificates of the clients it serves.
	ClientCAFile string
	// AllowedClientCommonNames are the common names it serves.
	AllowedClientCommonNames []string
	// Clock gives sinceSeconds and a followed log's start.
	Clock clock.PassiveClock
	// Pods lists the pods bound to the node.
	Pods corelisters.PodLister
	// DialPod, when set, connects to a port of a pod with a network of
	// its own from inside its namespace (port-forward); it returns false
	// for a pod that shares the node's, whose ports are the node's.
	DialPod func(ctx context.Context, pod *corev1.Pod, port int32) (net.Conn, bool, error)
	// LogPath is the log file of one attempt of a container.
	LogPath func(uid types.UID, container string, attempt int32) string
	// RuntimeName is the runtime's name, for the errors it answers.
	RuntimeName func() string
	// Container returns the state of a container of a pod the agent runs;
	// false when the agent runs no such pod or has not seen the container.
	Container func(uid types.UID, name string) (ContainerState, bool)
	// Summary serves /stats/summary and ResourceMetrics /metrics/resource
	// (the kubelet's); nil: not served.
	Summary, ResourceMetrics http.Handler
}

// ContainerState is what the server needs of a container the agent runs.
type ContainerState struct {
	// Attempt is the container's current attempt.
	Attempt int32
	// Running is true while it runs.
	Running bool
	// Handle is the running attempt, nil when none runs: exec and attach
	// reach the container through it.
	Handle runtime.Handle
}

// server serves the kubelet endpoints.
type server struct {
	// cfg is what it needs from the agent.
	cfg Config
}

// New builds the TLS server of the kubelet endpoints the apiserver
// proxies to, and listens on Address:Port. Only clients presenting
// a certificate signed by ClientCAFile with an allowed common name are
// served.
func New(cfg Config) (*http.Server, net.Listener, error) {
	srv := &server{cfg: cfg}
	cert, err := tls.LoadX509KeyPair(srv.cfg.ServingCertFile, srv.cfg.ServingKeyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("loading kubelet serving certificate: %w", err)
	}
	caPEM, err := os.ReadFile(srv.cfg.ClientCAFile)
	if err != nil {
		return nil, nil, fmt.Errorf("reading client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, nil, errors.New("client CA file holds no certificate")
	}
	allowed := srv.cfg.AllowedClientCommonNames
	tlsConfig := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		VerifyPeerCertificate: func(_ [][]byte, chains [][]*x509.Certificate) error {
			for _, chain := range chains {
				if len(chain) > 0 && slices.Contains(allowed, chain[0].Subject.CommonName) {
					return nil
				}
			}
			return errors.New("client certificate common name is not allowed")
		},
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(srv.cfg.Address, strconv.Itoa(srv.cfg.Port)))
	if err != nil {
		return nil, nil, fmt.Errorf("listening for the kubelet endpoint: %w", err)
	}
	hs := &http.Server{
		Handler:           srv.logHandler(),
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          klog.NewStandardLogger("WARNING"),
	}
	return hs, tls.NewListener(ln, tlsConfig), nil
}

// logHandler serves /containerLogs/{namespace}/{pod}/{container}, /healthz,
// the streaming endpoints (streaming.go) and the kubelet's /stats/summary
// and /metrics/resource.
func (srv *server) logHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", srv.serveContainerLogs)
	if srv.cfg.Summary != nil {
		mux.Handle("GET /stats/summary", srv.cfg.Summary)
	}
	if srv.cfg.ResourceMetrics != nil {
		mux.Handle("GET /metrics/resource", srv.cfg.ResourceMetrics)
	}
	srv.addStreamingRoutes(mux)
	return mux
}

// serveContainerLogs answers the apiserver's pods/log proxy.
func (srv *server) serveContainerLogs(w http.ResponseWriter, r *http.Request) {
	ns, name, cname := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	q := r.URL.Query()
	opts := logfile.ReadOptions{TailLines: -1, PollInterval: 100 * time.Millisecond}
	var err error
	bad := func(field string) {
		http.Error(w, fmt.Sprintf("invalid %s: %v", field, err), http.StatusBadRequest)
	}
	if v := q.Get("follow"); v != "" {
		if opts.Follow, err = strconv.ParseBool(v); err != nil {
			bad("follow")
			return
		}
	}
	if v := q.Get("timestamps"); v != "" {
		if opts.Timestamps, err = strconv.ParseBool(v); err != nil {
			bad("timestamps")
			return
		}
	}
	previous := false
	if v := q.Get("previous"); v != "" {
		if previous, err = strconv.ParseBool(v); err != nil {
			bad("previous")
			return
		}
	}
	if v := q.Get("tailLines"); v != "" {
		if opts.TailLines, err = strconv.ParseInt(v, 10, 64); err != nil || opts.TailLines < 0 {
			bad("tailLines")
			return
		}
	}
	if v := q.Get("limitBytes"); v != "" {
		if opts.LimitBytes, err = strconv.ParseInt(v, 10, 64); err != nil || opts.LimitBytes < 1 {
			bad("limitBytes")
			return
		}
	}
	if v := q.Get("sinceSeconds"); v != "" {
		var s int64
		if s, err = strconv.ParseInt(v, 10, 64); err != nil || s < 1 {
			bad("sinceSeconds")
			return
		}
		opts.SinceTime = srv.cfg.Clock.Now().Add(-time.Duration(s) * time.Second)
	}
	if v := q.Get("sinceTime"); v != "" {
		if opts.SinceTime, err = time.Parse(time.RFC3339, v); err != nil {
			bad("sinceTime")
			return
		}
	}

	pod, err := srv.cfg.Pods.Pods(ns).Get(name)
	if err != nil {
		if apierrors.IsNotFound(err) {
			http.Error(w, fmt.Sprintf("pod %s/%s not found on node %s", ns, name, srv.cfg.NodeName), http.StatusNotFound)
			return
		}
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if !hasContainer(pod, cname) {
		http.Error(w, fmt.Sprintf("container %s is not valid for pod %s", cname, name), http.StatusBadRequest)
		return
	}
	attempt, running := srv.logAttempt(pod, cname)
	if previous {
		if attempt < 1 {
			http.Error(w, fmt.Sprintf("previous terminated container %q in pod %q not found", cname, name), http.StatusBadRequest)
			return
		}
		attempt--
		running = false
	}
	opts.Running = func() bool { return false }
	if running {
		cur := attempt
		opts.Running = func() bool {
			att, running := srv.logAttempt(pod, cname)
			return running && att == cur
		}
	}
	w.Header().Set("Content-Type", "text/plain")
	out := &flushWriter{w: w}
	// The headers go at once, so that even an empty log is streamed.
	out.Flush()
	if err := logfile.Read(r.Context(), srv.cfg.LogPath(pod.UID, cname, attempt), opts, out); err != nil {
		klog.FromContext(r.Context()).V(2).Info("Reading container log failed", "pod", klog.KObj(pod), "container", cname, "err", err)
	}
}

// logAttempt returns the current attempt of a container and whether it runs.
func (srv *server) logAttempt(pod *corev1.Pod, cname string) (int32, bool) {
	if s, ok := srv.cfg.Container(pod.UID, cname); ok {
		return s.Attempt, s.Running
	}
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for _, s := range list {
			if s.Name == cname {
				return s.RestartCount, false
			}
		}
	}
	return 0, false
}

// hasContainer reports whether the pod declares the container (an
// ephemeral one included).
func hasContainer(pod *corev1.Pod, name string) bool {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if c.Name == name {
				return true
			}
		}
	}
	for _, c := range pod.Spec.EphemeralContainers {
		if c.Name == name {
			return true
		}
	}
	return false
}

// flushWriter flushes after every write, as the kubelet's log endpoint
// does: followers see lines at once, and the answer is always streamed
// (chunked), never sent whole with a Content-Length. The apiserver's
// WebSocket copy of pods/log drops the bytes of a read that also ends the
// body, which a whole small answer is.
type flushWriter struct {
	// w is the response.
	w http.ResponseWriter
}

// Write implements io.Writer.
func (f *flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	f.Flush()
	return n, err
}

// Flush flushes the response.
func (f *flushWriter) Flush() {
	if fl, ok := f.w.(http.Flusher); ok {
		fl.Flush()
	}
}
