package main

import (
	"context"
	"fmt"
	"os"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/test/builder"
)

// existingPodLabel marks the startup workload's pods that the bench
// created, so that the pods a controller created can be told apart and
// removed after each run.
const existingPodLabel = "bench.jobkeeper.dev/existing"

// startupHeadroom is how many more pods than exist the startup workload's
// Job wants running: its controller has pods to create as soon as it has
// synced.
const startupHeadroom = 100

// startupJob is the startup workload's Job, created once for every run.
type startupJob struct {
	ns  string
	job *batchv1.Job
}

// createStartupJob creates the startup workload's Job (NonIndexed,
// parallelism w.Pods+startupHeadroom) and w.Pods running pods of it, each
// with the Job's labels, controller reference and tracking finalizer, as if
// its controller had created them before it restarted.
func (e *env) createStartupJob(ctx context.Context, w workload) (*startupJob, error) {
	ns, err := e.namespace(ctx, w)
	if err != nil {
		return nil, err
	}
	t := time.Now()
	tmpl := builder.MakeJob("existing", ns).Completions(int32(2 * w.Pods)).Parallelism(int32(w.Pods + startupHeadroom)).Obj()
	job, err := e.admin.BatchV1().Jobs(ns).Create(ctx, tmpl, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating the startup Job: %w", err)
	}
	ref := metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))
	err = createRunningPods(ctx, e.admin, ns, w.Pods, func(p *corev1.Pod) {
		p.Labels = map[string]string{existingPodLabel: "true"}
		for k, v := range job.Spec.Template.Labels {
			p.Labels[k] = v
		}
		p.OwnerReferences = []metav1.OwnerReference{*ref}
		p.Finalizers = []string{batchv1.JobTrackingFinalizer}
	})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "bench: %s: created a Job and %d running pods of it in %v\n", w.Name, w.Pods, time.Since(t).Round(time.Second))
	return &startupJob{ns: ns, job: job}, nil
}

// runStartup starts impl's controllers with the startup Job present and
// measures the time from the process start to its first pod creation
// request (counted at the proxy), then stops the controllers and removes
// the pods they created, so that the next run starts from the same state.
func (e *env) runStartup(ctx context.Context, w workload, impl string, b budget, st *startupJob, r *runResult) error {
	c, err := e.startChild(ctx, impl, w, b)
	if err != nil {
		return err
	}
	defer c.kill()
	defer e.removeCreatedPods(ctx, st.ns)
	if err := c.waitSynced(15 * time.Minute); err != nil {
		return err
	}
	r.StartupSeconds = c.syncedAfter.Seconds()
	if err := waitFor(ctx, 10*time.Minute, func() bool { return !c.counter.FirstSeen(createPodsKind).IsZero() }); err != nil {
		return fmt.Errorf("no pod created: %w", err)
	}
	r.FirstPodSeconds = c.counter.FirstSeen(createPodsKind).Sub(c.started).Seconds()
	r.WallSeconds = r.FirstPodSeconds
	return c.stop(r)
}

// createPodsKind is the request kind of a pod creation.
const createPodsKind = "create pods"

// removeCreatedPods deletes the pods of ns that the bench did not create
// (releasing their finalizers first) and waits until they are gone.
func (e *env) removeCreatedPods(ctx context.Context, ns string) {
	sel := metav1.ListOptions{LabelSelector: "!" + existingPodLabel}
	_ = waitFor(ctx, 5*time.Minute, func() bool {
		pods, err := e.admin.CoreV1().Pods(ns).List(ctx, sel)
		if err != nil {
			return false
		}
		for _, p := range pods.Items {
			if len(p.Finalizers) > 0 {
				_, _ = e.admin.CoreV1().Pods(ns).Patch(ctx, p.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			}
			if p.DeletionTimestamp == nil {
				_ = e.admin.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
			}
		}
		return len(pods.Items) == 0
	})
}
