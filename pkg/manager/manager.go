package manager

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"jobkeeper.dev/jobkeeper/pkg/metrics"
)

// UserAgent is the user agent of every client the manager builds.
const UserAgent = "jobkeeper"

// Manager runs the selected controllers against one apiserver.
type Manager struct {
	// opts are the validated options.
	opts *Options
	// config is the client configuration with QPS and burst applied.
	config *rest.Config
	// clock is handed to the controllers.
	clock clock.WithTicker
	// ready is true once every controller has started or, with leader
	// election, while this replica stands by as a candidate for the Lease: a
	// standby replica is healthy and ready to take over, and reporting it
	// unready would stall rollouts and block every voluntary disruption.
	ready atomic.Bool
	// synced flips to true once the shared informers have synced.
	synced atomic.Bool
	// metricsAddr and healthAddr are the bound addresses, once serving.
	metricsAddr, healthAddr atomic.Pointer[string]
}

// New validates opts and returns a Manager for the apiserver of config.
func New(config *rest.Config, opts *Options) (*Manager, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	c := rest.CopyConfig(config)
	c.QPS = opts.KubeAPIQPS
	c.Burst = opts.KubeAPIBurst
	// The dynamic and metadata clients built from c choose their own
	// encodings (custom resources have no protobuf form).
	c.ContentType = opts.KubeAPIContentType
	if opts.KubeAPIContentType == ContentTypeProtobuf {
		c.AcceptContentTypes = ContentTypeProtobuf + "," + ContentTypeJSON
	}
	c.UserAgent = UserAgent
	return &Manager{opts: opts, config: c, clock: clock.RealClock{}}, nil
}

// MetricsAddr returns the address /metrics is served on, once it is.
func (m *Manager) MetricsAddr() string { return deref(m.metricsAddr.Load()) }

// HealthAddr returns the address /healthz and /readyz are served on, once they are.
func (m *Manager) HealthAddr() string { return deref(m.healthAddr.Load()) }

// Synced reports whether the shared informers of the running controllers
// have completed their initial list (the benchmarks time start-up with it).
func (m *Manager) Synced() bool { return m.synced.Load() }

// Run checks the apiserver when Options.ServerCheck is set, serves the HTTP
// endpoints, then (after winning leader election when it
// is enabled) starts the controllers, and blocks until ctx is done and every
// controller has returned. Losing the lease is an error: the caller should
// exit so that a fresh process competes again.
func (m *Manager) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	if m.opts.ServerCheck && m.opts.Enabled(JobController) {
		client, err := kubernetes.NewForConfig(rest.AddUserAgent(m.config, "server-check"))
		if err != nil {
			return err
		}
		if err := checkServer(ctx, client, m.opts.LeaderElectionNamespace, m.opts.ManagedBy, serverCheckBackoff); err != nil {
			return err
		}
	}
	var servers []*http.Server
	if m.opts.MetricsBindAddress != "0" && m.opts.MetricsBindAddress != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{}))
		if m.opts.EnableProfiling {
			mux.HandleFunc("/debug/pprof/", pprof.Index)
			mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
			mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
			mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
			mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		}
		srv, addr, err := serve(ctx, m.opts.MetricsBindAddress, mux)
		if err != nil {
			return fmt.Errorf("serving metrics on %s: %w", m.opts.MetricsBindAddress, err)
		}
		m.metricsAddr.Store(&addr)
		servers = append(servers, srv)
		logger.Info("Serving metrics", "address", addr)
	}
	if m.opts.HealthProbeBindAddress != "0" && m.opts.HealthProbeBindAddress != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") })
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
			if !m.ready.Load() {
				http.Error(w, "controllers not started", http.StatusServiceUnavailable)
				return
			}
			fmt.Fprint(w, "ok")
		})
		srv, addr, err := serve(ctx, m.opts.HealthProbeBindAddress, mux)
		if err != nil {
			shutdown(servers)
			return fmt.Errorf("serving health probes on %s: %w", m.opts.HealthProbeBindAddress, err)
		}
		m.healthAddr.Store(&addr)
		servers = append(servers, srv)
		logger.Info("Serving health probes", "address", addr)
	}
	defer shutdown(servers)

	if !m.opts.LeaderElect {
		return m.runControllers(ctx)
	}
	return m.runWithLeaderElection(ctx)
}

// runWithLeaderElection competes for the Lease and runs the controllers while
// holding it.
func (m *Manager) runWithLeaderElection(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	client, err := kubernetes.NewForConfig(rest.AddUserAgent(m.config, "leader-election"))
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	id := host + "_" + string(uuid.NewUUID())
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1ObjectMeta(m.opts.LeaderElectionNamespace, m.opts.LeaderElectionID),
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	var runErr error
	lost := false
	leCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   m.opts.LeaseDuration,
		RenewDeadline:   m.opts.RenewDeadline,
		RetryPeriod:     m.opts.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            m.opts.LeaderElectionID,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				logger.Info("Became leader, starting controllers", "identity", id)
				runErr = m.runControllers(ctx)
			},
			OnNewLeader: func(identity string) {
				if identity != id {
					logger.Info("Standing by, another replica holds the lease", "leader", identity)
				}
			},
			OnStoppedLeading: func() {
				if ctx.Err() == nil {
					lost = true
				}
				cancel()
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	m.ready.Store(true)
	le.Run(leCtx)
	m.ready.Store(false)
	if lost {
		return errors.New("leader election lost")
	}
	return runErr
}

// runControllers builds every selected controller, starts the shared
// informers, and runs the controllers until ctx is done.
func (m *Manager) runControllers(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	clientConfig := m.config
	if m.opts.Enabled(JobController) {
		fair, stop, err := fairClientConfig(m.config, m.opts, m.clock, metrics.Registry)
		if err != nil {
			return err
		}
		defer stop()
		clientConfig = fair
	}
	client, err := kubernetes.NewForConfig(clientConfig)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(m.config)
	if err != nil {
		return err
	}
	// The metadata client lists and watches the pods outside the Job label
	// (the Job controller's JobPodsOnly); its lists share the typed client's
	// rate limiter (with the Job controller, the fair queue of
	// fairClientConfig), so that --kube-api-qps and --kube-api-burst bound
	// the controllers' requests as a whole. The Job controller's pod writes
	// go through the typed client, asking for metadata-only answers.
	metaConfig := rest.CopyConfig(m.config)
	metaConfig.RateLimiter = client.CoreV1().RESTClient().GetRateLimiter()
	meta, err := metadata.NewForConfig(metaConfig)
	if err != nil {
		return err
	}
	cc := ControllerContext{
		Options:         m.opts,
		RestConfig:      m.config,
		Client:          client,
		Dynamic:         dyn,
		Metadata:        meta,
		InformerFactory: informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(CacheTransform)),
		JobPodFactory: informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(CacheTransform),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = batchv1.ControllerUidLabel })),
		Registerer: metrics.Registry,
		Clock:      m.clock,
	}
	names := append([]string(nil), m.opts.Controllers...)
	sort.Strings(names)
	var runs []RunFunc
	for _, name := range names {
		init, ok := initFuncs[name]
		if !ok {
			logger.Info("Controller is not built into this binary, skipping", "controller", name)
			continue
		}
		run, err := init(ctx, cc)
		if err != nil {
			return fmt.Errorf("starting %s controller: %w", name, err)
		}
		logger.Info("Starting controller", "controller", name)
		runs = append(runs, run)
	}
	cc.InformerFactory.Start(ctx.Done())
	cc.JobPodFactory.Start(ctx.Done())
	var wg sync.WaitGroup
	for _, run := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(ctx)
		}()
	}
	m.ready.Store(true)
	go func() {
		for _, f := range []informers.SharedInformerFactory{cc.InformerFactory, cc.JobPodFactory} {
			for _, ok := range f.WaitForCacheSync(ctx.Done()) {
				if !ok {
					return
				}
			}
		}
		m.synced.Store(true)
	}()
	<-ctx.Done()
	wg.Wait()
	cc.InformerFactory.Shutdown()
	cc.JobPodFactory.Shutdown()
	m.ready.Store(false)
	m.synced.Store(false)
	return nil
}

// serve listens on addr and serves handler until ctx is done.
func serve(ctx context.Context, addr string, handler http.Handler) (*http.Server, string, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "HTTP server stopped", "address", l.Addr().String())
		}
	}()
	return srv, l.Addr().String(), nil
}

func shutdown(servers []*http.Server) {
	for _, s := range servers {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		s.Shutdown(ctx)
		cancel()
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func metav1ObjectMeta(ns, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name}
}
