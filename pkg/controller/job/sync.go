package job

import (
	"context"
	"errors"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha2 "k8s.io/api/scheduling/v1alpha2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/controller/job/metrics"
	"jobkeeper.dev/jobkeeper/pkg/fairqueue"
)

// Event reasons recorded on Jobs besides pod writes and suspend/resume.
const (
	// ReasonCompleted is recorded when a Job completes.
	ReasonCompleted = "Completed"
	// ReasonTooManySucceededPods warns that more pods succeeded than completions.
	ReasonTooManySucceededPods = "TooManySucceededPods"
	// ReasonUnknownCompletionMode warns about a Job with an unknown completion mode.
	ReasonUnknownCompletionMode = "UnknownCompletionMode"
)

// syncContext is what one sync of one Job knows and decides. Later features
// (pod failure policy, backoff limit per index, success policy) add their
// fields here instead of growing parameter lists.
type syncContext struct {
	// key is the Job's queue key.
	key string
	// job is a private copy of the Job whose status the sync rewrites.
	job *batchv1.Job
	// pods are all pods the Job controls (after adoption and release).
	pods []*corev1.Pod
	// active are the pods neither terminal nor being deleted.
	active []*corev1.Pod
	// ready and terminating are the status counts to write.
	ready, terminating int32
	// succeeded and failed include pods not yet moved into the counters.
	succeeded, failed int32
	// prevSucceededIndexes is status.completedIndexes; succeededIndexes adds
	// the indexes of succeeded pods still holding the finalizer.
	prevSucceededIndexes, succeededIndexes indexSet
	// uncountedSucceeded and uncountedFailed are the UIDs in
	// status.uncountedTerminatedPods at the start of the sync.
	uncountedSucceeded, uncountedFailed sets.Set[types.UID]
	// expectedRmFinalizers are pods whose finalizer removal is in flight.
	expectedRmFinalizers sets.Set[types.UID]
	// interim is the FailureTarget or SuccessCriteriaMet condition the Job
	// is heading to (already in its status, or to be added before any
	// finalizer is removed); nil while no end is decided.
	interim *batchv1.JobCondition
	// terminal is the Failed or Complete condition that follows interim,
	// set once no pod is uncounted or terminating; nil with interim.
	terminal *batchv1.JobCondition
	// newBackoff is the backoff record including this sync's finished pods.
	newBackoff backoffRecord
	// failedIndexes is, with backoffLimitPerIndex, status.failedIndexes plus
	// the indexes failed by unaccounted pods; nil without it.
	failedIndexes *indexSet
	// podGroup is the PodGroup the Job's new pods name (WorkloadWithJob);
	// nil: plain scheduling.
	podGroup *schedulingv1alpha2.PodGroup
	// awaitingReplacement is, with backoffLimitPerIndex, the failed pod per
	// index that keeps its finalizer until the index has a replacement.
	awaitingReplacement map[int]*corev1.Pod
}

// setEnd makes the Job head to the end that interim announces (nil: none).
func (sc *syncContext) setEnd(interim *batchv1.JobCondition, now time.Time) {
	sc.interim, sc.terminal = interim, nil
	if interim != nil {
		sc.terminal = terminalFor(interim, now)
	}
}

// failing reports whether the Job is heading to Failed: then every pod not
// succeeded is accounted as failed.
func (sc *syncContext) failing() bool {
	return sc.terminal != nil && sc.terminal.Type == batchv1.JobFailed
}

// syncJob brings one Job towards its spec. Steps:
//  1. wait until the informers show this controller's own last writes
//     for the Job (read-your-writes, consistency.go);
//  2. skip Jobs that are gone, not managed or finished (a finished Job only
//     gets its leftover finalizers released, finished_cleanup.go);
//  3. list and claim pods, and count outcomes;
//  4. decide the end (decideFinish: failure first, then success policy);
//  5. if an end is decided, delete the active pods; else create or delete
//     pods (manage.go) and check whether completions are reached;
//  6. track finished pods and write the status (tracking.go).
//
// Never called concurrently for the same key.
func (c *Controller) syncJob(ctx context.Context, key string) (rErr error) {
	start := c.clock.Now()
	logger := klog.FromContext(ctx)
	// The sync's requests are the Job's flow: with a fair rate limiter in
	// front of the client (pkg/fairqueue), Jobs take turns for tokens.
	ctx = fairqueue.WithFlow(ctx, key)
	defer func() {
		logger.V(4).Info("Finished syncing job", "key", key, "elapsed", c.clock.Since(start))
	}()
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return err
	}
	if err := c.awaitOwnWrites(ctx, key); err != nil {
		if !errors.Is(err, errStaleCache) {
			// A barrier that cannot be read blocks the Job: an error
			// that alerts see, not a silent wait.
			c.recordBlockedSync(ns, name, start)
		}
		return err
	}
	shared, err := c.jobLister.Jobs(ns).Get(name)
	if apierrors.IsNotFound(err) {
		logger.V(4).Info("Job has been deleted", "key", key)
		c.forgetJob(key, "")
		return nil
	}
	if err != nil {
		return err
	}
	if !c.manages(shared) {
		logger.V(4).Info("Skipping job managed by another controller", "job", klog.KObj(shared), "managedBy", ptr.Deref(shared.Spec.ManagedBy, ""))
		return nil
	}
	if isFinished(shared) {
		c.syncFinished(logger, key, shared)
		return nil
	}
	if _, ok := c.finishedJobs.Load(shared.UID); ok {
		logger.V(2).Info("Skipping job marked finished until the informer catches up", "job", klog.KObj(shared))
		return nil
	}
	if m := shared.Spec.CompletionMode; m != nil && *m != batchv1.NonIndexedCompletion && *m != batchv1.IndexedCompletion {
		c.recorder.Event(shared, corev1.EventTypeWarning, ReasonUnknownCompletionMode, "Skipped Job sync because completion mode is unknown")
		return nil
	}

	job := shared.DeepCopy()
	mode := completionModeLabel(job)
	action := metrics.ActionReconciling
	defer func() {
		result := metrics.Success
		if rErr != nil {
			result = metrics.Error
		}
		c.metrics.SyncDuration.WithLabelValues(mode, result, action).Observe(c.clock.Since(start).Seconds())
		c.metrics.Syncs.WithLabelValues(mode, result, action).Inc()
	}()
	if job.Status.UncountedTerminatedPods == nil {
		job.Status.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{}
	}
	// Read expectations before listing pods. A pod created after this point
	// only defers the decision to the next sync. A finalizer removal observed
	// after this point is still in expectedRmFinalizers, so a pod listed
	// before its update reached the cache is not counted a second time;
	// one observed before it is already finalizer-free in the list.
	satisfied := c.expectations.satisfied(key)
	expectedRmFinalizers := c.finalizers.expected(key)
	pods, err := c.podsForJob(ctx, job)
	if err != nil {
		return err
	}
	// The gang's Workload and PodGroup exist before any of its pods, which
	// name the PodGroup.
	var podGroup *schedulingv1alpha2.PodGroup
	if c.gang != nil && gangEligible(job) {
		if podGroup, err = c.ensurePodGroup(ctx, job, pods); err != nil {
			return fmt.Errorf("ensuring Workload and PodGroup for Job %s: %w", key, err)
		}
	}
	now := c.clock.Now()
	sc := &syncContext{
		key:                  key,
		job:                  job,
		pods:                 pods,
		active:               filterPods(pods, isActive),
		terminating:          countPods(pods, isTerminating),
		uncountedSucceeded:   sets.New(job.Status.UncountedTerminatedPods.Succeeded...),
		uncountedFailed:      sets.New(job.Status.UncountedTerminatedPods.Failed...),
		expectedRmFinalizers: expectedRmFinalizers,
		podGroup:             podGroup,
	}
	sc.ready = countPods(sc.active, isReady)
	active := int32(len(sc.active))
	newSucceeded, newFailed := newlyFinishedPods(sc)
	sc.succeeded = job.Status.Succeeded + int32(len(newSucceeded)+sc.uncountedSucceeded.Len())
	// Failures matching an Ignore rule never reach status.failed.
	sc.failed = job.Status.Failed + countedFailures(job.Spec.PodFailurePolicy, newFailed) + int32(sc.uncountedFailed.Len())
	if job.Status.StartTime == nil && !isSuspended(job) {
		t := metav1.NewTime(now)
		job.Status.StartTime = &t
	}
	sc.newBackoff = nextBackoffRecord(c.backoff.get(key), newSucceeded, newFailed)
	if isIndexed(job) {
		sc.prevSucceededIndexes, sc.succeededIndexes, sc.failedIndexes = indexOutcomes(job, pods, expectedRmFinalizers)
		sc.succeeded = int32(sc.succeededIndexes.count())
	}

	decision := decideFinish(job, pods, finishCounts{failed: sc.failed, succeededIndexes: sc.succeededIndexes, failedIndexes: sc.failedIndexes}, now)
	if decision.deadlineIn > 0 {
		logger.V(2).Info("Job has activeDeadlineSeconds; will sync again", "job", klog.KObj(job), "after", decision.deadlineIn)
		c.queue.AddAfter(key, decision.deadlineIn)
	}
	sc.setEnd(decision.interim, now)
	if sc.failedIndexes != nil {
		sc.awaitingReplacement = podsAwaitingReplacement(sc, *sc.failedIndexes)
	}

	var manageErr error
	statusChanged := false
	if !satisfied && sc.interim != nil && sc.interim.Type == batchv1.JobSuccessCriteriaMet &&
		!conditionTrue(job.Status.Conditions, batchv1.JobSuccessCriteriaMet) {
		// A success decided while a create or delete of an earlier sync is
		// not in the cache yet waits for it. Upstream deletes the active pods
		// at once but declares nothing; its next sync then finds them
		// deleted and may count them as failed, so a race with the informer
		// would turn the pods a met successPolicy stops into failures. The
		// wait ends when the cache shows the writes (their events sync the
		// Job) or when they expire; a write lost for good (a watch gap)
		// sends no event, so the Job is synced again at expiry.
		sc.setEnd(nil, now)
		c.syncAtExpiry(logger, key)
	}
	if sc.interim != nil {
		deletedReady, deleted, err := c.deleteActivePods(ctx, job, sc.active)
		if deleted != active || !satisfied {
			// Pods may remain, or pods may exist that the cache has not shown
			// yet: the Job cannot be declared finished in this sync.
			sc.setEnd(nil, now)
		}
		active -= deleted
		sc.terminating += deleted
		sc.ready -= deletedReady
		manageErr = err
	} else {
		managed := false
		if satisfied && job.DeletionTimestamp == nil {
			active, action, manageErr = c.manageJob(ctx, sc)
			managed = true
		}
		// Pods created but not yet in the cache may be running: the Job
		// is judged complete only once the cache shows every create.
		if succeededEnough(job, sc.succeeded, active) {
			if satisfied {
				sc.setEnd(newCondition(batchv1.JobSuccessCriteriaMet, corev1.ConditionTrue, batchv1.JobReasonCompletionsReached, msgCompletionsReached, now), now)
			} else {
				// Complete once the cache has caught up, or at expiry.
				c.syncAtExpiry(logger, key)
			}
		} else if managed {
			// Only a sync that acted on pods may flip Suspended.
			if tr := applySuspendCondition(job, metav1.NewTime(now)); tr.changed {
				statusChanged = true
				c.recorder.Event(job, corev1.EventTypeNormal, tr.eventReason, tr.eventMessage)
			}
		}
	}

	statusChanged = statusChanged || active != job.Status.Active ||
		!ptr.Equal(&sc.ready, job.Status.Ready) || !ptr.Equal(&sc.terminating, job.Status.Terminating)
	job.Status.Active = active
	job.Status.Ready = ptr.To(sc.ready)
	job.Status.Terminating = ptr.To(sc.terminating)
	if err := c.trackStatus(ctx, sc, statusChanged); err != nil {
		return fmt.Errorf("tracking status of job %s: %w", key, err)
	}
	return manageErr
}

// syncAtExpiry syncs the Job key again when its pod expectations expire,
// for a decision that waits for them: the writes they stand for may never
// show in the cache, and then nothing else would sync the Job. The queue
// keeps one delayed entry per key, at the earliest time asked.
func (c *Controller) syncAtExpiry(logger klog.Logger, key string) {
	in := c.expectations.expiresIn(key) + time.Second
	logger.V(4).Info("Decision waits for pod expectations", "key", key, "syncAgainIn", in)
	c.queue.AddAfter(key, in)
}

// recordBlockedSync counts a sync of the Job ns/name that failed before it
// could read the Job (a barrier read refused, say) as a sync error, labelled
// with the completion mode the cache shows (NonIndexed if it shows none).
func (c *Controller) recordBlockedSync(ns, name string, start time.Time) {
	mode := string(batchv1.NonIndexedCompletion)
	if job, err := c.jobLister.Jobs(ns).Get(name); err == nil {
		mode = completionModeLabel(job)
	}
	c.metrics.SyncDuration.WithLabelValues(mode, metrics.Error, metrics.ActionReconciling).Observe(c.clock.Since(start).Seconds())
	c.metrics.Syncs.WithLabelValues(mode, metrics.Error, metrics.ActionReconciling).Inc()
}

// succeededEnough reports whether the Job met its completions: with
// completions, that many successes and nothing active; without (work
// queue), any success and nothing active.
func succeededEnough(job *batchv1.Job, succeeded, active int32) bool {
	if active != 0 {
		return false
	}
	if job.Spec.Completions == nil {
		return succeeded > 0
	}
	return succeeded >= *job.Spec.Completions
}

// newlyFinishedPods returns the succeeded and failed pods that still hold the
// finalizer, are not in uncountedTerminatedPods and whose finalizer removal
// is not in flight (for Indexed Jobs: with a valid index).
func newlyFinishedPods(sc *syncContext) (succeeded, failed []*corev1.Pod) {
	for _, p := range sc.pods {
		if !hasTrackingFinalizer(p) || sc.expectedRmFinalizers.Has(p.UID) {
			continue
		}
		if isIndexed(sc.job) && !validIndex(p, *sc.job.Spec.Completions) {
			continue
		}
		switch {
		case p.Status.Phase == corev1.PodSucceeded:
			if !sc.uncountedSucceeded.Has(p.UID) {
				succeeded = append(succeeded, p)
			}
		case isFailed(p, sc.job):
			if !sc.uncountedFailed.Has(p.UID) {
				failed = append(failed, p)
			}
		}
	}
	return succeeded, failed
}

// podsForJob returns the pods the Job controls, adopting orphans that match
// its selector (adding the tracking finalizer) and releasing owned pods that
// no longer match. The returned pods are cache pointers; adopted ones are
// copies showing the finalizer.
func (c *Controller) podsForJob(ctx context.Context, job *batchv1.Job) ([]*corev1.Pod, error) {
	selector, err := metav1.LabelSelectorAsSelector(job.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("converting job selector: %w", err)
	}
	indexers := []cache.Indexer{c.podIndexer}
	if m := c.sources.manualFor(jobKey(job)); m != nil {
		// A Job with manualSelector: its pods without the Job label are in
		// its narrow informer (pod_sources.go), which must have synced.
		if !m.informer.HasSynced() {
			return nil, fmt.Errorf("%w: the informer of the pods selected by %s has not synced", errStaleCache, jobKey(job))
		}
		indexers = append(indexers, m.informer.GetIndexer())
	}
	var candidates []*corev1.Pod
	for _, indexer := range indexers {
		for _, idx := range []string{string(job.UID), "orphan/" + job.Namespace} {
			objs, err := indexer.ByIndex(podControllerIndex, idx)
			if err != nil {
				return nil, err
			}
			for _, o := range objs {
				if p := o.(*corev1.Pod); p.Namespace == job.Namespace {
					candidates = append(candidates, p)
				}
			}
		}
	}
	canAdopt := controller.RecheckDeletionTimestamp(func(ctx context.Context) (metav1.Object, error) {
		fresh, err := c.client.BatchV1().Jobs(job.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		if fresh.UID != job.UID {
			return nil, fmt.Errorf("original Job %s/%s is gone: got uid %v, wanted %v", job.Namespace, job.Name, fresh.UID, job.UID)
		}
		return fresh, nil
	})
	cm := controller.NewPodControllerRefManager(c.pods, job, selector, batchv1.SchemeGroupVersion.WithKind("Job"), canAdopt, batchv1.JobTrackingFinalizer)
	pods, err := cm.ClaimPods(ctx, candidates)
	if err != nil {
		return pods, err
	}
	for i, p := range pods {
		if metav1.GetControllerOfNoCopy(p) == nil && !hasTrackingFinalizer(p) {
			// Just adopted: the adoption patch added the finalizer.
			cp := p.DeepCopy()
			cp.Finalizers = append(cp.Finalizers, batchv1.JobTrackingFinalizer)
			pods[i] = cp
		}
	}
	return pods, nil
}
