package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsclientset "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	benchchild "jobkeeper.dev/jobkeeper/bench/child"
	"jobkeeper.dev/jobkeeper/bench/harness"
	"jobkeeper.dev/jobkeeper/deploy/crds"
	"jobkeeper.dev/jobkeeper/pkg/controlplane"
	"jobkeeper.dev/jobkeeper/test/builder"
)

// implementations are the two sides, in the order of even repeats.
var implementations = []string{"jobkeeper", "upstream"}

// env is what every run shares: the control plane, the counting proxy and
// the uncounted admin client.
type env struct {
	cfg *suiteConfig
	// children are the lean controller binaries, by implementation.
	children map[string]string
	// dir holds the control plane's data and the logs.
	dir string
	// proxy counts the child's requests; kubeconfig points at it.
	proxy      *harness.Proxy
	kubeconfig string
	// admin is the direct, uncounted client of set-up and kubelet.
	admin kubernetes.Interface
	// seq numbers namespaces and child logs.
	seq int
}

// runSuite runs every workload and writes the results.
func runSuite(cfg *suiteConfig) error {
	dir, err := os.MkdirTemp("", "jobkeeper-bench-")
	if err != nil {
		return err
	}
	children, err := buildChildren(filepath.Join(dir, "bin"))
	if err != nil {
		return err
	}
	logPath := filepath.Join(dir, "logs", "bench.log")
	logFile, err := controlplane.RedirectKlog(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	fmt.Fprintf(os.Stderr, "bench: control plane data and logs in %s\n", dir)
	meta := collectMeta(cfg)

	// Ctrl-C stops the runs; the results so far are still written.
	ctx, stop := signal.NotifyContext(klog.NewContext(context.Background(), klog.Background()), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cp, err := controlplane.Start(ctx, controlplane.Config{DataDir: dir, KubeconfigOut: filepath.Join(dir, "admin.kubeconfig")})
	if err != nil {
		return fmt.Errorf("starting the control plane (logs: %s): %w", logPath, err)
	}
	defer func() {
		cp.Stop()
		if !cfg.keep {
			os.RemoveAll(dir)
		}
	}()
	// jobkeeper's TTLPolicy CRD, as `jobkeeper up` and deploy/ install it:
	// without it the TTL controller would retry listing a missing resource.
	ext, err := apiextensionsclientset.NewForConfig(cp.AdminConfig())
	if err != nil {
		return err
	}
	if err := crds.Install(ctx, ext); err != nil {
		return fmt.Errorf("installing jobkeeper's CRDs: %w", err)
	}
	e := &env{cfg: cfg, children: children, dir: dir}
	if e.proxy, err = harness.NewProxy(cp.AdminConfig()); err != nil {
		return err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	// The proxy serves TLS so that the controllers speak HTTP/2 to it, one
	// multiplexed connection as with a real apiserver; over plain HTTP/1.1
	// every concurrent request would dial a connection of its own.
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.IPv4(127, 0, 0, 1)}, nil)
	if err != nil {
		return fmt.Errorf("generating the proxy's certificate: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("loading the proxy's certificate: %w", err)
	}
	srv := &http.Server{Handler: e.proxy, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}, MinVersion: tls.VersionTLS12}}
	go srv.ServeTLS(l, "", "")
	defer srv.Close()
	if e.kubeconfig, err = writeProxyKubeconfig(dir, "https://"+l.Addr().String(), certPEM); err != nil {
		return err
	}
	adminCfg := cp.AdminConfig()
	adminCfg.QPS, adminCfg.Burst = 5000, 5000
	if e.admin, err = kubernetes.NewForConfig(adminCfg); err != nil {
		return err
	}

	var results []runResult
	for i, w := range cfg.workloads {
		if ctx.Err() != nil {
			meta.Interrupted = true
			break
		}
		fmt.Fprintf(os.Stderr, "bench: %s: %s\n", w.Name, w.Title)
		rs, err := e.runWorkload(ctx, w, i == len(cfg.workloads)-1)
		results = append(results, rs...)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: %s: %v\n", w.Name, err)
		}
	}
	if ctx.Err() != nil {
		meta.Interrupted = true
	}
	meta.LoadAfter = loadAverage()
	meta.Finished = time.Now().UTC()
	rep := buildReport(meta, cfg, results)
	fmt.Println(renderTables(rep))
	if err := writeOutputs(cfg, rep); err != nil {
		return err
	}
	return failedRuns(results)
}

// failedRuns returns an error naming every run that failed: a check of its
// end state (exact succeeded counts, no tracking finalizer left) or a
// timeout. The results are written first, so the failure is in them too.
func failedRuns(results []runResult) error {
	var failed []string
	for _, r := range results {
		if r.Error != "" {
			failed = append(failed, fmt.Sprintf("%s %s %s #%d: %s", r.Workload, r.Impl, r.Budget, r.Repeat, r.Error))
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("%d run(s) failed:\n  %s", len(failed), strings.Join(failed, "\n  "))
}

// runWorkload runs w for every budget and repeat, alternating the two
// implementations. The last workload's shared objects are left to the
// control plane's removal.
func (e *env) runWorkload(ctx context.Context, w workload, last bool) ([]runResult, error) {
	var memNS string
	if w.Kind == kindMemory {
		// The objects are only read: create them once for every run.
		ns, err := e.namespace(ctx, w)
		if err != nil {
			return nil, err
		}
		t := time.Now()
		if err := createFinishedJobs(ctx, e.admin, ns, w.Jobs, nil); err != nil {
			return nil, err
		}
		if err := createPods(ctx, e.admin, ns, w.Jobs, w.Pods); err != nil {
			return nil, err
		}
		fmt.Fprintf(os.Stderr, "bench: %s: created %d Jobs and %d pods in %v\n", w.Name, w.Jobs, w.Pods, time.Since(t).Round(time.Second))
		memNS = ns
		if !last {
			defer e.cleanup(ctx, ns)
		}
	}
	if w.Kind == kindBusy {
		// Pods of no Job, in a namespace of their own that no run's kubelet
		// watches: they stay Running through every run of the workload.
		ns, err := e.namespace(ctx, w)
		if err != nil {
			return nil, err
		}
		t := time.Now()
		if err := createRunningPods(ctx, e.admin, ns, w.Pods, nil); err != nil {
			return nil, err
		}
		fmt.Fprintf(os.Stderr, "bench: %s: created %d running pods of no Job in %v\n", w.Name, w.Pods, time.Since(t).Round(time.Second))
		if !last {
			defer e.cleanup(ctx, ns)
		}
	}
	var st *startupJob
	if w.Kind == kindStartup {
		var err error
		if st, err = e.createStartupJob(ctx, w); err != nil {
			return nil, err
		}
		if !last {
			defer e.cleanup(ctx, st.ns)
		}
	}
	var out []runResult
	var errs []error
	for _, b := range e.cfg.budgets {
		for rep := range e.cfg.repeats {
			order := implementations
			if rep%2 == 1 {
				order = []string{implementations[1], implementations[0]}
			}
			for _, impl := range order {
				if ctx.Err() != nil {
					return out, errors.Join(append(errs, ctx.Err())...)
				}
				r := runResult{Workload: w.Name, Impl: impl, Budget: b.String(), Repeat: rep + 1, Units: w.units(), LoadBefore: loadAverage()}
				var err error
				switch w.Kind {
				case kindJobs, kindBusy:
					err = e.runJobs(ctx, w, impl, b, &r)
				case kindStartup:
					err = e.runStartup(ctx, w, impl, b, st, &r)
				case kindFairness:
					err = e.runFairness(ctx, w, impl, b, &r)
				case kindTTL:
					err = e.runTTL(ctx, w, impl, b, &r)
				case kindMemory:
					err = e.runMemory(ctx, w, impl, b, memNS, &r)
				}
				if err != nil {
					r.Error = err.Error()
					errs = append(errs, fmt.Errorf("%s at %s, repeat %d: %w", impl, b, rep+1, err))
				}
				fmt.Fprintf(os.Stderr, "bench: %s %s %s #%d: %s\n", w.Name, impl, b, rep+1, r.summary())
				out = append(out, r)
			}
		}
	}
	return out, errors.Join(errs...)
}

// namespace creates a fresh namespace for a run.
func (e *env) namespace(ctx context.Context, w workload) (string, error) {
	e.seq++
	name := fmt.Sprintf("bench-%s-%d", w.Name, e.seq)
	_, err := e.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return name, nil
}

// cleanup deletes the Jobs and pods of ns, so that later runs' informers do
// not list them, and waits until they are gone.
func (e *env) cleanup(ctx context.Context, ns string) {
	logger := klog.FromContext(ctx)
	bg := metav1.DeletePropagationBackground
	if err := e.admin.BatchV1().Jobs(ns).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &bg}, metav1.ListOptions{}); err != nil {
		logger.Error(err, "Deleting Jobs", "namespace", ns)
	}
	if err := e.admin.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{}); err != nil {
		logger.Error(err, "Deleting pods", "namespace", ns)
	}
	err := wait.PollUntilContextTimeout(ctx, time.Second, 15*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := e.admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		undeleted := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				undeleted++
			}
			// A run that failed can leave tracking finalizers behind.
			if len(p.Finalizers) > 0 {
				patch := []byte(`{"metadata":{"finalizers":null}}`)
				_, _ = e.admin.CoreV1().Pods(ns).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{})
			}
		}
		if undeleted > 0 {
			// The first deletion can time out on a loaded machine (10,000
			// pods): ask again.
			_ = e.admin.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
		}
		jobs, err := e.admin.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil && len(pods.Items) == 0 && len(jobs.Items) == 0, nil
	})
	if err != nil {
		logger.Error(err, "Namespace not emptied", "namespace", ns)
	}
	_ = e.admin.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
}

// jobsRun is what the Job workloads share: a namespace, a kubelet that
// finishes every pod at once, a tracker of the namespace's Jobs, and impl's
// controller started and synced.
type jobsRun struct {
	// ctx ends with the run.
	ctx context.Context
	// ns is the run's namespace.
	ns string
	// pods is the kubelet's pod cache.
	pods cache.SharedIndexInformer
	// tracker follows the Jobs.
	tracker *jobTracker
	// child is impl's controller.
	child *child
	// done stops the controller and the kubelet and empties the namespace.
	done func()
}

// startJobsRun sets up a Job workload's run and records the controller's
// start-up time in r. The caller defers run.done.
func (e *env) startJobsRun(ctx context.Context, w workload, impl string, b budget, r *runResult) (*jobsRun, error) {
	ns, err := e.namespace(ctx, w)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	run := &jobsRun{ctx: runCtx, ns: ns}
	run.done = func() {
		if run.child != nil {
			run.child.kill()
		}
		cancel()
		e.cleanup(ctx, ns)
	}
	fail := func(err error) (*jobsRun, error) {
		run.done()
		return nil, err
	}
	if run.pods, err = harness.InstantKubelet(runCtx, e.admin, ns, 16); err != nil {
		return fail(err)
	}
	if run.tracker, err = trackJobs(runCtx, e.admin, ns); err != nil {
		return fail(err)
	}
	if run.child, err = e.startChild(runCtx, impl, w, b); err != nil {
		return fail(err)
	}
	if err := run.child.waitSynced(5 * time.Minute); err != nil {
		return fail(err)
	}
	r.StartupSeconds = run.child.syncedAfter.Seconds()
	return run, nil
}

// finish ends a Job workload's run once its Jobs are Complete: it records
// the pods still holding the tracking finalizer, waits until none does,
// stops the controller (its CPU and memory go into r) and checks that
// every Job succeeded want(name) pods exactly.
func (run *jobsRun) finish(start time.Time, r *runResult, want func(name string) int32) error {
	r.FinalizersAtComplete = podsWithFinalizer(run.pods)
	if err := waitFor(run.ctx, 10*time.Minute, func() bool { return podsWithFinalizer(run.pods) == 0 }); err != nil {
		return fmt.Errorf("%d pods still hold the tracking finalizer: %w", podsWithFinalizer(run.pods), err)
	}
	r.FinalizersDoneSeconds = time.Since(start).Seconds()
	time.Sleep(trailingWrites)
	if err := run.child.stop(r); err != nil {
		return err
	}
	for _, j := range run.tracker.jobs() {
		if j.Status.Succeeded != want(j.Name) {
			return fmt.Errorf("Job %s: succeeded %d, want %d", j.Name, j.Status.Succeeded, want(j.Name))
		}
	}
	return nil
}

// runJobs creates w's Jobs while impl's Job controller runs and measures
// until every Job is Complete and no pod holds the tracking finalizer.
func (e *env) runJobs(ctx context.Context, w workload, impl string, b budget, r *runResult) error {
	run, err := e.startJobsRun(ctx, w, impl, b, r)
	if err != nil {
		return err
	}
	defer run.done()
	ctx, ns, tracker := run.ctx, run.ns, run.tracker

	tw := builder.MakeJob("bench", ns).Completions(int32(w.Completions)).Parallelism(int32(w.Parallelism))
	if w.Indexed {
		tw = tw.Indexed()
	}
	template := tw.Obj()
	start := time.Now()
	created, err := createJobs(ctx, e.admin, template, w.Jobs)
	if err != nil {
		return err
	}
	timeout := 30*time.Minute + time.Duration(w.units())*50*time.Millisecond
	if err := waitFor(ctx, timeout, func() bool { return tracker.complete() == w.Jobs }); err != nil {
		return fmt.Errorf("%d of %d Jobs complete: %w", tracker.complete(), w.Jobs, err)
	}
	last, ttc := tracker.times(created)
	r.WallSeconds = last.Sub(start).Seconds()
	r.P50Seconds = harness.Percentile(ttc, 50)
	r.P99Seconds = harness.Percentile(ttc, 99)
	return run.finish(start, r, func(string) int32 { return int32(w.Completions) })
}

// Timing of the fairness workload's one-pod Jobs.
const (
	// fairnessDelay is when the first one-pod Job is created, after the big
	// Job: while the big Job ramps up its pod creations.
	fairnessDelay = 2 * time.Second
	// fairnessInterval is the time between two one-pod Jobs.
	fairnessInterval = 100 * time.Millisecond
)

// runFairness creates w's big Job, then its one-pod Jobs every
// fairnessInterval, and measures until every Job is Complete and no pod
// holds the tracking finalizer. Wall time is the big Job's, from its
// creation to Complete; p50 and p99 are the one-pod Jobs'.
func (e *env) runFairness(ctx context.Context, w workload, impl string, b budget, r *runResult) error {
	run, err := e.startJobsRun(ctx, w, impl, b, r)
	if err != nil {
		return err
	}
	defer run.done()
	ctx, ns, tracker := run.ctx, run.ns, run.tracker

	create := func(j *batchv1.Job) (time.Time, error) {
		at := time.Now()
		if _, err := e.admin.BatchV1().Jobs(ns).Create(ctx, j, metav1.CreateOptions{}); err != nil {
			return at, fmt.Errorf("creating Job %s: %w", j.Name, err)
		}
		return at, nil
	}
	big := builder.MakeJob("big", ns).Completions(int32(w.Completions)).Parallelism(int32(w.Parallelism)).Obj()
	start, err := create(big)
	if err != nil {
		return err
	}
	small := map[string]time.Time{}
	next := start.Add(fairnessDelay)
	for i := range w.OnePodJobs {
		time.Sleep(time.Until(next))
		next = next.Add(fairnessInterval)
		j := builder.MakeJob(fmt.Sprintf("one-pod-%02d", i), ns).Obj()
		at, err := create(j)
		if err != nil {
			return err
		}
		small[j.Name] = at
	}
	total := 1 + w.OnePodJobs
	timeout := 30*time.Minute + time.Duration(w.units())*50*time.Millisecond
	if err := waitFor(ctx, timeout, func() bool { return tracker.complete() == total }); err != nil {
		return fmt.Errorf("%d of %d Jobs complete: %w", tracker.complete(), total, err)
	}
	bigDone, _ := tracker.completedAt(big.Name)
	_, ttc := tracker.times(small)
	r.WallSeconds = bigDone.Sub(start).Seconds()
	r.P50Seconds = harness.Percentile(ttc, 50)
	r.P99Seconds = harness.Percentile(ttc, 99)
	return run.finish(start, r, func(name string) int32 {
		if name == big.Name {
			return int32(w.Completions)
		}
		return 1
	})
}

// runTTL creates w's finished Jobs with TTL 0, then starts impl's
// TTL-after-finished controller and measures until the namespace holds no Job.
func (e *env) runTTL(ctx context.Context, w workload, impl string, b budget, r *runResult) error {
	ns, err := e.namespace(ctx, w)
	if err != nil {
		return err
	}
	defer e.cleanup(ctx, ns)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := createFinishedJobs(ctx, e.admin, ns, w.Jobs, ptr.To[int32](0)); err != nil {
		return err
	}
	tracker, err := trackJobs(ctx, e.admin, ns)
	if err != nil {
		return err
	}
	c, err := e.startChild(ctx, impl, w, b)
	if err != nil {
		return err
	}
	defer c.kill()
	if err := waitFor(ctx, 30*time.Minute, func() bool { return len(tracker.jobs()) == 0 }); err != nil {
		return fmt.Errorf("%d Jobs left: %w", len(tracker.jobs()), err)
	}
	r.WallSeconds = time.Since(c.started).Seconds()
	r.StartupSeconds = c.syncedAfter.Seconds()
	time.Sleep(trailingWrites)
	if err := c.stop(r); err != nil {
		return err
	}
	return nil
}

// trailingWrites is how long a controller keeps running after the end
// state, so that its asynchronous writes (events) are counted too.
const trailingWrites = 2 * time.Second

// memorySettle is how long the controllers run after their informers synced
// before the steady heap is read.
const memorySettle = 10 * time.Second

// runMemory starts impl's controllers with w's objects present, waits until
// their informers synced, lets them settle, and stops them.
func (e *env) runMemory(ctx context.Context, w workload, impl string, b budget, ns string, r *runResult) error {
	c, err := e.startChild(ctx, impl, w, b)
	if err != nil {
		return err
	}
	defer c.kill()
	if err := c.waitSynced(15 * time.Minute); err != nil {
		return err
	}
	r.StartupSeconds = c.syncedAfter.Seconds()
	r.WallSeconds = r.StartupSeconds
	time.Sleep(memorySettle)
	if err := c.stop(r); err != nil {
		return err
	}
	return nil
}

// waitFor polls cond every 50ms.
func waitFor(ctx context.Context, timeout time.Duration, cond func() bool) error {
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) { return cond(), nil })
}

func podsWithFinalizer(pods cache.SharedIndexInformer) int {
	n := 0
	for _, obj := range pods.GetStore().List() {
		for _, f := range obj.(*corev1.Pod).Finalizers {
			if f == batchv1.JobTrackingFinalizer {
				n++
				break
			}
		}
	}
	return n
}

// jobTracker watches the Jobs of a namespace (uncounted) and records when
// each was first seen Complete.
type jobTracker struct {
	informer cache.SharedIndexInformer
	mu       sync.Mutex
	done     map[string]time.Time
}

func trackJobs(ctx context.Context, c kubernetes.Interface, ns string) (*jobTracker, error) {
	factory := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithNamespace(ns))
	t := &jobTracker{informer: factory.Batch().V1().Jobs().Informer(), done: map[string]time.Time{}}
	see := func(obj any) {
		j, ok := obj.(*batchv1.Job)
		if !ok {
			return
		}
		for _, cond := range j.Status.Conditions {
			if cond.Type == batchv1.JobComplete && cond.Status == corev1.ConditionTrue {
				t.mu.Lock()
				if _, seen := t.done[j.Name]; !seen {
					t.done[j.Name] = time.Now()
				}
				t.mu.Unlock()
			}
		}
	}
	if _, err := t.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: see, UpdateFunc: func(_, obj any) { see(obj) }}); err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	go func() { <-ctx.Done(); factory.Shutdown() }()
	if !cache.WaitForCacheSync(ctx.Done(), t.informer.HasSynced) {
		return nil, fmt.Errorf("Jobs of %s: cache did not sync", ns)
	}
	return t, nil
}

func (t *jobTracker) complete() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.done)
}

// times returns the last completion and each Job's time from its creation
// request to its completion, in seconds.
func (t *jobTracker) times(created map[string]time.Time) (time.Time, []float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var last time.Time
	var ttc []float64
	for name, at := range t.done {
		if at.After(last) {
			last = at
		}
		if c, ok := created[name]; ok {
			ttc = append(ttc, at.Sub(c).Seconds())
		}
	}
	return last, ttc
}

// completedAt returns when the named Job was first seen Complete.
func (t *jobTracker) completedAt(name string) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.done[name]
	return at, ok
}

func (t *jobTracker) jobs() []*batchv1.Job {
	var out []*batchv1.Job
	for _, obj := range t.informer.GetStore().List() {
		out = append(out, obj.(*batchv1.Job))
	}
	return out
}

// parallelDo runs fn(i) for i in [0,n) on 32 goroutines and returns the
// first error.
func parallelDo(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	next := make(chan int)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range 32 {
		wg.Go(func() {
			for i := range next {
				if err := fn(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	return first
}

// createJobs creates n copies of template named bench-<i> and returns when
// each creation request was sent.
func createJobs(ctx context.Context, c kubernetes.Interface, template *batchv1.Job, n int) (map[string]time.Time, error) {
	var mu sync.Mutex
	created := map[string]time.Time{}
	err := parallelDo(ctx, n, func(ctx context.Context, i int) error {
		j := template.DeepCopy()
		j.Name = fmt.Sprintf("bench-%05d", i)
		at := time.Now()
		if _, err := c.BatchV1().Jobs(j.Namespace).Create(ctx, j, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating Job %s: %w", j.Name, err)
		}
		mu.Lock()
		created[j.Name] = at
		mu.Unlock()
		return nil
	})
	return created, err
}

// createFinishedJobs creates n Jobs named j-<i> that completed a minute ago,
// with the given TTL.
func createFinishedJobs(ctx context.Context, c kubernetes.Interface, ns string, n int, ttl *int32) error {
	at := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	start := metav1.NewTime(at.Add(-time.Second))
	return parallelDo(ctx, n, func(ctx context.Context, i int) error {
		job := builder.MakeJob(fmt.Sprintf("j-%05d", i), ns).Obj()
		job.Spec.TTLSecondsAfterFinished = ttl
		j, err := c.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating Job %s: %w", job.Name, err)
		}
		j.Status = builder.SucceededStatus(start, at)
		if _, err := c.BatchV1().Jobs(ns).UpdateStatus(ctx, j, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("finishing Job %s: %w", job.Name, err)
		}
		return nil
	})
}

// createPods creates n pods spread over the jobs Jobs j-<i> of ns (labels and
// controller reference of a Job's pod, no tracking finalizer). The API
// creates them Pending; nothing runs them.
func createPods(ctx context.Context, c kubernetes.Interface, ns string, jobs, n int) error {
	list, err := c.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing Jobs of %s: %w", ns, err)
	}
	if len(list.Items) == 0 {
		return fmt.Errorf("no Jobs in %s", ns)
	}
	return parallelDo(ctx, n, func(ctx context.Context, i int) error {
		j := &list.Items[i%len(list.Items)]
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name:            j.Name + "-" + strconv.Itoa(i),
				Namespace:       ns,
				Labels:          j.Spec.Template.Labels,
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(j, batchv1.SchemeGroupVersion.WithKind("Job"))},
			},
			Spec: *j.Spec.Template.Spec.DeepCopy(),
		}
		if _, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating pod %s: %w", p.Name, err)
		}
		return nil
	})
}

// writeProxyKubeconfig writes a kubeconfig for the counting proxy.
// caPEM is the certificate bundle the proxy's serving certificate chains to.
func writeProxyKubeconfig(dir, url string, caPEM []byte) (string, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["bench"] = &clientcmdapi.Cluster{Server: url, CertificateAuthorityData: caPEM}
	kc.AuthInfos["bench"] = &clientcmdapi.AuthInfo{}
	kc.Contexts["bench"] = &clientcmdapi.Context{Cluster: "bench", AuthInfo: "bench"}
	kc.CurrentContext = "bench"
	path := filepath.Join(dir, "proxy.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return path, nil
}

// child is a running controller process.
type child struct {
	cmd     *exec.Cmd
	started time.Time
	// synced is closed when the child reported its informers synced.
	synced      chan struct{}
	syncedAfter time.Duration
	// final receives the child's last report.
	final chan benchchild.Report
	// exited is closed when the process has been waited for.
	exited  chan struct{}
	waitErr error
	counter *harness.Counter
	proxy   *harness.Proxy
}

// childPackages are the lean controller binaries the bench builds, one per
// implementation: each links only its own controllers and bench/child.
var childPackages = map[string]string{
	implJobkeeper: "jobkeeper.dev/jobkeeper/bench/cmd/jobkeeper-child",
	implUpstream:  "jobkeeper.dev/jobkeeper/bench/cmd/upstream-child",
}

// buildChildren builds the controller binaries into dir with the go command
// that runs the bench, and returns their paths by implementation.
func buildChildren(dir string) (map[string]string, error) {
	out := map[string]string{}
	for impl, pkg := range childPackages {
		bin := filepath.Join(dir, impl+"-child")
		cmd := exec.Command("go", "build", "-o", bin, pkg)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("building %s: %w", pkg, err)
		}
		out[impl] = bin
	}
	return out, nil
}

// startChild starts impl's controllers for w in a child process whose API
// requests are counted into a fresh counter.
func (e *env) startChild(ctx context.Context, impl string, w workload, b budget) (*child, error) {
	e.seq++
	logPath := filepath.Join(e.dir, "logs", fmt.Sprintf("%03d-%s-%s.log", e.seq, w.Name, impl))
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(e.children[impl], "-kubeconfig", e.kubeconfig,
		"-qps", strconv.FormatFloat(b.QPS, 'g', -1, 64), "-burst", strconv.Itoa(b.Burst),
		"-workers", strconv.Itoa(e.cfg.workers), "-controllers", w.controllers())
	if e.cfg.childVmodule != "" {
		cmd.Args = append(cmd.Args, "-vmodule", e.cfg.childVmodule)
	}
	if e.cfg.profiles != "" {
		if err := os.MkdirAll(e.cfg.profiles, 0o755); err != nil {
			logFile.Close()
			return nil, err
		}
		cmd.Args = append(cmd.Args, "-cpuprofile", filepath.Join(e.cfg.profiles, fmt.Sprintf("%03d-%s-%s-%s.pprof", e.seq, w.Name, impl, strings.ReplaceAll(b.String(), "/", "-"))))
	}
	if impl == implJobkeeper && e.cfg.jobkeeperAs == "user" {
		cmd.Env = append(os.Environ(), "JOBKEEPER_CHILD_FLAGS="+strings.Join(userFlags(w.controllers(), b, e.cfg.workers), " "))
	}
	cmd.Stderr = logFile
	// The controller must not outlive the benchmark if it is interrupted.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	c := &child{cmd: cmd, synced: make(chan struct{}), final: make(chan benchchild.Report, 1), exited: make(chan struct{}), counter: harness.NewCounter(), proxy: e.proxy}
	e.proxy.Count(c.counter)
	c.started = time.Now()
	if err := cmd.Start(); err != nil {
		e.proxy.Count(nil)
		logFile.Close()
		return nil, fmt.Errorf("starting the %s controller: %w", impl, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var rep benchchild.Report
			if err := json.Unmarshal(sc.Bytes(), &rep); err != nil {
				continue
			}
			switch {
			case rep.Synced:
				c.syncedAfter = time.Since(c.started)
				close(c.synced)
			case rep.Final:
				c.final <- rep
			}
		}
		c.waitErr = cmd.Wait()
		logFile.Close()
		close(c.exited)
	}()
	return c, nil
}

// userFlags are the flags a user runs jobkeeper-controller with for the
// same controllers, budget and workers (-jobkeeper-as user): every
// setting spelled out as an outside harness passes them, the metrics and
// health endpoints on, the rest (--server-check) the command's defaults.
// --manage-unclaimed-jobs: the workloads' Jobs set no spec.managedBy.
func userFlags(controllers string, b budget, workers int) []string {
	return []string{"--controllers", controllers, "--manage-unclaimed-jobs",
		"--kube-api-qps", strconv.FormatFloat(b.QPS, 'g', -1, 64), "--kube-api-burst", strconv.Itoa(b.Burst),
		"--concurrent-job-syncs", strconv.Itoa(workers), "--concurrent-ttl-syncs", strconv.Itoa(workers),
		"--sync-batch-period", "1s", "--pod-failure-backoff", "10s", "--max-pod-failure-backoff", "10m0s",
		"--max-uncounted-pods", "500", "--max-pod-create-delete-per-sync", "500", "--leader-elect=false",
		"--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", "127.0.0.1:0"}
}

// waitSynced waits until the child's informers have synced.
func (c *child) waitSynced(timeout time.Duration) error {
	select {
	case <-c.synced:
		return nil
	case <-c.exited:
		return fmt.Errorf("controller exited before its informers synced: %v (see %s)", c.waitErr, c.cmd.Stderr.(*os.File).Name())
	case <-time.After(timeout):
		return fmt.Errorf("informers not synced after %v", timeout)
	}
}

// stop sends SIGTERM, waits for the child's report and exit, stops counting
// and fills r's process figures and request counts.
func (c *child) stop(r *runResult) error {
	defer c.proxy.Count(nil)
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("stopping the controller: %w", err)
	}
	select {
	case <-c.exited:
	case <-time.After(2 * time.Minute):
		c.kill()
		return errors.New("controller did not exit within 2 minutes of SIGTERM")
	}
	c.proxy.Count(nil)
	select {
	case rep := <-c.final:
		r.PeakHeapMiB = mib(rep.PeakHeapInUse)
		r.PeakLiveHeapMiB = mib(rep.PeakHeapLive)
		r.SteadyHeapMiB = mib(rep.HeapLiveAtStop)
		r.MaxRSSMiB = float64(rep.VmHWMKiB) / 1024
		r.GCCycles, r.GCCPUSeconds, r.AllocatedMiB = float64(rep.GCCycles), rep.GCCPUSeconds, mib(rep.AllocatedBytes)
		r.GoroutinesCreated, r.Threads = rep.GoroutinesCreated, rep.Threads
	default:
		return fmt.Errorf("controller exited without its report: %v", c.waitErr)
	}
	st := c.cmd.ProcessState
	r.CPUSeconds = (st.UserTime() + st.SystemTime()).Seconds()
	r.SystemCPUSeconds = st.SystemTime().Seconds()
	if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
		r.VoluntarySwitches, r.InvoluntarySwitches = ru.Nvcsw, ru.Nivcsw
	}
	r.Requests = c.counter.Snapshot()
	return nil
}

// kill ends the child if it is still running.
func (c *child) kill() {
	select {
	case <-c.exited:
	default:
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
	c.proxy.Count(nil)
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
