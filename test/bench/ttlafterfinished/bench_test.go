package ttlafterfinished

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"jobkeeper.dev/jobkeeper/bench/harness"
	"jobkeeper.dev/jobkeeper/bench/upstream"
	"jobkeeper.dev/jobkeeper/pkg/controller/ttlafterfinished"
	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }

// Client budget of both controllers: kube-controller-manager's measured setup.
const (
	qps   = 100
	burst = 200
)

// workers is the number of sync workers of both controllers (default 5, as
// --concurrent-ttl-syncs); JOBKEEPER_BENCH_WORKERS overrides it.
var workers = func() int {
	if n, err := strconv.Atoi(os.Getenv("JOBKEEPER_BENCH_WORKERS")); err == nil && n > 0 {
		return n
	}
	return 5
}()

func numJobs() int {
	if n, err := strconv.Atoi(os.Getenv("JOBKEEPER_BENCH_JOBS")); err == nil && n > 0 {
		return n
	}
	return 5000
}

// createExpiredJobs creates n Jobs with TTL 0 that finished a minute ago.
func createExpiredJobs(b *testing.B, ns string, n int) {
	cfg := framework.Config()
	cfg.QPS, cfg.Burst = 3000, 3000
	c := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	at := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	start := metav1.NewTime(at.Add(-time.Second))
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for w := 0; w < 32; w++ {
		wg.Go(func() {
			for i := range next {
				j, err := c.BatchV1().Jobs(ns).Create(ctx, builder.MakeJob(fmt.Sprintf("j-%05d", i), ns).TTLSecondsAfterFinished(0).Obj(), metav1.CreateOptions{})
				if err != nil {
					errs <- err
					continue
				}
				j.Status = builder.SucceededStatus(start, at)
				if _, err := c.BatchV1().Jobs(ns).UpdateStatus(ctx, j, metav1.UpdateOptions{}); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatalf("creating expired Jobs: %v", err)
	}
}

// waitEmpty watches the namespace (uncounted) and returns when it holds no Job.
func waitEmpty(b *testing.B, ns string) {
	c := kubernetes.NewForConfigOrDie(framework.Config())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	f := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithNamespace(ns))
	inf := f.Batch().V1().Jobs().Informer()
	f.Start(ctx.Done())
	defer func() {
		cancel()
		f.Shutdown()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		b.Fatal("cache sync")
	}
	for len(inf.GetStore().ListKeys()) > 0 {
		select {
		case <-ctx.Done():
			b.Fatalf("Jobs left: %d", len(inf.GetStore().ListKeys()))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// run cleans n expired Jobs with one controller and reports the wall time
// and the requests per Job.
func run(b *testing.B, name string, start func(ctx context.Context, cfg *rest.Config)) {
	n := numJobs()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		ns := framework.CreateNamespace(b)
		createExpiredJobs(b, ns, n)
		cnt := harness.NewCounter()
		cfg := framework.Config()
		cfg.QPS, cfg.Burst = qps, burst
		cfg.Wrap(cnt.Wrap)
		ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background()))
		b.StartTimer()
		t0 := time.Now()
		start(ctx, cfg)
		waitEmpty(b, ns)
		wall := time.Since(t0)
		b.StopTimer()
		cancel()
		s := cnt.Snapshot()
		deletesDone := cnt.LastAnswered("delete jobs").Sub(t0)
		b.ReportMetric(deletesDone.Seconds(), "s/deletes")
		writes := s["delete jobs"] + s["get jobs"]
		b.ReportMetric(wall.Seconds(), "s/clean")
		b.ReportMetric(float64(writes)/float64(n), "job-req/Job")
		b.ReportMetric(float64(s["create events"]+s["patch events"])/float64(n), "event-req/Job")
		b.Logf("%s: %d Jobs: last DELETE answered after %v, all gone after %v; requests: %s", name, n,
			deletesDone.Round(time.Millisecond), wall.Round(time.Millisecond), harness.Format(s))
	}
}

func BenchmarkCleanExpiredJobs(b *testing.B) {
	b.Run("jobkeeper", func(b *testing.B) {
		run(b, "jobkeeper", func(ctx context.Context, cfg *rest.Config) {
			client := kubernetes.NewForConfigOrDie(cfg)
			// Events go through their own limiter, as pkg/manager wires it.
			evCfg := rest.CopyConfig(cfg)
			events := kubernetes.NewForConfigOrDie(evCfg)
			factory := informers.NewSharedInformerFactory(client, 0)
			opts := ttlafterfinished.Options{}
			if os.Getenv("JOBKEEPER_BENCH_NO_EVENTS") != "" {
				opts.Recorder = &record.FakeRecorder{} // drops events
			}
			c, err := ttlafterfinished.New(ctx, opts, ttlafterfinished.Clients{
				Client: client, Dynamic: dynamic.NewForConfigOrDie(cfg), Events: events,
			}, factory)
			if err != nil {
				b.Fatal(err)
			}
			factory.Start(ctx.Done())
			go c.Run(ctx, workers)
		})
	})
	b.Run("upstream", func(b *testing.B) {
		run(b, "upstream", func(ctx context.Context, cfg *rest.Config) {
			if _, err := upstream.Start(ctx, cfg, []string{upstream.TTLAfterFinished}, workers); err != nil {
				b.Fatal(err)
			}
		})
	})
}
