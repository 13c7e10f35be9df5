package job

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/storage/names"
	"k8s.io/utils/ptr"
)

// noIndex is the completion index of a pod without a valid one.
const noIndex = -1

// completionIndexEnv is the environment variable that carries the index.
const completionIndexEnv = "JOB_COMPLETION_INDEX"

// isIndexed reports whether the Job uses the Indexed completion mode.
func isIndexed(job *batchv1.Job) bool {
	return ptr.Deref(job.Spec.CompletionMode, batchv1.NonIndexedCompletion) == batchv1.IndexedCompletion
}

// completionModeLabel is the completion_mode metric label of the Job.
func completionModeLabel(job *batchv1.Job) string {
	if isIndexed(job) {
		return string(batchv1.IndexedCompletion)
	}
	return string(batchv1.NonIndexedCompletion)
}

// podIndex returns the completion index annotated on the pod, or noIndex.
func podIndex(pod *corev1.Pod) int {
	v, ok := pod.Annotations[batchv1.JobCompletionIndexAnnotation]
	if !ok {
		return noIndex
	}
	i, err := strconv.Atoi(v)
	if err != nil || i < 0 {
		return noIndex
	}
	return i
}

// validIndex reports whether the pod has an index below completions.
func validIndex(pod *corev1.Pod, completions int32) bool {
	ix := podIndex(pod)
	return ix != noIndex && ix < int(completions)
}

// span is a closed range of indexes [first, last].
type span struct {
	first, last int
}

// indexSet is a sorted list of disjoint, non-adjacent spans: the compressed
// form of a set of completion indexes, as in status.completedIndexes.
type indexSet []span

// parseIndexSet parses "1,3-5,7" keeping only indexes below limit; malformed
// pieces are skipped, as upstream does. Pieces in ascending order (what the
// controller writes) are merged as they come, so parsing takes linear time;
// anything else is sorted and merged once at the end.
func parseIndexSet(s string, limit int) indexSet {
	if s == "" {
		return nil
	}
	var out indexSet
	sorted := true
	for rest := s; rest != ""; {
		var piece string
		piece, rest, _ = strings.Cut(rest, ",")
		lo, hi, isRange := strings.Cut(piece, "-")
		first, err := strconv.Atoi(lo)
		if err != nil || first < 0 || first >= limit {
			continue
		}
		last := first
		if isRange {
			if last, err = strconv.Atoi(hi); err != nil || last < first {
				continue
			}
		}
		last = min(last, limit-1)
		if n := len(out); n > 0 {
			switch {
			case first > out[n-1].last+1:
			case first >= out[n-1].first:
				out[n-1].last = max(out[n-1].last, last)
				continue
			default:
				sorted = false
			}
		}
		out = append(out, span{first, last})
	}
	if !sorted {
		out = indexSet(nil).union(out)
	}
	return out
}

// String renders the set in the upstream compressed form: ranges of three or
// more as "a-b", pairs as "a,b".
func (s indexSet) String() string {
	var b strings.Builder
	for _, sp := range s {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(sp.first))
		switch {
		case sp.last == sp.first+1:
			fmt.Fprintf(&b, ",%d", sp.last)
		case sp.last > sp.first+1:
			fmt.Fprintf(&b, "-%d", sp.last)
		}
	}
	return b.String()
}

// count returns the number of indexes in the set.
func (s indexSet) count() int {
	n := 0
	for _, sp := range s {
		n += sp.last - sp.first + 1
	}
	return n
}

// has reports whether ix is in the set.
func (s indexSet) has(ix int) bool {
	i, _ := slices.BinarySearchFunc(s, ix, func(sp span, ix int) int {
		switch {
		case sp.last < ix:
			return -1
		case sp.first > ix:
			return 1
		}
		return 0
	})
	return i < len(s) && s[i].first <= ix && ix <= s[i].last
}

// union returns a new set with the indexes of both sets.
func (s indexSet) union(o indexSet) indexSet {
	all := make(indexSet, 0, len(s)+len(o))
	all = append(all, s...)
	all = append(all, o...)
	slices.SortFunc(all, func(a, b span) int { return a.first - b.first })
	var out indexSet
	for _, sp := range all {
		if n := len(out); n > 0 && sp.first <= out[n-1].last+1 {
			out[n-1].last = max(out[n-1].last, sp.last)
			continue
		}
		out = append(out, sp)
	}
	return out
}

// minus returns a new set with the indexes of s that are not in o.
func (s indexSet) minus(o indexSet) indexSet {
	var out indexSet
	j := 0
	for _, sp := range s {
		first := sp.first
		for ; j < len(o) && o[j].last < first; j++ {
		}
		for k := j; k < len(o) && o[k].first <= sp.last; k++ {
			if o[k].first > first {
				out = append(out, span{first, o[k].first - 1})
			}
			first = max(first, o[k].last+1)
		}
		if first <= sp.last {
			out = append(out, span{first, sp.last})
		}
	}
	return out
}

// withIndexes returns a new set with the given indexes added.
func (s indexSet) withIndexes(ixs []int) indexSet {
	add := make(indexSet, 0, len(ixs))
	for _, ix := range ixs {
		add = append(add, span{ix, ix})
	}
	return s.union(add)
}

// succeededIndexes returns the Job's completed indexes as recorded in its
// status, and the same set plus the indexes of succeeded pods that still
// hold the tracking finalizer (succeeded but not yet recorded), leaving out
// the indexes in exclude.
func succeededIndexes(job *batchv1.Job, pods []*corev1.Pod, exclude indexSet) (prev, now indexSet) {
	completions := ptr.Deref(job.Spec.Completions, 0)
	prev = parseIndexSet(job.Status.CompletedIndexes, int(completions))
	var fresh []int
	for _, p := range pods {
		if p.Status.Phase == corev1.PodSucceeded && hasTrackingFinalizer(p) && validIndex(p, completions) && !exclude.has(podIndex(p)) {
			fresh = append(fresh, podIndex(p))
		}
	}
	return prev, prev.withIndexes(fresh)
}

// indexOutcomes returns, for an Indexed Job, status.completedIndexes, the
// succeeded indexes now and, with backoffLimitPerIndex, the failed indexes
// now (nil without it). An index is never both succeeded and failed, since
// the API rejects such a status and every later status write would fail:
//   - an index recorded as completed stays completed, and a status that
//     another writer corrupted with an index in both is repaired that way;
//   - an index recorded as failed stays failed; a late success of another
//     pod of it is not counted;
//   - an index that both succeeded and failed in pods not yet accounted
//     (possible after a stale read) counts as succeeded.
func indexOutcomes(job *batchv1.Job, pods []*corev1.Pod, inFlight sets.Set[types.UID]) (prev, succeeded indexSet, failed *indexSet) {
	var prevFailed indexSet
	if hasBackoffLimitPerIndex(job) && job.Status.FailedIndexes != nil {
		completed := parseIndexSet(job.Status.CompletedIndexes, int(*job.Spec.Completions))
		prevFailed = parseIndexSet(*job.Status.FailedIndexes, int(*job.Spec.Completions)).minus(completed)
	}
	prev, succeeded = succeededIndexes(job, pods, prevFailed)
	if hasBackoffLimitPerIndex(job) {
		f := failedIndexes(job, pods, inFlight).minus(succeeded)
		failed = &f
	}
	return prev, succeeded, failed
}

// pendingIndexes returns up to n of the lowest indexes below completions that
// have neither succeeded nor an active pod.
func pendingIndexes(succeeded indexSet, active []*corev1.Pod, n, completions int) []int {
	if n <= 0 {
		return nil
	}
	var activeIx []int
	for _, p := range active {
		if ix := podIndex(p); ix != noIndex {
			activeIx = append(activeIx, ix)
		}
	}
	taken := succeeded.withIndexes(activeIx)
	out := make([]int, 0, n)
	next := 0
	for _, sp := range append(taken, span{completions, completions}) {
		for ; next < sp.first && next < completions && len(out) < n; next++ {
			out = append(out, next)
		}
		if len(out) == n || next >= completions {
			break
		}
		next = max(next, sp.last+1)
	}
	return out
}

// excessIndexedPods splits active pods of an Indexed Job into the ones to
// remove (no index, an index at or above completions, an index already
// succeeded (done), or a duplicate of an index: all but the best pod per
// index, as ranked by activePodsLess) and the ones to keep. A pod of an
// index that succeeded can only run it a second time: two pods created for
// one index around a restart, the first finished before the second was
// seen. Upstream's controller lets it run (and, at the end of a Job, waits
// for it before creating the last indexes).
func excessIndexedPods(active []*corev1.Pod, completions int32, done indexSet) (remove, keep []*corev1.Pod) {
	byIndex := map[int][]*corev1.Pod{}
	for _, p := range active {
		if !validIndex(p, completions) || done.has(podIndex(p)) {
			remove = append(remove, p)
			continue
		}
		ix := podIndex(p)
		byIndex[ix] = append(byIndex[ix], p)
	}
	indexes := make([]int, 0, len(byIndex))
	for ix := range byIndex {
		indexes = append(indexes, ix)
	}
	slices.Sort(indexes)
	for _, ix := range indexes {
		group := byIndex[ix]
		sortForDeletion(group)
		remove = append(remove, group[:len(group)-1]...)
		keep = append(keep, group[len(group)-1])
	}
	return remove, keep
}

// indexedGenerateName is the generateName of pods for an index,
// "<job>-<index>-", with the job name shortened to fit.
func indexedGenerateName(jobName string, ix int) string {
	suffix := "-" + strconv.Itoa(ix) + "-"
	if len(jobName)+len(suffix) > names.MaxGeneratedNameLength {
		jobName = jobName[:names.MaxGeneratedNameLength-len(suffix)]
	}
	return jobName + suffix
}

// addIndexEnv adds JOB_COMPLETION_INDEX, read through the downward API from
// the index label, to every container and init container that lacks it.
func addIndexEnv(spec *corev1.PodSpec) {
	env := corev1.EnvVar{
		Name: completionIndexEnv,
		ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
			FieldPath: fmt.Sprintf("metadata.labels['%s']", batchv1.JobCompletionIndexAnnotation),
		}},
	}
	add := func(cs []corev1.Container) {
		for i := range cs {
			if !slices.ContainsFunc(cs[i].Env, func(e corev1.EnvVar) bool { return e.Name == completionIndexEnv }) {
				cs[i].Env = append(cs[i].Env, env)
			}
		}
	}
	add(spec.InitContainers)
	add(spec.Containers)
}

// setIndex stamps index ix on a pod template: annotation, label and hostname.
func setIndex(tmpl *corev1.PodTemplateSpec, jobName string, ix int) {
	v := strconv.Itoa(ix)
	if tmpl.Annotations == nil {
		tmpl.Annotations = map[string]string{}
	}
	tmpl.Annotations[batchv1.JobCompletionIndexAnnotation] = v
	if tmpl.Labels == nil {
		tmpl.Labels = map[string]string{}
	}
	tmpl.Labels[batchv1.JobCompletionIndexAnnotation] = v
	tmpl.Spec.Hostname = jobName + "-" + v
}

// indexesOf returns the set of valid indexes of the pods.
func indexesOf(pods []*corev1.Pod) sets.Set[int] {
	out := sets.New[int]()
	for _, p := range pods {
		if ix := podIndex(p); ix != noIndex {
			out.Insert(ix)
		}
	}
	return out
}
