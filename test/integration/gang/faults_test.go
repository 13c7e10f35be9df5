package gang

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/fault"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

// TestGangUnderFaults runs gang-eligible Jobs with the controller behind
// the fault proxy (writes failed before or after they are applied, the
// Workload and PodGroup creates among them; watches delayed and cut) and
// restarted at random moments: each Job gets exactly one Workload and one
// PodGroup, every pod names the PodGroup, the counts are exact, no pod
// keeps the tracking finalizer and no index runs twice.
func TestGangUnderFaults(t *testing.T) {
	const (
		jobs     = 6
		size     = 4
		restarts = 6
	)
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := framework.Client(t)
	ns := framework.CreateNamespace(t)

	proxy, err := fault.New(framework.Config(), seed)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	proxy.Set(fault.Faults{
		FailBefore: 0.15, FailAfter: 0.15,
		WatchDelay: 50 * time.Millisecond, CutWatchMin: time.Second, CutWatchMax: 3 * time.Second,
		Writes: func(kind string) bool {
			return fault.DefaultWrites(kind) || kind == "create workloads" || kind == "create podgroups"
		},
	})
	throughProxy := func(cfg *rest.Config) {
		pc := proxy.ClientConfig()
		pc.QPS, pc.Burst = cfg.QPS, cfg.Burst
		*cfg = *pc
	}
	var mu sync.Mutex
	run := framework.StartJobController(t, options(), throughProxy)

	var created []*batchv1.Job
	for i := range jobs {
		j, err := c.BatchV1().Jobs(ns).Create(ctx, builder.MakeJob(fmt.Sprintf("gang-%d", i), ns).Indexed().Parallelism(size).Completions(size).Obj(), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created = append(created, j)
	}

	// The kubelet, straight to the apiserver: each pending pod still
	// tracked succeeds once per index.
	runs := map[string]int{}
	var kmu sync.Mutex
	kubeletDone := make(chan struct{})
	go func() {
		defer close(kubeletDone)
		handled := map[types.UID]bool{}
		for ctx.Err() == nil {
			pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "status.phase=Pending"})
			if err == nil {
				for i := range pods.Items {
					p := &pods.Items[i]
					key := p.Labels[batchv1.JobNameLabel] + "/" + p.Annotations[batchv1.JobCompletionIndexAnnotation]
					kmu.Lock()
					done := runs[key] > 0
					kmu.Unlock()
					if handled[p.UID] || done || p.DeletionTimestamp != nil || !slices.Contains(p.Finalizers, batchv1.JobTrackingFinalizer) {
						continue
					}
					if framework.SetPodPhaseAt(ctx, c, p, corev1.PodSucceeded) == nil {
						handled[p.UID] = true
						kmu.Lock()
						runs[key]++
						kmu.Unlock()
					}
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	chaosDone := make(chan struct{})
	go func() {
		defer close(chaosDone)
		for range restarts {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(200+rng.Intn(800)) * time.Millisecond):
			}
			mu.Lock()
			run.Stop()
			run = framework.StartJobController(t, options(), throughProxy)
			mu.Unlock()
		}
	}()

	for _, j := range created {
		framework.WaitFor(t, "Job "+j.Name+" to complete", func(ctx context.Context) (bool, error) {
			got, err := c.BatchV1().Jobs(ns).Get(ctx, j.Name, metav1.GetOptions{})
			return err == nil && slices.ContainsFunc(got.Status.Conditions, func(c batchv1.JobCondition) bool {
				return c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue
			}), err
		})
	}
	<-chaosDone
	cancel()
	<-kubeletDone
	t.Logf("faults injected: %v", proxy.Injected())

	wls, err := c.SchedulingV1alpha2().Workloads(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pgs, err := c.SchedulingV1alpha2().PodGroups(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range created {
		got, err := c.BatchV1().Jobs(ns).Get(context.Background(), j.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Succeeded != size || got.Status.Failed != 0 || got.Status.CompletedIndexes != fmt.Sprintf("0-%d", size-1) {
			t.Errorf("Job %s: succeeded %d failed %d completedIndexes %q, want %d, 0, 0-%d", j.Name, got.Status.Succeeded, got.Status.Failed, got.Status.CompletedIndexes, size, size-1)
		}
		var ownWL, ownPG []string
		for _, w := range wls.Items {
			if metav1.IsControlledBy(&w, got) {
				ownWL = append(ownWL, w.Name)
			}
		}
		groupName := ""
		for _, p := range pgs.Items {
			if metav1.IsControlledBy(&p, got) {
				ownPG = append(ownPG, p.Name)
				groupName = p.Name
			}
		}
		if len(ownWL) != 1 || len(ownPG) != 1 {
			t.Errorf("Job %s: Workloads %v and PodGroups %v, want one of each", j.Name, ownWL, ownPG)
		}
		pods, err := framework.JobPods(context.Background(), c, got)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods {
			if g := p.Spec.SchedulingGroup; g == nil || ptr.Deref(g.PodGroupName, "") != groupName {
				t.Errorf("Job %s: pod %s names %v, want PodGroup %s", j.Name, p.Name, g, groupName)
			}
			if slices.Contains(p.Finalizers, batchv1.JobTrackingFinalizer) {
				t.Errorf("Job %s: pod %s keeps the tracking finalizer", j.Name, p.Name)
			}
		}
	}
	kmu.Lock()
	defer kmu.Unlock()
	for key, n := range runs {
		if n != 1 {
			t.Errorf("index %s ran %d times", key, n)
		}
	}
	if len(runs) != jobs*size {
		t.Errorf("%d indexes ran, want %d", len(runs), jobs*size)
	}
}
