package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/garbagecollector"
)

// DefaultPort is the apiserver's default secure port.
const DefaultPort = 6443

// Config configures Start. Zero values take the documented defaults.
type Config struct {
	// DataDir holds etcd's data, the PKI, logs and the lock. Required.
	DataDir string
	// Port is the apiserver's secure port on 127.0.0.1; 0 picks a free port:
	// the one the data directory served on last (LastPort) when it is free,
	// so that kubeconfigs written earlier keep working, else any.
	Port int
	// KubeconfigOut is where the admin kubeconfig is written. Default <DataDir>/kubeconfig.
	// An existing file is merged into (MergeKubeconfig), not overwritten.
	KubeconfigOut string
	// AuthorizationModes are the apiserver's authorizers. Default ["RBAC"]:
	// the admin user is in system:masters, other identities need RBAC rules,
	// as on a real cluster.
	AuthorizationModes []string
	// ServiceAccountAdmission turns on the apiserver's ServiceAccount
	// admission plugin, as on a real cluster: every pod gets a
	// serviceAccountName ("default" when unset), must name a ServiceAccount
	// that exists, and gets the projected kube-api-access-* volume (token,
	// ca.crt, namespace) unless automountServiceAccountToken says no. Only
	// for a caller that runs what the plugin needs: the serviceaccount
	// controller (the default ServiceAccount of each namespace), the root CA
	// publisher (kube-root-ca.crt) and a node that mounts the volume. Off,
	// pods are admitted in any namespace as they are.
	ServiceAccountAdmission bool
	// ReadyTimeout bounds the wait for /readyz. Default 2 minutes.
	ReadyTimeout time.Duration
	// Bootstrap functions create objects the caller needs before it can
	// start (CRDs, admission policies). They run concurrently, as soon as the
	// apiserver serves its APIs, while its own start-up hooks are still
	// creating the default objects (see bootstrapChecks); Start returns once
	// both are done. They get an admin client configuration; an error fails
	// Start.
	Bootstrap []func(ctx context.Context, admin *rest.Config) error
	// NodeIPs are the node agent's addresses besides loopback, which its
	// serving certificate names (the apiserver reaches it at its
	// InternalIP).
	NodeIPs []net.IP
	// LocalServices are Services of aggregated APIs served in this process
	// (the resource metrics API), and where: the aggregator proxies to
	// them there.
	LocalServices map[types.NamespacedName]*url.URL
}

// bootstrapChecks are the apiserver's readiness checks that only wait for its
// start-up hooks to create default objects: RBAC roles and bindings, priority
// classes and the flow-control configuration. On a new data directory they
// take about 1.5s, and nothing Config.Bootstrap does depends on them (the
// admin is in system:masters, which needs no RBAC rule), so Bootstrap runs
// while they finish.
var bootstrapChecks = []string{
	"poststarthook/rbac/bootstrap-roles",
	"poststarthook/scheduling/bootstrap-system-priority-classes",
	"poststarthook/priority-and-fairness-config-producer",
}

// Bounds of ControlPlane.Stop.
const (
	// gcStopTimeout bounds the wait for the garbage collector.
	gcStopTimeout = 2 * time.Second
	// apiserverStopTimeout bounds the apiserver's own graceful stop: it ends
	// watches at once (watchDrainGrace) and waits for other requests in
	// flight. Connections still open after it are closed.
	apiserverStopTimeout = 2 * time.Second
	// apiserverForcedStopTimeout bounds the wait for the apiserver once its
	// connections were closed.
	apiserverForcedStopTimeout = time.Second
)

// ControlPlane is a running embedded control plane.
type ControlPlane struct {
	// cfg is the defaulted configuration.
	cfg Config
	// pki names the certificate files.
	pki PKI
	// url is the apiserver's https URL.
	url string
	// lock is held on the data directory while running.
	lock *dirLock
	// conns is the apiserver's listener, which tracks its connections.
	conns *trackingListener
	// stopOnce makes Stop run once; later and concurrent calls wait for it.
	stopOnce sync.Once
	// etcd is the embedded etcd server.
	etcd *embed.Etcd
	// removeEtcdSocketDir removes the directory of etcd's socket when it is
	// not etcd's own (see etcdSocket).
	removeEtcdSocketDir func()
	// etcdSocket is the path of etcd's client socket.
	etcdSocket string
	// cancelAPI and cancelGC stop the apiserver and the garbage collector.
	cancelAPI, cancelGC context.CancelFunc
	// apiErr receives the apiserver's exit error.
	apiErr <-chan error
	// gcDone is closed when the garbage collector has stopped.
	gcDone <-chan struct{}
	// gc is the garbage collector (GarbageCollectorKnows).
	gc *garbagecollector.GarbageCollector
	// failed is closed, with failure set, when a component dies on its own.
	failed chan struct{}
	// failure is the first unexpected component error.
	failure error
	// notices say what Start changed that the user should know: a new
	// port, permissions tightened.
	notices []string
}

// Start validates cfg, takes the data directory lock, makes sure the PKI
// exists, starts etcd, kube-apiserver and the garbage collector, waits for
// /readyz, and writes the admin kubeconfig. On error everything already
// started is stopped again and nothing but the PKI and etcd's data (both
// valid on their own) is left on disk.
func Start(ctx context.Context, cfg Config) (_ *ControlPlane, err error) {
	if cfg.DataDir == "" {
		return nil, errors.New("data directory must be set")
	}
	if cfg.KubeconfigOut == "" {
		cfg.KubeconfigOut = filepath.Join(cfg.DataDir, "kubeconfig")
	}
	if len(cfg.AuthorizationModes) == 0 {
		cfg.AuthorizationModes = []string{"RBAC"}
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 2 * time.Minute
	}
	if err := EnsureWritableDir(cfg.DataDir); err != nil {
		return nil, err
	}
	if err := CheckKubeconfigPath(cfg.KubeconfigOut); err != nil {
		return nil, err
	}

	cp := &ControlPlane{cfg: cfg, pki: PKI{Dir: filepath.Join(cfg.DataDir, "pki")}, failed: make(chan struct{})}
	defer func() {
		if err != nil {
			cp.Stop()
		}
	}()
	if cp.lock, err = lockDir(cfg.DataDir); err != nil {
		return nil, err
	}
	if tightened, err := tightenDir(cfg.DataDir); errors.Is(err, os.ErrPermission) {
		// Not this user's directory: say so, but it is the owner's choice.
		cp.notices = append(cp.notices, fmt.Sprintf("WARNING: %v: other users can reach the data directory, which holds the cluster's keys.", err))
	} else if err != nil {
		return nil, err
	} else if tightened != 0 {
		cp.notices = append(cp.notices, fmt.Sprintf("The data directory %s was open to other users (mode %#o); it is now private (mode %#o).", cfg.DataDir, tightened, tightened&^0o077))
	}
	last := LastPort(cfg.DataDir)
	listener, err := listenAPIServer(portCandidates(cfg.Port, last))
	if err != nil {
		return nil, err
	}
	port := listener.Addr().(*net.TCPAddr).Port
	if last != 0 && last != port {
		cp.notices = append(cp.notices, fmt.Sprintf("The apiserver's port is new (%d, was %d): kubeconfigs written earlier for this data directory are stale; %s was updated.", port, last, cfg.KubeconfigOut))
	}
	cp.url = "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cp.conns = trackConnections(listener)

	if err := cp.pki.Ensure(serviceIP, cfg.NodeIPs...); err != nil {
		listener.Close()
		return nil, fmt.Errorf("preparing certificates: %w", err)
	}
	logDir := filepath.Join(cfg.DataDir, "logs")
	if err := os.MkdirAll(logDir, 0o700); err != nil {
		listener.Close()
		return nil, fmt.Errorf("creating log directory: %w", err)
	}
	logger := klog.FromContext(ctx)
	begin := time.Now()
	etcdDir := filepath.Join(cfg.DataDir, "etcd")
	socket, removeSocketDir, err := etcdSocket(etcdDir)
	if err != nil {
		listener.Close()
		return nil, err
	}
	cp.removeEtcdSocketDir, cp.etcdSocket = removeSocketDir, socket
	var etcdURL string
	cp.etcd, etcdURL, err = startEtcd(ctx, etcdDir, socket, filepath.Join(logDir, "etcd.log"))
	if err != nil {
		listener.Close()
		return nil, err
	}

	logger.Info("etcd is ready", "elapsed", time.Since(begin))

	apiCtx, cancelAPI := context.WithCancel(context.WithoutCancel(ctx))
	cp.cancelAPI = cancelAPI
	cp.apiErr, err = startAPIServer(apiCtx, apiserverConfig{
		listener:           cp.conns,
		etcdURL:            etcdURL,
		pki:                cp.pki,
		authorizationModes: cfg.AuthorizationModes,
		serviceAccounts:    cfg.ServiceAccountAdmission,
		localServices:      cfg.LocalServices,
	})
	if err != nil {
		listener.Close()
		return nil, err
	}
	logger.Info("kube-apiserver created", "elapsed", time.Since(begin))
	if err := cp.waitReady(ctx, bootstrapChecks); err != nil {
		return nil, err
	}
	logger.Info("kube-apiserver serves its APIs", "elapsed", time.Since(begin))
	bootCtx, cancelBoot := context.WithCancel(ctx)
	defer cancelBoot()
	bootstrapped := make(chan error, 1)
	go func() { bootstrapped <- cp.bootstrap(bootCtx) }()
	if err := cp.waitReady(ctx, nil); err != nil {
		cancelBoot()
		<-bootstrapped
		return nil, err
	}
	logger.Info("kube-apiserver is ready", "elapsed", time.Since(begin))
	if err := <-bootstrapped; err != nil {
		return nil, err
	}
	logger.Info("Bootstrap objects created", "elapsed", time.Since(begin))

	gcCtx, cancelGC := context.WithCancel(context.WithoutCancel(ctx))
	cp.cancelGC = cancelGC
	if cp.gcDone, cp.gc, err = runGarbageCollector(gcCtx, cp.AdminConfig()); err != nil {
		return nil, err
	}
	go cp.watchComponents()

	kc, err := AdminKubeconfig(cp.url, cp.pki)
	if err != nil {
		return nil, err
	}
	tightened, err := MergeKubeconfig(cfg.KubeconfigOut, kc)
	if err != nil {
		return nil, err
	}
	if tightened != 0 {
		cp.notices = append(cp.notices, fmt.Sprintf("The kubeconfig %s holds credentials and was readable by other users (mode %#o); it is now mode 0600.", cfg.KubeconfigOut, tightened))
	}
	if err := recordPort(cfg.DataDir, port); err != nil {
		return nil, err
	}
	return cp, nil
}

// bootstrap runs the Config.Bootstrap functions concurrently and returns
// their errors.
func (cp *ControlPlane) bootstrap(ctx context.Context) error {
	errs := make(chan error, len(cp.cfg.Bootstrap))
	for _, f := range cp.cfg.Bootstrap {
		go func() { errs <- f(ctx, cp.AdminConfig()) }()
	}
	var all []error
	for range cp.cfg.Bootstrap {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}

// waitReady polls /readyz, leaving out the checks named in exclude, until it
// answers ok.
func (cp *ControlPlane) waitReady(ctx context.Context, exclude []string) error {
	client, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return err
	}
	deadline := time.Now().Add(cp.cfg.ReadyTimeout)
	var last error
	for {
		select {
		case err := <-cp.apiErr:
			return fmt.Errorf("kube-apiserver stopped while starting: %v", err)
		case <-cp.etcd.Err():
			return errors.New("etcd stopped while the apiserver was starting")
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		req := client.Discovery().RESTClient().Get().AbsPath("/readyz")
		for _, check := range exclude {
			req = req.Param("exclude", check)
		}
		body, err := req.DoRaw(rctx)
		cancel()
		if err == nil && string(body) == "ok" {
			return nil
		}
		last = err
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-apiserver not ready within %s: %v", cp.cfg.ReadyTimeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// watchComponents records the first component that stops on its own.
func (cp *ControlPlane) watchComponents() {
	var err error
	select {
	case e, ok := <-cp.apiErr:
		if !ok || e == nil {
			e = errors.New("exited")
		}
		err = fmt.Errorf("kube-apiserver stopped: %w", e)
	case e := <-cp.etcd.Err():
		err = fmt.Errorf("etcd stopped: %w", e)
	case <-cp.gcDone:
		err = errors.New("garbage collector stopped")
	}
	cp.failure = err
	close(cp.failed)
}

// Failed is closed when a component stops unexpectedly; Err then says which.
func (cp *ControlPlane) Failed() <-chan struct{} { return cp.failed }

// Err returns the unexpected failure after Failed is closed.
func (cp *ControlPlane) Err() error { return cp.failure }

// Notices are sentences for the user about what Start changed beyond
// starting: the apiserver's port differs from the data directory's last one
// (earlier kubeconfigs are stale), or the data directory or the kubeconfig
// was open to other users and has been made private.
func (cp *ControlPlane) Notices() []string { return cp.notices }

// URL is the apiserver's https URL.
func (cp *ControlPlane) URL() string { return cp.url }

// KubeconfigPath is where the admin kubeconfig was written.
func (cp *ControlPlane) KubeconfigPath() string { return cp.cfg.KubeconfigOut }

// PKI names the control plane's certificate files.
func (cp *ControlPlane) PKI() PKI { return cp.pki }

// DataDir is the control plane's data directory.
func (cp *ControlPlane) DataDir() string { return cp.cfg.DataDir }

// PrivateDirs are the directories of this machine that hold the control
// plane's secrets or an unauthenticated way into it: the data directory
// and, when its path is too long for a socket there, the directory of
// etcd's socket. The node agent hides them from host-mode containers.
func (cp *ControlPlane) PrivateDirs() []string {
	dirs := []string{cp.cfg.DataDir}
	if d := filepath.Dir(cp.etcdSocket); cp.etcdSocket != "" && !strings.HasPrefix(d+"/", strings.TrimSuffix(cp.cfg.DataDir, "/")+"/") {
		dirs = append(dirs, d)
	}
	return dirs
}

// AdminConfig returns a fresh client configuration for the admin user.
func (cp *ControlPlane) AdminConfig() *rest.Config {
	return &rest.Config{
		Host: cp.url,
		TLSClientConfig: rest.TLSClientConfig{
			CAFile:   cp.pki.CACert(),
			CertFile: cp.pki.AdminCert(),
			KeyFile:  cp.pki.AdminKey(),
		},
		QPS:   500,
		Burst: 1000,
	}
}

// ProtobufConfig returns a copy of cfg that speaks protobuf to the built-in
// APIs, as kube-controller-manager and the kubelet do by default
// (--kube-api-content-type): the apiserver encodes each watch event once for
// every protobuf watcher, and decoding costs the client several times less
// than JSON. Clients of custom resources (dynamic, apiextensions) must not
// use it: those have no protobuf form.
func ProtobufConfig(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return c
}

// Stop stops the garbage collector, the apiserver and etcd, in that order,
// and releases the data directory. etcd is closed only once the apiserver has
// stopped (or could not be stopped within its bounds): closing it under an
// apiserver that still holds etcd watches waits for etcd's request timeout.
// Stop is safe to call more than once and from several goroutines: the
// first call stops, the others wait for it to finish.
func (cp *ControlPlane) Stop() {
	cp.stopOnce.Do(cp.stop)
}

// stop is Stop's single run.
func (cp *ControlPlane) stop() {
	logger := klog.Background()
	if cp.cancelGC != nil {
		cp.cancelGC()
		select {
		case <-cp.gcDone:
		case <-time.After(gcStopTimeout):
			logger.Info("Garbage collector did not stop in time", "timeout", gcStopTimeout)
		}
	}
	if cp.cancelAPI != nil {
		cp.stopAPIServer(logger)
	}
	if cp.etcd != nil {
		cp.etcd.Close()
	}
	if cp.removeEtcdSocketDir != nil {
		cp.removeEtcdSocketDir()
	}
	cp.lock.release()
}

// stopAPIServer cancels the apiserver and waits for it to stop. It ends
// watches itself (see startAPIServer); connections that other long-running
// requests keep open after apiserverStopTimeout are closed.
func (cp *ControlPlane) stopAPIServer(logger klog.Logger) {
	begin := time.Now()
	cp.cancelAPI()
	select {
	case <-cp.apiErr:
		logger.V(2).Info("kube-apiserver stopped", "elapsed", time.Since(begin))
		return
	case <-time.After(apiserverStopTimeout):
	}
	n := cp.conns.closeAll()
	logger.Info("kube-apiserver still serving long-running requests; closed their connections", "timeout", apiserverStopTimeout, "connections", n)
	select {
	case <-cp.apiErr:
		logger.V(2).Info("kube-apiserver stopped", "elapsed", time.Since(begin))
	case <-time.After(apiserverForcedStopTimeout):
		logger.Info("kube-apiserver did not stop; closing etcd under it", "elapsed", time.Since(begin), "openConnections", cp.conns.open())
	}
}

// tightenDir takes group and other permissions off dir, which holds keys,
// etcd's data and credentials, and returns its former mode when it had any
// (0 when it was private already).
func tightenDir(dir string) (os.FileMode, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return 0, fmt.Errorf("data directory %s: %w", dir, err)
	}
	mode := st.Mode().Perm()
	if mode&0o077 == 0 {
		return 0, nil
	}
	if err := os.Chmod(dir, mode&^0o077); err != nil {
		return 0, fmt.Errorf("data directory %s (mode %#o) could not be made private: %w", dir, mode, unwrapPathError(err))
	}
	return mode, nil
}

// EnsureWritableDir creates dir if needed and checks that files can be
// created in it, so a bad --data-dir fails before anything starts.
func EnsureWritableDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("data directory %s cannot be created: %w", dir, unwrapPathError(err))
	}
	f, err := os.CreateTemp(dir, ".write-test-*")
	if err != nil {
		return fmt.Errorf("data directory %s is not writable: %w", dir, unwrapPathError(err))
	}
	f.Close()
	os.Remove(f.Name())
	return nil
}

// CheckKubeconfigPath reports whether a kubeconfig can be written at path:
// its parent must be an existing writable directory, and path itself must not
// be a directory nor a file that is not a valid kubeconfig.
func CheckKubeconfigPath(path string) error {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return fmt.Errorf("kubeconfig path %s is a directory", path)
	}
	parent := filepath.Dir(path)
	st, err := os.Stat(parent)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			// The default path's parent is the data dir, created already; any
			// other missing parent is a mistake worth reporting.
			return fmt.Errorf("kubeconfig path %s: directory %s does not exist", path, parent)
		}
		return fmt.Errorf("kubeconfig path %s: %w", path, unwrapPathError(err))
	}
	if !st.IsDir() {
		return fmt.Errorf("kubeconfig path %s: %s is not a directory", path, parent)
	}
	if err := checkExistingKubeconfig(path); err != nil {
		return err
	}
	f, err := os.CreateTemp(parent, ".kubeconfig-test-*")
	if err != nil {
		return fmt.Errorf("kubeconfig path %s: directory %s is not writable", path, parent)
	}
	f.Close()
	os.Remove(f.Name())
	return nil
}

func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// CheckPort reports whether port can be bound on 127.0.0.1, with the message
// users see when it cannot. Port 0 always can.
func CheckPort(port int) error {
	if port < 0 || port > 65535 {
		return fmt.Errorf("port %d is out of range 0-65535", port)
	}
	if port == 0 {
		return nil
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("port %d on 127.0.0.1 is already in use (choose another with --port)", port)
		}
		return fmt.Errorf("listening on 127.0.0.1:%d: %w", port, err)
	}
	return l.Close()
}
