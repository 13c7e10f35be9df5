package job

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/controller/job/metrics"
)

// slowStartInitialBatch is the size of the first batch of pod creations;
// each successful batch doubles the next one.
const slowStartInitialBatch = 1

// wantActive is how many pods should be running: with completions, the
// remaining completions capped by parallelism; without (work queue),
// parallelism until the first success, then whatever is still active.
func wantActive(completions *int32, parallelism, succeeded, active int32) int32 {
	if completions == nil {
		if succeeded > 0 {
			return active
		}
		return parallelism
	}
	return max(0, min(*completions-succeeded, parallelism))
}

// manageJob creates or deletes pods so that the Job runs as many as it
// should, and returns the new active count and the sync action. Suspended
// Jobs lose all active pods; deletions take precedence over creations in a
// sync; creations wait for the failure backoff and come in slow-start batches.
func (c *Controller) manageJob(ctx context.Context, sc *syncContext) (int32, string, error) {
	logger := klog.FromContext(ctx)
	job := sc.job
	active := int32(len(sc.active))

	if isSuspended(job) {
		rm := podsForRemoval(job, sc.active, len(sc.active), sc.succeededIndexes)
		logger.V(4).Info("Deleting all active pods of suspended job", "job", klog.KObj(job), "active", active)
		removedReady, removed, err := c.deletePodsUncounted(ctx, sc, rm)
		sc.ready -= removedReady
		sc.terminating += removed
		return active - removed, metrics.ActionPodsDeleted, err
	}

	want := wantActive(job.Spec.Completions, *job.Spec.Parallelism, sc.succeeded, active)
	rm := podsForRemoval(job, sc.active, int(max(0, active-want)), sc.succeededIndexes)
	if len(rm) > c.opts.MaxPodCreateDeletePerSync {
		rm = rm[:c.opts.MaxPodCreateDeletePerSync]
	}
	if len(rm) > 0 {
		logger.V(4).Info("Too many pods running", "job", klog.KObj(job), "deleting", len(rm), "want", want)
		removedReady, removed, err := c.deletePodsUncounted(ctx, sc, rm)
		sc.ready -= removedReady
		sc.terminating += removed
		return active - removed, metrics.ActionPodsDeleted, err
	}

	var busy int32
	if onlyReplaceFailedPods(job) {
		busy = sc.terminating
	}
	diff := want - busy - active
	if diff <= 0 {
		return active, metrics.ActionTracking, nil
	}
	// With backoffLimitPerIndex each index has its own backoff (below).
	if left := remainingBackoff(sc.newBackoff, c.clock.Now(), c.opts.PodFailureBackoff, c.opts.MaxPodFailureBackoff); left > 0 && !hasBackoffLimitPerIndex(job) {
		logger.V(4).Info("Delaying pod creation after failures", "job", klog.KObj(job), "after", left)
		c.enqueue(logger, job, max(left, c.opts.SyncBatchPeriod))
		return active, metrics.ActionPodsCreated, nil
	}
	diff = min(diff, int32(c.opts.MaxPodCreateDeletePerSync))
	var indexes []int
	if isIndexed(job) {
		occupied := sc.active
		if onlyReplaceFailedPods(job) {
			occupied = append(slices.Clone(sc.active), filterPods(sc.pods, isTerminating)...)
		}
		finished := sc.succeededIndexes
		if sc.failedIndexes != nil {
			finished = finished.union(*sc.failedIndexes)
		}
		indexes = pendingIndexes(finished, occupied, int(diff), int(*job.Spec.Completions))
		if hasBackoffLimitPerIndex(job) {
			var left time.Duration
			indexes, left = indexesPastBackoff(indexes, sc.awaitingReplacement, c.clock.Now(), c.opts.PodFailureBackoff, c.opts.MaxPodFailureBackoff)
			if left > 0 {
				logger.V(4).Info("Delaying pod creation after index failures", "job", klog.KObj(job), "after", left)
				c.enqueue(logger, job, max(left, c.opts.SyncBatchPeriod))
				return active, metrics.ActionPodsCreated, nil
			}
		}
		diff = int32(len(indexes))
		if diff == 0 {
			return active, metrics.ActionTracking, nil
		}
	}
	logger.V(4).Info("Too few pods running", "job", klog.KObj(job), "want", want, "creating", diff)
	created, err := c.createPods(ctx, sc, int(diff), indexes)
	return active + int32(created), metrics.ActionPodsCreated, err
}

// createPods creates n pods (for the given indexes of an Indexed Job) in
// slow-start batches of 1, 2, 4, ...: after a batch with a failure the rest
// is not attempted. It returns how many were created.
func (c *Controller) createPods(ctx context.Context, sc *syncContext, n int, indexes []int) (int, error) {
	logger := klog.FromContext(ctx)
	job := sc.job
	c.expectations.expect(sc.key, n, 0)
	tmpl := job.Spec.Template.DeepCopy()
	if isIndexed(job) {
		addIndexEnv(&tmpl.Spec)
	}
	if !slices.Contains(tmpl.Finalizers, batchv1.JobTrackingFinalizer) {
		tmpl.Finalizers = append(tmpl.Finalizers, batchv1.JobTrackingFinalizer)
	}
	// A template's own owner references are never a pod's.
	tmpl.OwnerReferences = nil
	if pg := sc.podGroup; pg != nil {
		tmpl.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(pg.Name)}
		tmpl.OwnerReferences = []metav1.OwnerReference{podGroupOwnerRef(pg)}
	}
	var created, failed atomic.Int32
	var errs []error
	var mu sync.Mutex
	remaining := n
	for batch := min(remaining, slowStartInitialBatch); remaining > 0; batch = min(2*batch, remaining) {
		before := failed.Load()
		// The batch's templates are built first, in index order; the
		// creates then run in parallel.
		todo := make([]podToCreate, batch)
		for i := range todo {
			todo[i].tmpl = tmpl
			if len(indexes) > 0 {
				ix := indexes[0]
				indexes = indexes[1:]
				t := tmpl.DeepCopy()
				setIndex(t, job.Name, ix)
				if hasBackoffLimitPerIndex(job) {
					setIndexFailureAnnotations(t, job, sc.awaitingReplacement[ix])
				}
				todo[i] = podToCreate{tmpl: t, genName: indexedGenerateName(job.Name, ix)}
			}
		}
		forEachPod(len(todo), func(i int) {
			name, err := c.pods.create(ctx, job, todo[i].tmpl, todo[i].genName)
			if err == nil {
				created.Add(1)
				return
			}
			c.expectations.observe(sc.key, 1, 0)
			if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
				return
			}
			if ambiguous(err) {
				// The pod may exist although the create failed: the next
				// sync waits until the cache shows every pod that does.
				c.writes.needBarrier(sc.key, job.UID, barrier{resource: podsResource, name: name})
			}
			failed.Add(1)
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		})
		remaining -= batch
		if failed.Load() > before && remaining > 0 {
			logger.V(2).Info("Slow-start failure; skipping the remaining pod creations", "job", klog.KObj(job), "skipped", remaining)
			c.expectations.observe(sc.key, remaining, 0)
			break
		}
	}
	c.recordCreations(sc, created.Load(), failed.Load())
	if len(errs) > 0 {
		return int(created.Load()), fmt.Errorf("creating pods: %w", errors.Join(errs...))
	}
	return int(created.Load()), nil
}

// recordCreations feeds job_pods_creation_total.
func (c *Controller) recordCreations(sc *syncContext, succeeded, failed int32) {
	reason := metrics.PodCreateNew
	switch {
	case sc.job.Spec.PodReplacementPolicy != nil && *sc.job.Spec.PodReplacementPolicy == batchv1.Failed && sc.failed > 0:
		// Upstream reads the field here, not the policy implied by a
		// podFailurePolicy; the apiserver sets the field for such Jobs.
		reason = metrics.PodRecreateFailed
	case sc.failed > 0 || sc.terminating > 0:
		reason = metrics.PodRecreateTerminatingOrFailed
	}
	if succeeded > 0 {
		c.metrics.PodsCreation.WithLabelValues(reason, metrics.Succeeded).Add(float64(succeeded))
	}
	if failed > 0 {
		c.metrics.PodsCreation.WithLabelValues(reason, metrics.Failed).Add(float64(failed))
	}
}

// deletePodsUncounted deletes pods the Job no longer wants (scale down,
// suspend, duplicate indexes) without counting them as failed: the tracking
// finalizer is removed first, then the pod is deleted. The removal carries
// the resourceVersion the decision was made from, so that a pod that
// finished in the meantime (the cache not showing it yet) keeps its
// finalizer and is counted by the next sync instead of being dropped
// uncounted. It returns how many ready pods and how many pods in total were
// deleted; a pod found already gone counts as deleted, in both numbers
// alike.
func (c *Controller) deletePodsUncounted(ctx context.Context, sc *syncContext, pods []*corev1.Pod) (int32, int32, error) {
	if len(pods) == 0 {
		return 0, 0, nil
	}
	c.expectations.expect(sc.key, 0, len(pods))
	// remove deletes one pod and reports whether it is gone. Like
	// upstream, a pod found already gone lowers the expectations at once.
	remove := func(pod *corev1.Pod) (bool, error) {
		if patch := removeFinalizerPatchAt(pod); patch != nil {
			if err := c.pods.removeFinalizer(ctx, pod.Namespace, pod.Name, patch); err != nil {
				if apierrors.IsNotFound(err) {
					c.expectations.observe(sc.key, 0, 1)
					return true, nil
				}
				return false, fmt.Errorf("removing tracking finalizer from %s: %w", klog.KObj(pod), err)
			}
		}
		if err := c.pods.delete(ctx, sc.job, pod.Name); err != nil {
			if apierrors.IsNotFound(err) {
				c.expectations.observe(sc.key, 0, 1)
				return true, nil
			}
			return false, err
		}
		return true, nil
	}
	// No deletion event will come for a pod that is not gone.
	return deleteEach(pods, remove, func() { c.expectations.observe(sc.key, 0, 1) })
}

// deleteActivePods deletes the active pods of a failing Job, keeping their
// finalizers so that tracking counts them as failed. It returns how many
// ready pods and how many pods in total were deleted.
func (c *Controller) deleteActivePods(ctx context.Context, job *batchv1.Job, pods []*corev1.Pod) (int32, int32, error) {
	return deleteEach(pods, func(pod *corev1.Pod) (bool, error) {
		if err := c.pods.delete(ctx, job, pod.Name); err != nil && !apierrors.IsNotFound(err) {
			return false, err
		}
		return true, nil
	}, nil)
}

// deleteEach calls remove on every pod, in parallel (forEachPod), and
// returns how many ready pods and how many pods in total remove reported
// gone. notGone, if set, is called once per pod that is not.
func deleteEach(pods []*corev1.Pod, remove func(*corev1.Pod) (gone bool, err error), notGone func()) (int32, int32, error) {
	var deleted, deletedReady atomic.Int32
	var mu sync.Mutex
	var errs []error
	forEachPod(len(pods), func(i int) {
		pod := pods[i]
		gone, err := remove(pod)
		if !gone {
			if notGone != nil {
				notGone()
			}
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
			return
		}
		deleted.Add(1)
		if isReady(pod) {
			deletedReady.Add(1)
		}
	})
	return deletedReady.Load(), deleted.Load(), errors.Join(errs...)
}

// podToCreate is one pod of a creation batch: its template and, for an
// Indexed Job, its generateName.
type podToCreate struct {
	tmpl    *corev1.PodTemplateSpec
	genName string
}
