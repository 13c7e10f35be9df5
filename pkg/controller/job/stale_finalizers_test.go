package job

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/test/builder"
)

// Names of the stale tracking finalizer gauges as Prometheus sees them.
const (
	stalePodsMetric   = "job_controller_stale_tracking_finalizer_pods"
	staleOldestMetric = "job_controller_stale_tracking_finalizer_oldest_seconds"
)

// staleGauges gathers reg and returns the values of the two gauges that are
// exported (none while no controller runs).
func staleGauges(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		if n := f.GetName(); n == stalePodsMetric || n == staleOldestMetric {
			if len(f.GetMetric()) != 1 {
				t.Fatalf("%s has %d series, want 1", n, len(f.GetMetric()))
			}
			got[n] = f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return got
}

// want returns the expected gauges.
func wantStale(pods int, oldest time.Duration) map[string]float64 {
	return map[string]float64{stalePodsMetric: float64(pods), staleOldestMetric: oldest.Seconds()}
}

// staleFixture is a controller whose caches hold the Jobs and pods of the
// stale finalizer tests, with its gauges on reg.
type staleFixture struct {
	h   *harness
	reg *prometheus.Registry
}

func newStaleFixture(t *testing.T, jobs []*batchv1.Job, pods []*corev1.Pod) *staleFixture {
	t.Helper()
	reg := prometheus.NewRegistry()
	h := newHarness(t, Options{Registerer: reg}, jobs[0])
	jobStore := h.factory.Batch().V1().Jobs().Informer().GetIndexer()
	for _, j := range jobs[1:] {
		if err := jobStore.Add(j); err != nil {
			t.Fatal(err)
		}
	}
	podStore := h.factory.Core().V1().Pods().Informer().GetIndexer()
	for _, p := range pods {
		if err := podStore.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	// What Run does once the caches have synced.
	h.c.metrics.StaleFinalizers.SetSource(h.c.staleFinalizers)
	return &staleFixture{h: h, reg: reg}
}

func (f *staleFixture) podStore() interface {
	Update(any) error
	Delete(any) error
	Add(any) error
} {
	return f.h.factory.Core().V1().Pods().Informer().GetIndexer()
}

func TestStaleFinalizerGauges(t *testing.T) {
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(t0.Add(d)) }
	running := builder.MakeJob("running", ns).Selector("running-uid").ManagedBy(DefaultManagedBy).Obj()
	complete := builder.MakeJob("complete", ns).Selector("complete-uid").ManagedBy(DefaultManagedBy).
		Condition(batchv1.JobComplete, "CompletionsReached", at(0)).Obj()
	failed := builder.MakeJob("failed", ns).Selector("failed-uid").ManagedBy(DefaultManagedBy).
		Condition(batchv1.JobFailed, "BackoffLimitExceeded", at(-10*time.Minute)).Obj()
	foreign := builder.MakeJob("foreign", ns).Selector("foreign-uid").ManagedBy("example.com/other").
		Condition(batchv1.JobComplete, "CompletionsReached", at(-time.Hour)).Obj()
	gone := builder.MakeJob("gone", ns).Selector("gone-uid").Obj()
	// A Job recreated under the name of a Job whose pods remain.
	recreated := builder.MakeJob("recreated", ns).Selector("recreated-new-uid").ManagedBy(DefaultManagedBy).Obj()
	replaced := builder.MakeJob("recreated", ns).Selector("recreated-old-uid").Obj()

	pod := func(name string, job *batchv1.Job, created time.Duration) *builder.PodWrapper {
		w := builder.MakePod(name, ns).UID(name + "-uid").Finalizer(batchv1.JobTrackingFinalizer).CreationTimestamp(at(created))
		if job != nil {
			w.OwnedByJob(job)
		}
		return w
	}
	replicaSetPod := pod("replicaset", nil, -time.Hour).Obj()
	replicaSetPod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs-uid", Controller: ptr.To(true)}}
	noFinalizer := pod("released", complete, -time.Hour).Obj()
	noFinalizer.Finalizers = nil

	type step struct {
		// after is the clock's offset from t0 at this scrape.
		after time.Duration
		// change edits the pod cache before the scrape.
		change func(t *testing.T, f *staleFixture)
		// want are the gauges at this scrape.
		want map[string]float64
	}
	cases := map[string]struct {
		pods  []*corev1.Pod
		steps []step
	}{
		"nothing stale": {
			pods: []*corev1.Pod{
				pod("active", running, -time.Hour).Phase(corev1.PodRunning).Obj(),
				pod("succeeded-uncounted", running, -time.Hour).Phase(corev1.PodSucceeded).Obj(),
				pod("deleting", running, -time.Hour).DeletionTimestamp(at(-time.Minute)).Obj(),
				noFinalizer,
				pod("foreign-job", foreign, -2*time.Hour).Phase(corev1.PodSucceeded).Obj(),
				replicaSetPod,
			},
			steps: []step{{after: time.Hour, want: wantStale(0, 0)}},
		},
		"finished Jobs: age from the finish, counted after the grace": {
			pods: []*corev1.Pod{
				pod("complete-0", complete, -time.Hour).Phase(corev1.PodSucceeded).Obj(),
				pod("failed-0", failed, -time.Hour).Phase(corev1.PodFailed).Obj(),
				// Created from a stale cache after its Job finished: young.
				pod("complete-late", complete, 30*time.Second).Obj(),
			},
			steps: []step{
				{after: 30 * time.Second, want: wantStale(1, 10*time.Minute+30*time.Second)},
				{after: 89 * time.Second, want: wantStale(2, 10*time.Minute+89*time.Second)},
				{after: 90 * time.Second, want: wantStale(3, 10*time.Minute+90*time.Second)},
				{
					after: 2 * time.Minute,
					change: func(t *testing.T, f *staleFixture) {
						released := pod("failed-0", failed, -time.Hour).Phase(corev1.PodFailed).Obj()
						released.Finalizers = nil
						if err := f.podStore().Update(released); err != nil {
							t.Fatal(err)
						}
					},
					want: wantStale(2, 2*time.Minute),
				},
			},
		},
		"gone Jobs: age from the first scrape that saw the pod orphaned": {
			pods: []*corev1.Pod{
				pod("gone-0", gone, -time.Hour).Phase(corev1.PodRunning).Obj(),
				pod("recreated-0", replaced, -time.Hour).Phase(corev1.PodSucceeded).Obj(),
			},
			steps: []step{
				{after: 0, want: wantStale(0, 0)},
				{
					after: 30 * time.Second,
					change: func(t *testing.T, f *staleFixture) {
						// No controller at all (the garbage collector
						// orphaned it): stale too, first seen now.
						if err := f.podStore().Add(pod("no-controller", nil, -time.Hour).Obj()); err != nil {
							t.Fatal(err)
						}
					},
					want: wantStale(0, 0),
				},
				{after: time.Minute, want: wantStale(2, time.Minute)},
				{after: 90 * time.Second, want: wantStale(3, 90*time.Second)},
				{
					after: 100 * time.Second,
					change: func(t *testing.T, f *staleFixture) {
						for _, name := range []string{"gone-0", "recreated-0"} {
							if err := f.podStore().Delete(pod(name, gone, 0).Obj()); err != nil {
								t.Fatal(err)
							}
						}
					},
					want: wantStale(1, 70*time.Second),
				},
				{
					// The same pod seen orphaned again starts over.
					after: 110 * time.Second,
					change: func(t *testing.T, f *staleFixture) {
						if err := f.podStore().Add(pod("gone-0", gone, -time.Hour).Obj()); err != nil {
							t.Fatal(err)
						}
					},
					want: wantStale(1, 80*time.Second),
				},
				{after: 170 * time.Second, want: wantStale(2, 140*time.Second)},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newStaleFixture(t, []*batchv1.Job{running, complete, failed, foreign, recreated}, tc.pods)
			for i, s := range tc.steps {
				f.h.clock.SetTime(t0.Add(s.after))
				if s.change != nil {
					s.change(t, f)
				}
				if diff := cmp.Diff(s.want, staleGauges(t, f.reg)); diff != "" {
					t.Errorf("scrape %d at t0+%v (-want +got):\n%s", i, s.after, diff)
				}
			}
		})
	}
}

// TestStaleFinalizerGaugesConcurrentScrapes scrapes from several goroutines
// (two Prometheus replicas) while the cache changes; run with -race.
func TestStaleFinalizerGaugesConcurrentScrapes(t *testing.T) {
	gone := builder.MakeJob("gone", ns).Selector("gone-uid").Obj()
	running := builder.MakeJob("running", ns).Selector("running-uid").ManagedBy(DefaultManagedBy).Obj()
	f := newStaleFixture(t, []*batchv1.Job{running}, nil)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				if _, err := f.reg.Gather(); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for i := range 50 {
		p := builder.MakePod("p", ns).UID("p-uid").Finalizer(batchv1.JobTrackingFinalizer).OwnedByJob(gone).Obj()
		if i%2 == 0 {
			_ = f.podStore().Add(p)
		} else {
			_ = f.podStore().Delete(p)
		}
	}
	wg.Wait()
}

// TestStaleFinalizerGaugesFollowRun checks that the gauges are exported
// while Run runs with synced caches, and no longer once it returns.
func TestStaleFinalizerGaugesFollowRun(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := builder.MakeJob("done", ns).Selector("done-uid").ManagedBy(DefaultManagedBy).
		Condition(batchv1.JobComplete, "CompletionsReached", metav1.NewTime(t0.Add(-time.Hour))).Obj()
	// The pod has no finalizer: Run's workers must have nothing to write.
	client := fake.NewClientset(done, builder.MakePod("p", ns).OwnedByJob(done).Obj())
	factory := informers.NewSharedInformerFactory(client, 0)
	reg := prometheus.NewRegistry()
	c, err := NewController(ctx, factory.Core().V1().Pods(), factory.Batch().V1().Jobs(), client, Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if got := staleGauges(t, reg); len(got) != 0 {
		t.Fatalf("gauges exported before Run: %v", got)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		c.Run(ctx, 1)
	}()
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return len(staleGauges(t, reg)) == 2, nil
	})
	if err != nil {
		t.Fatalf("the gauges never appeared while Run ran: %v", err)
	}
	if diff := cmp.Diff(wantStale(0, 0), staleGauges(t, reg)); diff != "" {
		t.Errorf("gauges while running (-want +got):\n%s", diff)
	}
	cancel()
	<-stopped
	if got := staleGauges(t, reg); len(got) != 0 {
		t.Errorf("gauges still exported after Run returned: %v", got)
	}
}

func TestJobFinishTime(t *testing.T) {
	at := metav1.NewTime(t0)
	cases := map[string]struct {
		job  *batchv1.Job
		want time.Time
	}{
		"complete": {
			job:  builder.MakeJob("j", ns).Condition(batchv1.JobComplete, "CompletionsReached", at).Obj(),
			want: t0,
		},
		"failed": {
			job:  builder.MakeJob("j", ns).Condition(batchv1.JobFailed, "DeadlineExceeded", at).Obj(),
			want: t0,
		},
		"completionTime only": {
			job:  builder.MakeJob("j", ns).Status(batchv1.JobStatus{CompletionTime: &at}).Obj(),
			want: t0,
		},
		"nothing": {job: builder.MakeJob("j", ns).Obj()},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := jobFinishTime(tc.job); !got.Equal(tc.want) {
				t.Errorf("jobFinishTime = %v, want %v", got, tc.want)
			}
		})
	}
}

// BenchmarkStaleFinalizerScan measures one scrape over 100,000 cached pods
// of 1,000 Jobs: running Jobs, whose pods hold the finalizer and are skipped
// by controller without being read, and finished Jobs, whose released pods
// are all read.
func BenchmarkStaleFinalizerScan(b *testing.B) {
	for _, finished := range []bool{false, true} {
		name := "running"
		if finished {
			name = "finished"
		}
		b.Run(name, func(b *testing.B) {
			factory := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
			c, err := NewController(b.Context(), factory.Core().V1().Pods(), factory.Batch().V1().Jobs(), fake.NewClientset(), Options{})
			if err != nil {
				b.Fatal(err)
			}
			for j := range 1000 {
				w := builder.MakeJob(fmt.Sprintf("job-%d", j), ns).Selector(fmt.Sprintf("uid-%d", j)).ManagedBy(DefaultManagedBy)
				if finished {
					w.Condition(batchv1.JobComplete, "CompletionsReached", metav1.NewTime(t0))
				}
				job := w.Obj()
				if err := factory.Batch().V1().Jobs().Informer().GetIndexer().Add(job); err != nil {
					b.Fatal(err)
				}
				for p := range 100 {
					pw := builder.MakePod(fmt.Sprintf("job-%d-%d", j, p), ns).OwnedByJob(job)
					if finished {
						pw.Phase(corev1.PodSucceeded)
					} else {
						pw.Finalizer(batchv1.JobTrackingFinalizer).Phase(corev1.PodRunning)
					}
					if err := factory.Core().V1().Pods().Informer().GetIndexer().Add(pw.Obj()); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				if got := c.staleFinalizers.StaleFinalizers(); got.Pods != 0 {
					b.Fatalf("%d stale pods, want 0", got.Pods)
				}
			}
		})
	}
}

// readCounter is a pod cache that counts the pods its index reads return.
type readCounter struct {
	cache.Indexer
	// read counts the pods returned by ByIndex.
	read int
}

func (r *readCounter) ByIndex(name, key string) ([]any, error) {
	objs, err := r.Indexer.ByIndex(name, key)
	r.read += len(objs)
	return objs, err
}

// TestStaleFinalizerScanSkipsPodsWithoutFinalizer: a scrape reads only pods
// that hold the tracking finalizer, not the cluster's other pods (here 500
// pods of a ReplicaSet and 500 without a controller).
func TestStaleFinalizerScanSkipsPodsWithoutFinalizer(t *testing.T) {
	gone := builder.MakeJob("gone", ns).Selector("gone-uid").Obj()
	running := builder.MakeJob("running", ns).Selector("running-uid").ManagedBy(DefaultManagedBy).Obj()
	var pods []*corev1.Pod
	for i := range 500 {
		p := builder.MakePod(fmt.Sprintf("rs-%d", i), ns).UID(fmt.Sprintf("rs-%d", i)).Obj()
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs-uid", Controller: ptr.To(true)}}
		pods = append(pods, p, builder.MakePod(fmt.Sprintf("bare-%d", i), ns).UID(fmt.Sprintf("bare-%d", i)).Obj())
	}
	pods = append(pods, builder.MakePod("orphan", ns).UID("orphan").Finalizer(batchv1.JobTrackingFinalizer).OwnedByJob(gone).Obj())
	f := newStaleFixture(t, []*batchv1.Job{running}, pods)
	counter := &readCounter{Indexer: f.h.c.staleFinalizers.pods[0]}
	f.h.c.staleFinalizers.pods = []cache.Indexer{counter}
	f.h.c.staleFinalizers.StaleFinalizers()
	if counter.read != 1 {
		t.Errorf("a scrape read %d pods, want 1 (the one holding the finalizer)", counter.read)
	}
}
