package policy

import (
	"errors"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// Finish is what a Rule read from an object.
type Finish struct {
	// Finished is true once the object succeeded or failed.
	Finished bool
	// Failed is true when it failed (or finished without succeeding).
	Failed bool
	// At is when it finished; zero unless Finished and Err is nil.
	At time.Time
	// Err is set when the object finished but its finish time cannot be
	// read. It wraps ErrNoFinishTime.
	Err error
}

// Expirable reports whether the object finished at a readable time.
func (f Finish) Expirable() bool { return f.Finished && f.Err == nil }

// ErrNoFinishTime is wrapped by every unreadable-finish-time error.
var ErrNoFinishTime = errors.New("no readable finish time")

// Rule reads whether an object of one kind has finished, how, and when.
type Rule interface {
	// Read evaluates obj.
	Read(obj runtime.Object) Finish
	// TopLevelFields lists the top-level fields Read needs, so that trimmed
	// informer caches keep them.
	TopLevelFields() []string
	// Paths lists the field paths Read reads, for schema checks.
	Paths() [][]string
	// CanSay reports whether the rule can ever say "failed" (failed true) or
	// "succeeded" (failed false).
	CanSay(failed bool) bool
}

// JobRule is the built-in rule for batch/v1 Jobs: finished with a
// Complete=True or Failed=True condition, at its lastTransitionTime, as
// upstream's TTL-after-finished controller reads it.
var JobRule Rule = jobRule{}

// PodRule is the built-in rule for v1 Pods: finished in phase Succeeded or
// Failed, at PodFinishTime.
var PodRule Rule = podRule{}

type jobRule struct{}

func (jobRule) Read(obj runtime.Object) Finish {
	job, ok := obj.(*batchv1.Job)
	if !ok {
		return Finish{Finished: true, Err: fmt.Errorf("built-in Job rule got %T: %w", obj, ErrNoFinishTime)}
	}
	c, failed, ok := JobFinishCondition(job)
	if !ok {
		return Finish{}
	}
	if c.LastTransitionTime.IsZero() {
		return Finish{Finished: true, Failed: failed, Err: fmt.Errorf("condition %s has no lastTransitionTime: %w", c.Type, ErrNoFinishTime)}
	}
	return Finish{Finished: true, Failed: failed, At: c.LastTransitionTime.Time}
}

func (jobRule) TopLevelFields() []string { return []string{"status"} }
func (jobRule) Paths() [][]string        { return nil }
func (jobRule) CanSay(bool) bool         { return true }

type podRule struct{}

func (podRule) Read(obj runtime.Object) Finish {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return Finish{Finished: true, Err: fmt.Errorf("built-in Pod rule got %T: %w", obj, ErrNoFinishTime)}
	}
	finished, failed := PodFinished(pod)
	if !finished {
		return Finish{}
	}
	return Finish{Finished: true, Failed: failed, At: PodFinishTime(pod)}
}

func (podRule) TopLevelFields() []string { return []string{"status"} }
func (podRule) Paths() [][]string        { return nil }
func (podRule) CanSay(bool) bool         { return true }

// JobFinishCondition returns the first Complete=True or Failed=True
// condition of a Job and whether the Job failed. Interim conditions
// (FailureTarget, SuccessCriteriaMet) do not count.
func JobFinishCondition(job *batchv1.Job) (c *batchv1.JobCondition, failed bool, ok bool) {
	for i := range job.Status.Conditions {
		c := &job.Status.Conditions[i]
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return c, false, true
		case batchv1.JobFailed:
			return c, true, true
		}
	}
	return nil, false, false
}

// PodFinished reports whether a Pod is in phase Succeeded or Failed, and
// whether it failed.
func PodFinished(pod *corev1.Pod) (finished, failed bool) {
	switch pod.Status.Phase {
	case corev1.PodSucceeded:
		return true, false
	case corev1.PodFailed:
		return true, true
	}
	return false, false
}

// PodFinishTime is when a finished Pod finished: the latest finishedAt of any
// terminated container (init, regular or ephemeral). When no container
// recorded one (a Pod failed before its containers ran, e.g. evicted or
// rejected at admission), the fallbacks are, in order: the latest
// lastTransitionTime of the Pod's conditions, status.startTime and
// metadata.creationTimestamp.
func PodFinishTime(pod *corev1.Pod) time.Time {
	var latest time.Time
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for _, cs := range list {
			if t := cs.State.Terminated; t != nil && t.FinishedAt.Time.After(latest) {
				latest = t.FinishedAt.Time
			}
		}
	}
	if !latest.IsZero() {
		return latest
	}
	for _, c := range pod.Status.Conditions {
		if c.LastTransitionTime.Time.After(latest) {
			latest = c.LastTransitionTime.Time
		}
	}
	if !latest.IsZero() {
		return latest
	}
	if pod.Status.StartTime != nil && !pod.Status.StartTime.IsZero() {
		return pod.Status.StartTime.Time
	}
	return pod.CreationTimestamp.Time
}

// matcher is a compiled v1alpha1.Matcher: a condition matcher (condType set)
// or a field matcher (path set).
type matcher struct {
	condType, condStatus string
	reasons              []string
	path                 []string
	values               []string
}

// match reports whether the matcher matches content; for a condition
// matcher it also returns the matching condition.
func (m *matcher) match(content map[string]interface{}) (bool, map[string]interface{}) {
	if m.path != nil {
		v, found, err := unstructured.NestedString(content, m.path...)
		return found && err == nil && contains(m.values, v), nil
	}
	conds, _, _ := unstructured.NestedSlice(content, "status", "conditions")
	for _, c := range conds {
		cm, ok := c.(map[string]interface{})
		if !ok || cm["type"] != m.condType || cm["status"] != m.condStatus {
			continue
		}
		if len(m.reasons) > 0 {
			r, _ := cm["reason"].(string)
			if !contains(m.reasons, r) {
				continue
			}
		}
		return true, cm
	}
	return false, nil
}

// matcherRule is the rule of a policy's spec.outcome.
type matcherRule struct {
	failed, succeeded, finished []matcher
	// finishTime is the finish-time field path, or nil.
	finishTime []string
}

func (r *matcherRule) Read(obj runtime.Object) Finish {
	content, err := toUnstructured(obj)
	if err != nil {
		return Finish{Finished: true, Err: fmt.Errorf("%v: %w", err, ErrNoFinishTime)}
	}
	var f Finish
	var cond map[string]interface{}
	lists := []struct {
		ms     []matcher
		failed bool
	}{{r.failed, true}, {r.succeeded, false}, {r.finished, true}}
	for _, l := range lists {
		for i := range l.ms {
			if ok, c := l.ms[i].match(content); ok {
				f.Finished, f.Failed, cond = true, l.failed, c
				break
			}
		}
		if f.Finished {
			break
		}
	}
	if !f.Finished {
		return f
	}
	if r.finishTime != nil {
		if v, found, _ := unstructured.NestedFieldNoCopy(content, r.finishTime...); found && v != nil {
			f.At, f.Err = parseTime(v, "field "+strings.Join(r.finishTime, "."))
			return f
		}
	}
	if cond == nil {
		if r.finishTime != nil {
			f.Err = fmt.Errorf("field %s is not set and no condition matched: %w", strings.Join(r.finishTime, "."), ErrNoFinishTime)
		} else {
			f.Err = fmt.Errorf("a field matcher matched and spec.outcome.finishTime is not set: %w", ErrNoFinishTime)
		}
		return f
	}
	f.At, f.Err = parseTime(cond["lastTransitionTime"], fmt.Sprintf("condition %v lastTransitionTime", cond["type"]))
	return f
}

func (r *matcherRule) all() []matcher {
	out := append([]matcher{}, r.failed...)
	out = append(out, r.succeeded...)
	return append(out, r.finished...)
}

func (r *matcherRule) TopLevelFields() []string {
	set := map[string]bool{}
	for _, p := range r.Paths() {
		set[p[0]] = true
	}
	out := make([]string, 0, len(set))
	for f := range set {
		out = append(out, f)
	}
	return out
}

func (r *matcherRule) Paths() [][]string {
	var out [][]string
	conds := false
	for _, m := range r.all() {
		if m.path != nil {
			out = append(out, m.path)
		} else {
			conds = true
		}
	}
	if conds {
		out = append(out, []string{"status", "conditions"})
	}
	if r.finishTime != nil {
		out = append(out, r.finishTime)
	}
	return out
}

// fieldPaths lists the field matchers' paths (not the finish time).
func (r *matcherRule) fieldPaths() [][]string {
	var out [][]string
	for _, m := range r.all() {
		if m.path != nil {
			out = append(out, m.path)
		}
	}
	return out
}

func (r *matcherRule) CanSay(failed bool) bool {
	if failed {
		return len(r.failed) > 0 || len(r.finished) > 0
	}
	return len(r.succeeded) > 0
}

// toUnstructured returns obj's content as a map, converting typed objects.
func toUnstructured(obj runtime.Object) (map[string]interface{}, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return u.Object, nil
	}
	return runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
}

// parseTime parses an RFC 3339 string; what names the value in errors.
func parseTime(v interface{}, what string) (time.Time, error) {
	s, ok := v.(string)
	if !ok || s == "" {
		return time.Time{}, fmt.Errorf("%s is not a timestamp: %w", what, ErrNoFinishTime)
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s=%q is not RFC 3339: %w", what, s, ErrNoFinishTime)
	}
	return t, nil
}

// contains reports whether list holds s.
func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
