package job

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	jobcontroller "jobkeeper.dev/jobkeeper/pkg/controller/job"
	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

// TestTerminalConditionAfterRelease checks KEP-2307's finish order, which
// clients rely on: at the revision where a Job first shows Complete or
// Failed, every one of its pods is already counted and released. 100 pods
// finish at once; the pods are read at exactly the revision of the Job's
// first terminal write, so pods released a moment later do not hide a
// condition written too early.
func TestTerminalConditionAfterRelease(t *testing.T) {
	for name, tc := range map[string]struct {
		phase    corev1.PodPhase
		terminal batchv1.JobConditionType
		indexed  bool
	}{
		"all succeed":          {phase: corev1.PodSucceeded, terminal: batchv1.JobComplete},
		"all succeed, Indexed": {phase: corev1.PodSucceeded, terminal: batchv1.JobComplete, indexed: true},
		"all fail":             {phase: corev1.PodFailed, terminal: batchv1.JobFailed},
	} {
		t.Run(name, func(t *testing.T) {
			ns := framework.CreateNamespace(t)
			c := framework.Client(t)
			opts := testOptions()
			// Upstream's batching, so that one sync sees most of the burst.
			opts.SyncBatchPeriod = 500 * time.Millisecond
			startController(t, opts)
			w := builder.MakeJob("burst", ns).ManagedBy(jobcontroller.DefaultManagedBy).Parallelism(100).Completions(100).BackoffLimit(0)
			if tc.indexed {
				w = w.Indexed()
			}
			job := createJob(t, c, w.Obj())
			framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 100})

			type result struct {
				job *batchv1.Job
				err error
			}
			first := make(chan result, 1)
			go func() {
				j, err := firstTerminal(c, job, tc.terminal)
				first <- result{j, err}
			}()
			setAllPodsPhase(t, c, job, tc.phase)
			r := <-first
			if r.err != nil {
				t.Fatal(r.err)
			}
			got := r.job
			if u := got.Status.UncountedTerminatedPods; u != nil && len(u.Succeeded)+len(u.Failed) > 0 {
				t.Errorf("%s written with %d succeeded and %d failed pods uncounted", tc.terminal, len(u.Succeeded), len(u.Failed))
			}
			holding := podsHoldingFinalizerAt(t, c, got, got.ResourceVersion)
			if len(holding) > 0 {
				t.Errorf("%s written (resourceVersion %s) while %d pods still held the tracking finalizer: %v",
					tc.terminal, got.ResourceVersion, len(holding), holding[:min(5, len(holding))])
			}
			want := framework.PodsStatus{Succeeded: 100}
			if tc.phase == corev1.PodFailed {
				want = framework.PodsStatus{Failed: 100}
			}
			framework.WaitForJobPodsStatus(t, c, job, want)
		})
	}
}

// firstTerminal watches the Job from its creation and returns it as of the
// first event that shows the terminal condition ctype, within
// framework.Timeout.
func firstTerminal(c kubernetes.Interface, job *batchv1.Job, ctype batchv1.JobConditionType) (*batchv1.Job, error) {
	ctx, cancel := context.WithTimeout(context.Background(), framework.Timeout)
	defer cancel()
	w, err := c.BatchV1().Jobs(job.Namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", job.Name).String(),
		ResourceVersion: job.ResourceVersion,
	})
	if err != nil {
		return nil, fmt.Errorf("watching job: %w", err)
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		if ev.Type != watch.Modified {
			continue
		}
		j, ok := ev.Object.(*batchv1.Job)
		if !ok {
			continue
		}
		if slices.ContainsFunc(j.Status.Conditions, func(c batchv1.JobCondition) bool {
			return c.Type == ctype && c.Status == corev1.ConditionTrue
		}) {
			return j, nil
		}
	}
	return nil, fmt.Errorf("no %s condition within %s", ctype, framework.Timeout)
}

// podsHoldingFinalizerAt lists the Job's pods as they were at exactly
// resourceVersion rv and returns the names of those holding the tracking
// finalizer.
func podsHoldingFinalizerAt(t *testing.T, c kubernetes.Interface, job *batchv1.Job, rv string) []string {
	t.Helper()
	list, err := c.CoreV1().Pods(job.Namespace).List(context.Background(), metav1.ListOptions{
		LabelSelector:        labels.Set{batchv1.ControllerUidLabel: string(job.UID)}.String(),
		ResourceVersion:      rv,
		ResourceVersionMatch: metav1.ResourceVersionMatchExact,
	})
	if err != nil {
		t.Fatalf("listing pods at resourceVersion %s: %v", rv, err)
	}
	var holding []string
	for _, p := range list.Items {
		if slices.Contains(p.Finalizers, batchv1.JobTrackingFinalizer) {
			holding = append(holding, p.Name)
		}
	}
	return holding
}

// setAllPodsPhase moves every active pod of the Job to phase at once, ten
// writers in parallel, as a node full of pods finishing together would. A
// pod the controller changed or deleted meanwhile (a failing Job deletes
// its remaining pods) is left as it is.
func setAllPodsPhase(t *testing.T, c kubernetes.Interface, job *batchv1.Job, phase corev1.PodPhase) {
	t.Helper()
	ctx := context.Background()
	pods, err := framework.JobPods(ctx, c, job)
	if err != nil {
		t.Fatal(err)
	}
	work := make(chan *corev1.Pod)
	errs := make(chan error, len(pods))
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			for p := range work {
				err := framework.SetPodPhase(ctx, c, p, phase)
				if err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
					errs <- err
				}
			}
		})
	}
	for i := range pods {
		work <- &pods[i]
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(fmt.Errorf("finishing pods: %w", err))
	}
}
