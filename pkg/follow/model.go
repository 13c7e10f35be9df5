package follow

import (
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Input is what Build turns into a State: the latest Job seen, whether it
// has been deleted since, and the pods and Warning events read with it.
type Input struct {
	// Job is the latest version of the followed Job seen. It stays set
	// after a deletion (Deleted tells).
	Job *batchv1.Job
	// Deleted is true once the Job is gone, or was replaced by another Job
	// of the same name.
	Deleted bool
	// Pods may include pods that are not the Job's: only those it controls
	// are counted.
	Pods []*corev1.Pod
	// Events may include any events of the namespace: only Warnings about
	// the Job or its pods are kept.
	Events []*corev1.Event
}

// Build computes the State of in.Job at now. It is a pure function.
//
// Steps: copy the spec and status counters; find the outcome from the
// Complete and Failed conditions (a Job that finished before it was
// deleted keeps its outcome); compute the elapsed time up to the end, or
// now; then the per-index phases of an Indexed Job, the Warnings, and,
// for a Failed Job, the failed pods that explain it (failedPods).
func Build(in Input, now time.Time) State {
	job := in.Job
	if job == nil {
		return State{}
	}
	s := State{
		Namespace:   job.Namespace,
		Name:        job.Name,
		UID:         job.UID,
		Indexed:     isIndexed(job),
		WorkQueue:   job.Spec.Completions == nil,
		Parallelism: deref(job.Spec.Parallelism, 1),
		Completions: deref(job.Spec.Completions, 0),
		Succeeded:   job.Status.Succeeded,
		Failed:      job.Status.Failed,
		Active:      job.Status.Active,
		Ready:       deref(job.Status.Ready, 0),
		Terminating: deref(job.Status.Terminating, 0),
		Suspended:   job.Spec.Suspend != nil && *job.Spec.Suspend,
		Deleting:    job.DeletionTimestamp != nil,
	}
	if job.Spec.ManagedBy != nil {
		s.ManagedBy = *job.Spec.ManagedBy
	}
	var end time.Time
	for _, c := range job.Status.Conditions {
		s.Conditions = append(s.Conditions, Condition{
			Type: string(c.Type), Status: string(c.Status), Reason: c.Reason, Message: c.Message,
			Since: c.LastTransitionTime.Time,
		})
		if c.Status != corev1.ConditionTrue || s.Outcome != Running {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			s.Outcome, s.Reason, s.Message, end = Complete, c.Reason, c.Message, c.LastTransitionTime.Time
		case batchv1.JobFailed:
			s.Outcome, s.Reason, s.Message, end = Failed, c.Reason, c.Message, c.LastTransitionTime.Time
		}
	}
	if s.Outcome == Complete && job.Status.CompletionTime != nil {
		end = job.Status.CompletionTime.Time
	}
	if in.Deleted && s.Outcome == Running {
		s.Outcome, s.Reason, s.Message = Deleted, "Deleted", "the Job was deleted before it finished"
		end = now
	}
	s.Started = job.CreationTimestamp.Time
	if job.Status.StartTime != nil {
		s.Started = job.Status.StartTime.Time
	}
	if end.IsZero() {
		end = now
	}
	if !s.Started.IsZero() && end.After(s.Started) {
		s.Elapsed = end.Sub(s.Started)
	}
	pods := podsOf(job, in.Pods)
	if s.Indexed {
		s.Indexes = indexPhases(job, pods)
	}
	s.Warnings = warningsOf(job, pods, in.Events)
	if s.Outcome == Failed {
		s.FailedPods, s.MoreFailedPods = failedPods(pods, MaxFailedPods)
	}
	return s
}

// podsOf returns the pods whose controller is job.
func podsOf(job *batchv1.Job, pods []*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range pods {
		if ref := metav1.GetControllerOf(p); ref != nil && ref.UID == job.UID {
			out = append(out, p)
		}
	}
	return out
}

// isIndexed reports whether the Job's completion mode is Indexed.
func isIndexed(job *batchv1.Job) bool {
	return job.Spec.CompletionMode != nil && *job.Spec.CompletionMode == batchv1.IndexedCompletion
}

// podActive reports whether a pod counts as active: neither finished nor
// being deleted.
func podActive(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
