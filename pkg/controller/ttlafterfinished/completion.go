package ttlafterfinished

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

// finishState is what a completion rule read from an object.
type finishState struct {
	// finished is true once the object succeeded or failed.
	finished bool
	// failed is true when it failed.
	failed bool
	// at is when it finished; set only when finished.
	at time.Time
}

// completionRule reads whether an object of one kind has finished, how, and
// when. A finished object whose finish time cannot be read is an error.
type completionRule interface {
	// read evaluates obj.
	read(obj runtime.Object) (finishState, error)
	// topLevelFields lists the top-level fields read, so trimmed informers
	// keep them.
	topLevelFields() []string
}

// errNoFinishTime is wrapped by rules when a finished object has no readable
// finish time.
var errNoFinishTime = errors.New("no readable finish time")

// jobRule is the built-in rule for batch/v1 Jobs: Complete=True or
// Failed=True, at the condition's lastTransitionTime.
type jobRule struct{}

func (jobRule) read(obj runtime.Object) (finishState, error) {
	job, ok := obj.(*batchv1.Job)
	if !ok {
		return finishState{}, fmt.Errorf("built-in Job rule got %T", obj)
	}
	c, failed, ok := jobFinishCondition(job)
	if !ok {
		return finishState{}, nil
	}
	if c.LastTransitionTime.IsZero() {
		return finishState{}, fmt.Errorf("condition %s: %w", c.Type, errNoFinishTime)
	}
	return finishState{finished: true, failed: failed, at: c.LastTransitionTime.Time}, nil
}

func (jobRule) topLevelFields() []string { return []string{"status"} }

// podRule is the built-in rule for v1 Pods: phase Succeeded or Failed, at
// podFinishTime.
type podRule struct{}

func (podRule) read(obj runtime.Object) (finishState, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return finishState{}, fmt.Errorf("built-in Pod rule got %T", obj)
	}
	finished, failed := podFinished(pod)
	if !finished {
		return finishState{}, nil
	}
	return finishState{finished: true, failed: failed, at: podFinishTime(pod)}, nil
}

func (podRule) topLevelFields() []string { return []string{"status"} }

// conditionsRule reads status.conditions: failed when a condition whose type
// is in failed has status "True", else succeeded likewise. The finish time is
// read from finishTime when set, else the matching condition's
// lastTransitionTime.
type conditionsRule struct {
	// succeeded and failed are condition types.
	succeeded, failed []string
	// finishTime is a field path, or nil.
	finishTime []string
}

func (r conditionsRule) read(obj runtime.Object) (finishState, error) {
	content, err := toUnstructured(obj)
	if err != nil {
		return finishState{}, err
	}
	conds, _, _ := unstructured.NestedSlice(content, "status", "conditions")
	find := func(types []string) map[string]interface{} {
		for _, c := range conds {
			m, ok := c.(map[string]interface{})
			if !ok || m["status"] != "True" {
				continue
			}
			t, _ := m["type"].(string)
			for _, want := range types {
				if t == want {
					return m
				}
			}
		}
		return nil
	}
	st := finishState{}
	var match map[string]interface{}
	if match = find(r.failed); match != nil {
		st.finished, st.failed = true, true
	} else if match = find(r.succeeded); match != nil {
		st.finished = true
	} else {
		return finishState{}, nil
	}
	if r.finishTime != nil {
		st.at, err = readTime(content, r.finishTime)
	} else {
		st.at, err = parseTime(match["lastTransitionTime"], "condition "+fmt.Sprint(match["type"])+" lastTransitionTime")
	}
	if err != nil {
		return finishState{}, err
	}
	return st, nil
}

func (r conditionsRule) topLevelFields() []string {
	f := []string{"status"}
	if r.finishTime != nil {
		f = append(f, r.finishTime[0])
	}
	return f
}

// phaseRule reads a string field: failed when it is one of failed, succeeded
// when it is one of succeeded. The finish time is read from finishTime.
type phaseRule struct {
	// field is the path of the phase.
	field []string
	// succeeded and failed are phase values.
	succeeded, failed []string
	// finishTime is the path of the finish time.
	finishTime []string
}

func (r phaseRule) read(obj runtime.Object) (finishState, error) {
	content, err := toUnstructured(obj)
	if err != nil {
		return finishState{}, err
	}
	phase, _, _ := unstructured.NestedString(content, r.field...)
	st := finishState{}
	switch {
	case phase == "":
		return st, nil
	case contains(r.failed, phase):
		st.finished, st.failed = true, true
	case contains(r.succeeded, phase):
		st.finished = true
	default:
		return st, nil
	}
	if st.at, err = readTime(content, r.finishTime); err != nil {
		return finishState{}, err
	}
	return st, nil
}

func (r phaseRule) topLevelFields() []string {
	return []string{r.field[0], r.finishTime[0]}
}

// toUnstructured returns obj's content as a map, converting typed objects.
func toUnstructured(obj runtime.Object) (map[string]interface{}, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return u.Object, nil
	}
	return runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
}

// readTime reads an RFC 3339 timestamp at path.
func readTime(content map[string]interface{}, path []string) (time.Time, error) {
	v, found, _ := unstructured.NestedFieldNoCopy(content, path...)
	if !found {
		return time.Time{}, fmt.Errorf("field %s is not set: %w", strings.Join(path, "."), errNoFinishTime)
	}
	return parseTime(v, "field "+strings.Join(path, "."))
}

// parseTime parses an RFC 3339 string; what names the value in errors.
func parseTime(v interface{}, what string) (time.Time, error) {
	s, ok := v.(string)
	if !ok || s == "" {
		return time.Time{}, fmt.Errorf("%s is not a timestamp: %w", what, errNoFinishTime)
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s=%q is not RFC 3339: %w", what, s, errNoFinishTime)
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
