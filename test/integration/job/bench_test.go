package job

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	upstreamjob "k8s.io/kubernetes/pkg/controller/job"

	jobcontroller "jobkeeper.dev/jobkeeper/pkg/controller/job"
	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

// requestCounter counts HTTP requests by verb ("create pods",
// "update jobs/status", "watch pods", ...).
type requestCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

// RoundTrip implements http.RoundTripper around next.
type countingTransport struct {
	next    http.RoundTripper
	counter *requestCounter
}

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.counter.add(requestKind(r))
	return t.next.RoundTrip(r)
}

func (c *requestCounter) add(kind string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts[kind]++
}

func (c *requestCounter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.counts))
	for k, v := range c.counts {
		out[k] = v
	}
	return out
}

// requestKind maps a request to "<verb> <resource>[/<subresource>]".
func requestKind(r *http.Request) string {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	// /api/v1/... or /apis/<group>/<version>/...
	if len(parts) > 0 && parts[0] == "apis" && len(parts) > 2 {
		parts = parts[3:]
	} else if len(parts) > 1 {
		parts = parts[2:]
	}
	if len(parts) >= 2 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	resource, named := "", false
	if len(parts) > 0 {
		resource = parts[0]
	}
	if len(parts) > 1 {
		named = true
	}
	if len(parts) > 2 {
		resource += "/" + parts[2]
	}
	verb := map[string]string{http.MethodPost: "create", http.MethodPut: "update", http.MethodPatch: "patch", http.MethodDelete: "delete"}[r.Method]
	if r.Method == http.MethodGet {
		switch {
		case r.URL.Query().Get("watch") == "true":
			verb = "watch"
		case named:
			verb = "get"
		default:
			verb = "list"
		}
	}
	return verb + " " + resource
}

// instantKubelet marks every pod of ns Succeeded as soon as it appears.
func instantKubelet(ctx context.Context, b testing.TB, c kubernetes.Interface, ns string) {
	factory := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithNamespace(ns))
	work := make(chan *corev1.Pod, 10000)
	_, err := factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if p := obj.(*corev1.Pod); p.Status.Phase == corev1.PodPending && p.DeletionTimestamp == nil {
				work <- p
			}
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	factory.Start(ctx.Done())
	for range 16 {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case p := <-work:
					_ = framework.SetPodPhase(ctx, c, p, corev1.PodSucceeded)
				}
			}
		}()
	}
}

// BenchmarkJob2000 runs a 2,000-completion Job at parallelism 200 with pods
// completed instantly, once with jobkeeper's controller and once with
// upstream's (k8s.io/kubernetes/pkg/controller/job) in process on the same
// control plane, both at client QPS 100 / burst 200 with 5 workers, and
// reports the controller's API requests per completed pod by verb.
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
	instantKubelet(ctx, b, admin, ns)

	counter := &requestCounter{counts: map[string]int{}}
	cfg := framework.Config()
	cfg.QPS, cfg.Burst = 100, 200
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingTransport{next: rt, counter: counter} })
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	ctrlCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	job := builder.MakeJob("bench", ns).Parallelism(parallelism).Completions(completions).Obj()
	switch impl {
	case "jobkeeper":
		job.Spec.ManagedBy = ptrTo(jobcontroller.DefaultManagedBy)
		c, err := jobcontroller.NewController(ctrlCtx, factory.Core().V1().Pods(), factory.Batch().V1().Jobs(), client, jobcontroller.Options{})
		if err != nil {
			b.Fatal(err)
		}
		factory.Start(ctrlCtx.Done())
		go func() { defer close(done); c.Run(ctrlCtx, 5) }()
	case "upstream":
		c, err := upstreamjob.NewController(ctrlCtx, client, factory.Core().V1().Pods(), factory.Batch().V1().Jobs(), nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		factory.Start(ctrlCtx.Done())
		go func() { defer close(done); c.Run(ctrlCtx, 5) }()
	}
	defer func() { stop(); <-done; factory.Shutdown() }()
	cache.WaitForCacheSync(ctx.Done(), factory.Core().V1().Pods().Informer().HasSynced, factory.Batch().V1().Jobs().Informer().HasSynced)
	before := counter.snapshot()

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
	after := counter.snapshot()
	list, err := admin.BatchV1().Jobs(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, got := range list.Items {
		if got.Status.Succeeded != completions {
			b.Errorf("%s: job %s succeeded %d, want %d", impl, got.Name, got.Status.Succeeded, completions)
		}
	}
	diff := map[string]int{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			diff[k] = d
		}
	}
	return diff, wall
}
