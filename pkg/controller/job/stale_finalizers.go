package job

import (
	"slices"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"jobkeeper.dev/jobkeeper/pkg/controller/job/metrics"
)

// The stale tracking finalizer gauges are the service level indicator of
// KEP-2307's promise: no pod keeps batch.kubernetes.io/job-tracking once its
// Job can no longer count it. A pod's finalizer is stale when the pod's
// controlling Job is managed by this controller and finished (Complete or
// Failed), or when the Job is gone: the pod has no controller, or its
// controller is a batch/v1 Job that the informer cache does not hold (with
// that UID). Pods controlled by anything else, and pods of Jobs another
// controller manages, are never counted.
//
// A stale pod's age runs from
//   - the later of its Job's finish time (the Complete or Failed condition's
//     lastTransitionTime) and its own creation, when the Job is finished: a
//     restart of the controller keeps it;
//   - the first scrape that found it orphaned, when the Job is gone: the
//     cache no longer says when the Job went, so the age restarts from 0
//     when the controller restarts (the count does not).
//
// A pod is counted once it is stale for staleFinalizerGrace, so that removals
// in flight normally (the finished Job's last sync, the orphan queue) are
// not. Everything is read from the informer caches at scrape time, with no
// API call: one pass over the cached Jobs, and over the cached pods that hold
// the finalizer, grouped by controller (podFinalizerIndex), skipping the
// pods of unfinished Jobs without reading them; pods without the finalizer,
// most of a busy cluster's, are never read.

// staleFinalizerGrace is how long a pod may keep a stale tracking finalizer
// before the gauges count it. A removal normally lands within a second of
// the Job finishing or going away; a Job of thousands of pods deleted at
// once drains through the orphan queue at the client's QPS (--kube-api-qps),
// which the grace covers for a few thousand pods.
var staleFinalizerGrace = time.Minute

// staleFinalizerScanner computes the stale tracking finalizer gauges from the
// informer caches; it is the metrics.StaleFinalizerSource of a running
// controller.
type staleFinalizerScanner struct {
	// clock gives the scrape time.
	clock clock.PassiveClock
	// jobs lists the cached Jobs.
	jobs batchlisters.JobLister
	// pods are the pod caches, each indexed by controller
	// (podFinalizerIndex): the shared informer's pods, and with
	// Options.JobPodsOnly the metadata of the others (pod_sources.go).
	pods []cache.Indexer
	// manages reports whether this controller manages a Job.
	manages func(*batchv1.Job) bool

	// mu serializes scans (Prometheus may scrape concurrently) and guards goneSince.
	mu sync.Mutex
	// goneSince holds, per pod UID, when a scan first found the pod holding
	// the finalizer with its Job gone. Pods that are no longer in that state
	// are dropped at each scan.
	goneSince map[types.UID]time.Time
}

var _ metrics.StaleFinalizerSource = (*staleFinalizerScanner)(nil)

// newStaleFinalizerScanner returns the scanner of c's caches.
func newStaleFinalizerScanner(c *Controller) *staleFinalizerScanner {
	return &staleFinalizerScanner{
		clock:     c.clock,
		jobs:      c.jobLister,
		pods:      []cache.Indexer{c.podIndexer},
		manages:   c.manages,
		goneSince: map[types.UID]time.Time{},
	}
}

// StaleFinalizers implements metrics.StaleFinalizerSource. It walks the pod
// cache by controller: the pods of an unfinished Job, or of a Job another
// controller manages, are skipped as a group without being looked at, so a
// scrape costs little even while a big Job runs.
func (s *staleFinalizerScanner) StaleFinalizers() metrics.StaleFinalizers {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	jobs, err := s.jobs.List(labels.Everything())
	if err != nil {
		// A cache lister does not fail; report nothing rather than guess.
		return metrics.StaleFinalizers{}
	}
	byUID := make(map[types.UID]*batchv1.Job, len(jobs))
	for _, j := range jobs {
		byUID[j.UID] = j
	}
	gone := make(map[types.UID]time.Time, len(s.goneSince))
	var out metrics.StaleFinalizers
	count := func(since time.Time) {
		if age := now.Sub(since); age >= staleFinalizerGrace {
			out.Pods++
			out.OldestSeconds = max(out.OldestSeconds, age.Seconds())
		}
	}
	for _, pods := range s.pods {
		for _, key := range pods.ListIndexFuncValues(podFinalizerIndex) {
			job, known := byUID[types.UID(key)]
			if known && (!s.manages(job) || !isFinished(job)) {
				continue
			}
			objs, err := pods.ByIndex(podFinalizerIndex, key)
			if err != nil {
				continue
			}
			for _, o := range objs {
				pod, ok := o.(metav1.Object)
				if !ok || !slices.Contains(pod.GetFinalizers(), batchv1.JobTrackingFinalizer) {
					continue
				}
				if known && pod.GetNamespace() == job.Namespace {
					if since, stale := finishedJobFinalizerSince(pod, job, true); stale {
						count(since)
					}
					continue
				}
				// Not a cached Job's pod: no controller at all, a controller of
				// another kind, or a Job that is gone.
				if ref := metav1.GetControllerOfNoCopy(pod); ref != nil && (ref.Kind != "Job" || ref.APIVersion != batchGroupVersion) {
					continue
				}
				since, seen := s.goneSince[pod.GetUID()]
				if !seen {
					since = now
				}
				gone[pod.GetUID()] = since
				count(since)
			}
		}
	}
	s.goneSince = gone
	return out
}

// batchGroupVersion is the apiVersion of a Job owner reference.
var batchGroupVersion = batchv1.SchemeGroupVersion.String()

// finishedJobFinalizerSince reports whether pod, which holds the tracking
// finalizer and is controlled by job, holds it although job is finished, and
// since when: the later of the Job's finish time and the pod's creation (a
// pod created from a stale cache after the Job finished is young). Pods of
// unfinished Jobs, and of Jobs this controller does not manage, are not
// stale.
func finishedJobFinalizerSince(pod metav1.Object, job *batchv1.Job, managed bool) (time.Time, bool) {
	if !managed || !isFinished(job) {
		return time.Time{}, false
	}
	since := jobFinishTime(job)
	if created := pod.GetCreationTimestamp().Time; created.After(since) {
		since = created
	}
	return since, true
}

// jobFinishTime returns when a finished Job finished: its True Complete or
// Failed condition's lastTransitionTime, else its completionTime, else the
// zero time.
func jobFinishTime(job *batchv1.Job) time.Time {
	for _, t := range []batchv1.JobConditionType{batchv1.JobComplete, batchv1.JobFailed} {
		if c := findCondition(job.Status.Conditions, t); c != nil && c.Status == corev1.ConditionTrue && !c.LastTransitionTime.IsZero() {
			return c.LastTransitionTime.Time
		}
	}
	if job.Status.CompletionTime != nil {
		return job.Status.CompletionTime.Time
	}
	return time.Time{}
}
