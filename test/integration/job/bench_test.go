package job

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"jobkeeper.dev/jobkeeper/bench/harness"
	"jobkeeper.dev/jobkeeper/bench/upstream"
	jobcontroller "jobkeeper.dev/jobkeeper/pkg/controller/job"
	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

// BenchmarkJob2000 runs a 2,000-completion Job at parallelism 200 with pods
// completed instantly, once with jobkeeper's controller and once with
// upstream's (k8s.io/kubernetes/pkg/controller/job) in process on the same
// control plane, both at client QPS 100 / burst 200 with 5 workers, and
// reports the controller's API requests per completed pod by verb. It is the
// quick in-process check; `go run ./bench` is the full side-by-side suite
// (separate processes, CPU and memory, docs/benchmarks.md), and both share
// jobkeeper.dev/jobkeeper/bench/harness.
// Run: go test ./test/integration/job -run '^$' -bench Job2000 -benchtime 1x
func BenchmarkJob2000(b *testing.B) {
	benchCompare(b, 1, 2000, 200)
}

// BenchmarkSmallJobs is BenchmarkJob2000 for 200 Jobs of 5 completions at
// parallelism 5.
func BenchmarkSmallJobs(b *testing.B) {
	benchCompare(b, 200, 5, 5)
}

// benchCompare runs the workload with both controllers and reports.
func benchCompare(b *testing.B, jobs int, completions, parallelism int32) {
	pods := float64(int32(jobs) * completions)
	for _, impl := range []string{"jobkeeper", "upstream"} {
		b.Run(impl, func(b *testing.B) {
			for range b.N {
				counts, wall := runBench(b, impl, jobs, completions, parallelism)
				total := 0
				var keys []string
				for k, v := range counts {
					total += v
					keys = append(keys, k)
				}
				sort.Strings(keys)
				var lines []string
				for _, k := range keys {
					lines = append(lines, fmt.Sprintf("%s=%d (%.3f/pod)", k, counts[k], float64(counts[k])/pods))
				}
				b.Logf("%s: %d jobs x %d completions: wall %v, %d requests, %.3f per pod: %s", impl, jobs, completions, wall.Round(time.Millisecond), total, float64(total)/pods, strings.Join(lines, ", "))
				b.ReportMetric(float64(total)/pods, "req/pod")
				b.ReportMetric(wall.Seconds(), "wall-s")
				for _, verb := range []string{"create pods", "patch pods", "update jobs/status", "create events", "patch events"} {
					b.ReportMetric(float64(counts[verb])/pods, strings.ReplaceAll(verb, " ", "_")+"/pod")
				}
			}
		})
	}
}

// runBench runs jobs Jobs of the given size with impl's controller and
// returns the controller's requests (by kind) made from the first Job's
// creation until no pod holds the finalizer, and the wall time until the
// last Job completed.
func runBench(b *testing.B, impl string, jobs int, completions, parallelism int32) (map[string]int, time.Duration) {
	b.Helper()
	ns := framework.CreateNamespace(b)
	admin := framework.Client(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kubeletCfg := framework.Config()
	kubeletCfg.QPS, kubeletCfg.Burst = 5000, 5000
	if _, err := harness.InstantKubelet(ctx, kubernetes.NewForConfigOrDie(kubeletCfg), ns, 16); err != nil {
		b.Fatal(err)
	}

	counter := harness.NewCounter()
	cfg := framework.Config()
	cfg.QPS, cfg.Burst = 100, 200
	cfg.Wrap(counter.Wrap)
	ctrlCtx, stop := context.WithCancel(ctx)
	defer stop()
	job := builder.MakeJob("bench", ns).Parallelism(parallelism).Completions(completions).Obj()
	switch impl {
	case "jobkeeper":
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			b.Fatal(err)
		}
		factory := informers.NewSharedInformerFactory(client, 0)
		job.Spec.ManagedBy = ptrTo(jobcontroller.DefaultManagedBy)
		c, err := jobcontroller.NewController(ctrlCtx, factory.Core().V1().Pods(), factory.Batch().V1().Jobs(), client, jobcontroller.Options{ContentType: cfg.ContentType})
		if err != nil {
			b.Fatal(err)
		}
		factory.Start(ctrlCtx.Done())
		done := make(chan struct{})
		go func() { defer close(done); c.Run(ctrlCtx, 5) }()
		defer func() { stop(); <-done; factory.Shutdown() }()
		cache.WaitForCacheSync(ctx.Done(), factory.Core().V1().Pods().Informer().HasSynced, factory.Batch().V1().Jobs().Informer().HasSynced)
	case "upstream":
		u, err := upstream.Start(ctrlCtx, cfg, []string{upstream.Job}, 5)
		if err != nil {
			b.Fatal(err)
		}
		defer func() { stop(); u.Wait() }()
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) { return u.Synced(), nil }); err != nil {
			b.Fatal("upstream's informers did not sync")
		}
	}
	before := counter.Snapshot()

	start := time.Now()
	for i := range jobs {
		j := job.DeepCopy()
		j.Name = fmt.Sprintf("bench-%d", i)
		createJob(b, admin, j)
	}
	waitLong(b, 10*time.Minute, "bench jobs complete", func(ctx context.Context) (bool, error) {
		list, err := admin.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for i := range list.Items {
			if !findCond(&list.Items[i], batchv1.JobComplete) {
				return false, nil
			}
		}
		return len(list.Items) == jobs, nil
	})
	wall := time.Since(start)
	// Count the finalizer cleanup too, whenever it happens.
	waitLong(b, 5*time.Minute, "no finalizer left", func(ctx context.Context) (bool, error) {
		n, err := podsWithFinalizer(ctx, admin, ns)
		return err == nil && n == 0, err
	})
	after := counter.Snapshot()
	list, err := admin.BatchV1().Jobs(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, got := range list.Items {
		if got.Status.Succeeded != completions {
			b.Errorf("%s: job %s succeeded %d, want %d", impl, got.Name, got.Status.Succeeded, completions)
		}
	}
	return harness.Diff(after, before), wall
}
