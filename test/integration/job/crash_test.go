package job

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	jobcontroller "jobkeeper.dev/jobkeeper/pkg/controller/job"
	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

// TestCrashSafety kills the controller (context cancelled, then a fresh
// instance with fresh informers) about ten times at random moments during a
// Job of 1,000 completions at parallelism 100, while the test completes
// and fails pods. At the end succeeded must equal completions, failed must
// equal the pods the test failed, and no pod may hold the finalizer.
// JOBKEEPER_CRASH_SEED fixes the random seed. It runs for both completion
// modes.
func TestCrashSafety(t *testing.T) {
	for _, mode := range []batchv1.CompletionMode{batchv1.NonIndexedCompletion, batchv1.IndexedCompletion} {
		t.Run(string(mode), func(t *testing.T) { testCrashSafety(t, mode) })
	}
}

func testCrashSafety(t *testing.T, mode batchv1.CompletionMode) {
	const (
		completions = 1000
		parallelism = 100
		maxFailures = 120
		restarts    = 10
	)
	seed := time.Now().UnixNano()
	if s := os.Getenv("JOBKEEPER_CRASH_SEED"); s != "" {
		seed, _ = strconv.ParseInt(s, 10, 64)
	}
	t.Logf("seed %d (set JOBKEEPER_CRASH_SEED to replay)", seed)
	rng := rand.New(rand.NewSource(seed))

	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	opts := testOptions()
	jw := builder.MakeJob("crash", ns).ManagedBy(jobcontroller.DefaultManagedBy).
		Parallelism(parallelism).Completions(completions).BackoffLimit(10 * maxFailures)
	if mode == batchv1.IndexedCompletion {
		jw.Indexed()
	}
	job := createJob(t, c, jw.Obj())

	var mu sync.Mutex
	run := startController(t, opts)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The chaos below restarts the controller restarts times; the kubelet
	// lets only a share of the completions succeed per restart so far, so
	// that every restart lands before the Job can finish, however fast
	// the machine.
	var restarted int // guarded by mu
	successesAllowed := func() int32 {
		mu.Lock()
		defer mu.Unlock()
		return int32(completions * (restarted + 1) / (restarts + 1))
	}

	// The kubelet: finishes pending pods, each exactly once.
	var succeeded, failed atomic.Int32
	kubeletDone := make(chan struct{})
	go func() {
		defer close(kubeletDone)
		handled := map[types.UID]bool{}
		// For Indexed Jobs, each index succeeds once; a duplicate pod of a
		// finished index is left for the controller to delete.
		doneIndexes := map[string]bool{}
		var hmu sync.Mutex // guards handled and doneIndexes
		krng := rand.New(rand.NewSource(seed + 1))
		for ctx.Err() == nil {
			pods, err := framework.JobPods(ctx, c, job)
			if err != nil {
				continue
			}
			var todo []corev1.Pod
			for _, p := range pods {
				// Only pods the controller still tracks: one whose finalizer
				// it removed is on its way out uncounted.
				if !handled[p.UID] && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodPending &&
					slices.Contains(p.Finalizers, batchv1.JobTrackingFinalizer) {
					todo = append(todo, p)
				}
			}
			var wg sync.WaitGroup
			sem := make(chan struct{}, 16)
			for i := range todo {
				ix, indexed := todo[i].Annotations[batchv1.JobCompletionIndexAnnotation]
				fail := failed.Load() < maxFailures && krng.Intn(10) == 0
				if !fail && succeeded.Load() >= successesAllowed() {
					continue
				}
				hmu.Lock()
				taken := indexed && doneIndexes[ix]
				if indexed && !fail && !taken {
					// Reserve the index now so a duplicate in this pass is skipped.
					doneIndexes[ix] = true
				}
				hmu.Unlock()
				if taken {
					continue
				}
				phase := corev1.PodSucceeded
				if fail {
					phase = corev1.PodFailed
					failed.Add(1)
				} else {
					succeeded.Add(1)
				}
				p := &todo[i]
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					// At the listed resourceVersion: if the pod changed since
					// (its finalizer removed, its deletion begun), the write
					// fails and the next pass looks again.
					if err := framework.SetPodPhaseAt(ctx, c, p, phase); err != nil {
						// Not applied: undo the count, retry on the next pass.
						if phase == corev1.PodFailed {
							failed.Add(-1)
						} else {
							succeeded.Add(-1)
							if indexed {
								hmu.Lock()
								delete(doneIndexes, ix)
								hmu.Unlock()
							}
						}
						return
					}
					hmu.Lock()
					handled[p.UID] = true
					hmu.Unlock()
				})
			}
			wg.Wait()
			time.Sleep(20 * time.Millisecond)
		}
	}()

	// The chaos: restart the controller at random moments.
	chaosDone := make(chan struct{})
	go func() {
		defer close(chaosDone)
		for i := 0; i < restarts; i++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(100+rng.Intn(600)) * time.Millisecond):
			}
			mu.Lock()
			run.Stop()
			run = startController(t, opts)
			restarted++
			mu.Unlock()
		}
	}()

	finished := pollUntil(4*time.Minute, func(ctx context.Context) (bool, error) {
		j, err := c.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return findCond(j, batchv1.JobComplete) || findCond(j, batchv1.JobFailed), nil
	})
	if !finished {
		cancel()
		<-kubeletDone
		<-chaosDone
		logCrashState(t, c, job, succeeded.Load(), failed.Load())
		t.Fatalf("timed out after %v waiting for the Job to finish", 4*time.Minute)
	}
	cancel()
	<-kubeletDone
	<-chaosDone
	got := getJob(t, c, job)
	mu.Lock()
	restartsDone := restarted
	mu.Unlock()
	t.Logf("restarts %d; test succeeded %d and failed %d pods; status succeeded %d failed %d",
		restartsDone, succeeded.Load(), failed.Load(), got.Status.Succeeded, got.Status.Failed)
	checkConditions(t, got, "SuccessCriteriaMet=True/CompletionsReached", "Complete=True/CompletionsReached")
	if got.Status.Succeeded != completions {
		t.Errorf("succeeded %d, want %d", got.Status.Succeeded, completions)
	}
	if mode == batchv1.IndexedCompletion && got.Status.CompletedIndexes != "0-999" {
		t.Errorf("completedIndexes %q, want \"0-999\"", got.Status.CompletedIndexes)
	}
	if got.Status.Failed != failed.Load() {
		t.Errorf("failed %d, want %d (pods failed by the test)", got.Status.Failed, failed.Load())
	}
	if restartsDone < restarts {
		t.Errorf("only %d restarts happened before the Job finished", restartsDone)
	}
	waitNoFinalizerInNamespace(t, c, ns)
}

// waitLong polls cond every framework.Interval until it holds, failing the
// test after timeout.
func waitLong(t testing.TB, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if !pollUntil(timeout, cond) {
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

// pollUntil polls cond every framework.Interval until it holds (true) or
// timeout passes (false).
func pollUntil(timeout time.Duration, cond func(ctx context.Context) (bool, error)) bool {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		if ok, err := cond(ctx); err == nil && ok {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(framework.Interval):
		}
	}
}

// logCrashState logs what a crash test needs to explain a Job that did not
// finish: its status, the test's own counts, and every pod that is not a
// plain counted success (phase, index, deletion, finalizer).
func logCrashState(t testing.TB, c kubernetes.Interface, job *batchv1.Job, succeeded, failed int32) {
	t.Helper()
	ctx := context.Background()
	j, err := c.BatchV1().Jobs(job.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
	if err != nil {
		t.Logf("reading the Job: %v", err)
		return
	}
	st := j.Status
	t.Logf("test counted succeeded %d failed %d", succeeded, failed)
	t.Logf("status: active %d ready %v terminating %v succeeded %d failed %d completedIndexes %q failedIndexes %v uncounted %+v",
		st.Active, ptrValue(st.Ready), ptrValue(st.Terminating), st.Succeeded, st.Failed, st.CompletedIndexes, st.FailedIndexes, st.UncountedTerminatedPods)
	for _, cond := range st.Conditions {
		t.Logf("condition %s=%s %s: %s", cond.Type, cond.Status, cond.Reason, cond.Message)
	}
	pods, err := framework.JobPods(ctx, c, job)
	if err != nil {
		t.Logf("listing pods: %v", err)
		return
	}
	byState := map[string]int{}
	for _, p := range pods {
		key := fmt.Sprintf("phase=%s deleting=%t finalizer=%t", p.Status.Phase, p.DeletionTimestamp != nil,
			slices.Contains(p.Finalizers, batchv1.JobTrackingFinalizer))
		byState[key]++
		if p.Status.Phase != corev1.PodSucceeded || p.DeletionTimestamp != nil {
			t.Logf("pod %s uid %s index %q %s", p.Name, p.UID, p.Annotations[batchv1.JobCompletionIndexAnnotation], key)
		}
	}
	t.Logf("pods by state: %v", byState)
}

func ptrValue[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
