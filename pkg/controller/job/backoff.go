package job

import (
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
	"k8s.io/utils/ptr"
)

// backoffRecord is what the pod re-creation backoff of one Job depends on:
// the failures since the last success and when the last of them happened.
type backoffRecord struct {
	// failuresAfterLastSuccess counts pod failures newer than the newest success.
	failuresAfterLastSuccess int32
	// lastFailureTime is the finish time of the newest such failure.
	lastFailureTime *time.Time
}

// backoffStore keeps the backoffRecord of each Job key in memory. After a
// restart the records are empty, so at most one delay is skipped, as upstream.
type backoffStore struct {
	mu      sync.Mutex
	records map[string]backoffRecord
}

func newBackoffStore() *backoffStore {
	return &backoffStore{records: map[string]backoffRecord{}}
}

// get returns the record of key (zero if none).
func (s *backoffStore) get(key string) backoffRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.records[key]
}

// set stores the record of key.
func (s *backoffStore) set(key string, r backoffRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records[key] = r
}

// remove forgets key.
func (s *backoffStore) remove(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.records, key)
}

// nextBackoffRecord folds newly finished pods into prev: a success resets the
// count, and only failures that finished after the newest success count.
func nextBackoffRecord(prev backoffRecord, newSucceeded, newFailed []*corev1.Pod) backoffRecord {
	if len(newSucceeded) == 0 && len(newFailed) == 0 {
		return prev
	}
	failTimes := finishTimes(newFailed)
	if len(newSucceeded) == 0 {
		last := failTimes[len(failTimes)-1]
		return backoffRecord{
			failuresAfterLastSuccess: prev.failuresAfterLastSuccess + int32(len(failTimes)),
			lastFailureTime:          &last,
		}
	}
	succTimes := finishTimes(newSucceeded)
	lastSuccess := succTimes[len(succTimes)-1]
	var next backoffRecord
	for i := len(failTimes) - 1; i >= 0 && failTimes[i].After(lastSuccess); i-- {
		if next.lastFailureTime == nil {
			t := failTimes[i]
			next.lastFailureTime = &t
		}
		next.failuresAfterLastSuccess++
	}
	return next
}

// finishTimes returns the sorted finish times of the pods.
func finishTimes(pods []*corev1.Pod) []time.Time {
	out := make([]time.Time, 0, len(pods))
	for _, p := range pods {
		out = append(out, podFinishTime(p))
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

// podFinishTime estimates when a pod finished: the latest container finish
// time if every container terminated, else the Ready=False transition time,
// else the deletion time minus the grace period, else the creation time.
func podFinishTime(p *corev1.Pod) time.Time {
	if t, ok := containersFinishTime(p); ok {
		return t
	}
	if _, c := podutil.GetPodCondition(&p.Status, corev1.PodReady); c != nil && c.Status == corev1.ConditionFalse && !c.LastTransitionTime.IsZero() {
		return c.LastTransitionTime.Time
	}
	if p.DeletionTimestamp != nil {
		return p.DeletionTimestamp.Add(-time.Duration(ptr.Deref(p.DeletionGracePeriodSeconds, 0)) * time.Second)
	}
	return p.CreationTimestamp.Time
}

// containersFinishTime returns the latest finish time of the pod's containers
// and sidecars, if all of them terminated with a finish time. As upstream, a
// pod that reports no container status at all yet has terminated sidecars
// finished when its last sidecar did; one with neither has no finish time.
func containersFinishTime(p *corev1.Pod) (time.Time, bool) {
	var latest time.Time
	found := false
	consider := func(s corev1.ContainerStatus) bool {
		t := s.State.Terminated
		if t == nil || t.FinishedAt.IsZero() {
			return false
		}
		if !found || t.FinishedAt.After(latest) {
			latest, found = t.FinishedAt.Time, true
		}
		return true
	}
	for _, s := range p.Status.ContainerStatuses {
		if !consider(s) {
			return time.Time{}, false
		}
	}
	sidecars := map[string]bool{}
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sidecars[c.Name] = true
		}
	}
	for _, s := range p.Status.InitContainerStatuses {
		if sidecars[s.Name] && !consider(s) {
			return time.Time{}, false
		}
	}
	return latest, found
}

// backoffDelay is the re-creation delay after n consecutive failures:
// base * 2^(n-1), capped at maxDelay; 0 when n is 0.
func backoffDelay(n int32, base, maxDelay time.Duration) time.Duration {
	if n <= 0 {
		return 0
	}
	d := base
	for i := int32(1); i < n; i++ {
		d *= 2
		if d >= maxDelay {
			return maxDelay
		}
	}
	return min(d, maxDelay)
}

// remainingBackoff is how long pod creation must still wait at now.
func remainingBackoff(r backoffRecord, now time.Time, base, maxDelay time.Duration) time.Duration {
	if r.failuresAfterLastSuccess == 0 || r.lastFailureTime == nil {
		return 0
	}
	elapsed := now.Sub(*r.lastFailureTime)
	d := backoffDelay(r.failuresAfterLastSuccess, base, maxDelay)
	if d < elapsed {
		return 0
	}
	return d - elapsed
}
