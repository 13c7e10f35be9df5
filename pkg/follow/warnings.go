package follow

import (
	"sort"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// warningsOf returns the Warning events about the Job or one of pods,
// oldest first (ties by object, then reason).
func warningsOf(job *batchv1.Job, pods []*corev1.Pod, events []*corev1.Event) []Warning {
	podByUID := make(map[types.UID]*corev1.Pod, len(pods))
	for _, p := range pods {
		podByUID[p.UID] = p
	}
	var out []Warning
	for _, e := range events {
		if e.Type != corev1.EventTypeWarning {
			continue
		}
		w := Warning{UID: e.UID, Reason: e.Reason, Message: e.Message, Count: eventCount(e), Last: eventTime(e)}
		ref := e.InvolvedObject
		switch {
		case ref.Kind == "Job" && ref.UID == job.UID:
			w.Object = "job/" + job.Name
		case ref.Kind == "Pod" && podByUID[ref.UID] != nil:
			p := podByUID[ref.UID]
			w.Object = "pod/" + p.Name
			if i, ok := podIndex(p); ok {
				w.Index = strconv.Itoa(i)
			}
		default:
			continue
		}
		out = append(out, w)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].Last.Equal(out[j].Last) {
			return out[i].Last.Before(out[j].Last)
		}
		if out[i].Object != out[j].Object {
			return out[i].Object < out[j].Object
		}
		return out[i].Reason < out[j].Reason
	})
	return out
}

// eventCount is how many times an event was seen, from whichever of the
// core/v1 count and the events.k8s.io series is set.
func eventCount(e *corev1.Event) int32 {
	n := e.Count
	if e.Series != nil && e.Series.Count > n {
		n = e.Series.Count
	}
	return max(n, 1)
}

// eventTime is when an event was last seen: the latest of its timestamps.
func eventTime(e *corev1.Event) time.Time {
	t := e.CreationTimestamp.Time
	for _, c := range []time.Time{e.FirstTimestamp.Time, e.LastTimestamp.Time, e.EventTime.Time} {
		if c.After(t) {
			t = c
		}
	}
	if e.Series != nil && e.Series.LastObservedTime.After(t) {
		t = e.Series.LastObservedTime.Time
	}
	return t
}
