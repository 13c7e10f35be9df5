package job

import (
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
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
// API call: one pass over the cached pods, and one Job lookup per
// controller.

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
	// pods lists the cached pods.
	pods corelisters.PodLister
	// resolve returns the cached Job a controller reference points to, nil
	// when the cache has no Job of that name and UID.
	resolve func(namespace string, ref *metav1.OwnerReference) *batchv1.Job
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
		pods:      c.podLister,
		resolve:   c.resolveControllerRef,
		manages:   c.manages,
		goneSince: map[types.UID]time.Time{},
	}
}

// StaleFinalizers implements metrics.StaleFinalizerSource.
func (s *staleFinalizerScanner) StaleFinalizers() metrics.StaleFinalizers {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	pods, err := s.pods.List(labels.Everything())
	if err != nil {
		// A cache lister does not fail; report nothing rather than guess.
		return metrics.StaleFinalizers{}
	}
	// jobs caches the lookups of this scan, by controller UID.
	jobs := map[types.UID]*batchv1.Job{}
	gone := make(map[types.UID]time.Time, len(s.goneSince))
	var out metrics.StaleFinalizers
	for _, pod := range pods {
		if !hasTrackingFinalizer(pod) {
			continue
		}
		var job *batchv1.Job
		if ref := metav1.GetControllerOfNoCopy(pod); ref != nil {
			if ref.Kind != "Job" || ref.APIVersion != batchv1.SchemeGroupVersion.String() {
				continue
			}
			var seen bool
			if job, seen = jobs[ref.UID]; !seen {
				job = s.resolve(pod.Namespace, ref)
				jobs[ref.UID] = job
			}
		}
		var since time.Time
		if job == nil {
			since = now
			if first, ok := s.goneSince[pod.UID]; ok {
				since = first
			}
			gone[pod.UID] = since
		} else {
			var stale bool
			if since, stale = finishedJobFinalizerSince(pod, job, s.manages(job)); !stale {
				continue
			}
		}
		age := now.Sub(since)
		if age < staleFinalizerGrace {
			continue
		}
		out.Pods++
		out.OldestSeconds = max(out.OldestSeconds, age.Seconds())
	}
	s.goneSince = gone
	return out
}

// finishedJobFinalizerSince reports whether pod, which holds the tracking
// finalizer and is controlled by job, holds it although job is finished, and
// since when: the later of the Job's finish time and the pod's creation (a
// pod created from a stale cache after the Job finished is young). Pods of
// unfinished Jobs, and of Jobs this controller does not manage, are not
// stale.
func finishedJobFinalizerSince(pod *corev1.Pod, job *batchv1.Job, managed bool) (time.Time, bool) {
	if !managed || !isFinished(job) {
		return time.Time{}, false
	}
	since := jobFinishTime(job)
	if created := pod.CreationTimestamp.Time; created.After(since) {
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
