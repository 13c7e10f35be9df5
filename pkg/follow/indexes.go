package follow

import (
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// indexPhases returns the phase of every completion index of an Indexed
// Job: succeeded and failed from the status (completedIndexes,
// failedIndexes); running where a pod of the index runs, or has succeeded
// but is not counted in the status yet (so the map never runs ahead of the
// progress bar); pending elsewhere.
func indexPhases(job *batchv1.Job, pods []*corev1.Pod) []IndexPhase {
	n := int(deref(job.Spec.Completions, 0))
	phases := make([]IndexPhase, n)
	for _, p := range pods {
		running := podActive(p) && p.Status.Phase == corev1.PodRunning
		if !running && p.Status.Phase != corev1.PodSucceeded {
			continue
		}
		if i, ok := podIndex(p); ok && i < n {
			phases[i] = IndexRunning
		}
	}
	markIntervals(phases, job.Status.CompletedIndexes, IndexSucceeded)
	if job.Status.FailedIndexes != nil {
		markIntervals(phases, *job.Status.FailedIndexes, IndexFailed)
	}
	return phases
}

// podIndex returns the completion index of a pod of an Indexed Job, from
// its annotation (or, failing that, its label).
func podIndex(p *corev1.Pod) (int, bool) {
	v, ok := p.Annotations[batchv1.JobCompletionIndexAnnotation]
	if !ok {
		v, ok = p.Labels[batchv1.JobCompletionIndexAnnotation]
	}
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(v)
	return i, err == nil && i >= 0
}

// markIntervals sets phase on every index listed in s, the status format
// of completedIndexes and failedIndexes ("1,3-5,7"). Malformed parts and
// indexes out of range are skipped.
func markIntervals(phases []IndexPhase, s string, phase IndexPhase) {
	if s == "" {
		return
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, found := strings.Cut(part, "-")
		first, err := strconv.Atoi(lo)
		if err != nil || first < 0 {
			continue
		}
		last := first
		if found {
			if last, err = strconv.Atoi(hi); err != nil || last < first {
				continue
			}
		}
		for i := first; i <= last && i < len(phases); i++ {
			phases[i] = phase
		}
	}
}

// IndexesIn lists the indexes in phase p in the status interval format
// ("0-3,7"), at most maxRanges ranges followed by "…(+N)" for the rest
// (maxRanges <= 0: all).
func IndexesIn(phases []IndexPhase, p IndexPhase, maxRanges int) string {
	var b strings.Builder
	ranges, more := 0, 0
	for i := 0; i < len(phases); i++ {
		if phases[i] != p {
			continue
		}
		j := i
		for j+1 < len(phases) && phases[j+1] == p {
			j++
		}
		if maxRanges > 0 && ranges == maxRanges {
			more++
		} else {
			if ranges > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(i))
			if j > i {
				b.WriteByte('-')
				b.WriteString(strconv.Itoa(j))
			}
			ranges++
		}
		i = j
	}
	if more > 0 {
		b.WriteString("…(+" + strconv.Itoa(more) + " ranges)")
	}
	return b.String()
}

// CountIndexes counts the indexes in each phase, by phase.
func CountIndexes(phases []IndexPhase) [4]int {
	var n [4]int
	for _, p := range phases {
		n[p]++
	}
	return n
}

// SummarizeIndexes is the compact text form of an index map: each
// non-empty phase with its ranges, in the order failed, running, pending,
// succeeded ("failed 7; running 8-27; pending 28-199; succeeded 0-6"), at
// most maxRanges ranges per phase.
func SummarizeIndexes(phases []IndexPhase, maxRanges int) string {
	var parts []string
	for _, p := range []IndexPhase{IndexFailed, IndexRunning, IndexPending, IndexSucceeded} {
		if r := IndexesIn(phases, p, maxRanges); r != "" {
			parts = append(parts, p.String()+" "+r)
		}
	}
	return strings.Join(parts, "; ")
}

// Cells shrinks an index map to at most n cells for drawing, and returns
// them with the number of indexes each cell stands for. A cell shows the
// most telling phase of its indexes: failed if any failed, else running if
// any runs, else succeeded if all succeeded, else pending.
func Cells(phases []IndexPhase, n int) ([]IndexPhase, int) {
	if n <= 0 || len(phases) <= n {
		return phases, 1
	}
	per := (len(phases) + n - 1) / n
	cells := make([]IndexPhase, 0, n)
	for lo := 0; lo < len(phases); lo += per {
		hi := min(lo+per, len(phases))
		var count [4]int
		for _, p := range phases[lo:hi] {
			count[p]++
		}
		switch {
		case count[IndexFailed] > 0:
			cells = append(cells, IndexFailed)
		case count[IndexRunning] > 0:
			cells = append(cells, IndexRunning)
		case count[IndexSucceeded] == hi-lo:
			cells = append(cells, IndexSucceeded)
		default:
			cells = append(cells, IndexPending)
		}
	}
	return cells, per
}
