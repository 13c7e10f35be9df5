package builder

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// JobWrapper builds a batch/v1 Job.
type JobWrapper struct {
	// Job is the object under construction.
	Job batchv1.Job
}

// MakeJob returns a Job named name in namespace ns with parallelism 1,
// completions 1, NonIndexed, restartPolicy Never, backoffLimit 6 (the
// apiserver default) and one container "main" running image "busybox" with
// command ["true"].
func MakeJob(name, ns string) *JobWrapper {
	return &JobWrapper{Job: batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: batchv1.JobSpec{
			Parallelism:    ptr.To[int32](1),
			Completions:    ptr.To[int32](1),
			BackoffLimit:   ptr.To[int32](6),
			CompletionMode: ptr.To(batchv1.NonIndexedCompletion),
			Template: corev1.PodTemplateSpec{
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{
						Name:    "main",
						Image:   "busybox",
						Command: []string{"true"},
					}},
				},
			},
		},
	}}
}

// Obj returns a deep copy of the Job built so far.
func (w *JobWrapper) Obj() *batchv1.Job { return w.Job.DeepCopy() }

// Parallelism sets spec.parallelism.
func (w *JobWrapper) Parallelism(p int32) *JobWrapper {
	w.Job.Spec.Parallelism = ptr.To(p)
	return w
}

// Completions sets spec.completions.
func (w *JobWrapper) Completions(c int32) *JobWrapper {
	w.Job.Spec.Completions = ptr.To(c)
	return w
}

// NoCompletions unsets spec.completions (work-queue semantics).
func (w *JobWrapper) NoCompletions() *JobWrapper {
	w.Job.Spec.Completions = nil
	return w
}

// Indexed sets completionMode Indexed.
func (w *JobWrapper) Indexed() *JobWrapper {
	w.Job.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
	return w
}

// BackoffLimit sets spec.backoffLimit.
func (w *JobWrapper) BackoffLimit(n int32) *JobWrapper {
	w.Job.Spec.BackoffLimit = ptr.To(n)
	return w
}

// ActiveDeadlineSeconds sets spec.activeDeadlineSeconds.
func (w *JobWrapper) ActiveDeadlineSeconds(s int64) *JobWrapper {
	w.Job.Spec.ActiveDeadlineSeconds = ptr.To(s)
	return w
}

// TTLSecondsAfterFinished sets spec.ttlSecondsAfterFinished.
func (w *JobWrapper) TTLSecondsAfterFinished(s int32) *JobWrapper {
	w.Job.Spec.TTLSecondsAfterFinished = ptr.To(s)
	return w
}

// Suspend sets spec.suspend.
func (w *JobWrapper) Suspend(s bool) *JobWrapper {
	w.Job.Spec.Suspend = ptr.To(s)
	return w
}

// ManagedBy sets spec.managedBy.
func (w *JobWrapper) ManagedBy(m string) *JobWrapper {
	w.Job.Spec.ManagedBy = ptr.To(m)
	return w
}

// RestartPolicy sets the pod template's restartPolicy.
func (w *JobWrapper) RestartPolicy(p corev1.RestartPolicy) *JobWrapper {
	w.Job.Spec.Template.Spec.RestartPolicy = p
	return w
}

// Command sets the command of the first container.
func (w *JobWrapper) Command(cmd ...string) *JobWrapper {
	w.Job.Spec.Template.Spec.Containers[0].Command = cmd
	return w
}

// Label adds a label to the Job.
func (w *JobWrapper) Label(k, v string) *JobWrapper {
	if w.Job.Labels == nil {
		w.Job.Labels = map[string]string{}
	}
	w.Job.Labels[k] = v
	return w
}

// Annotation adds an annotation to the Job.
func (w *JobWrapper) Annotation(k, v string) *JobWrapper {
	if w.Job.Annotations == nil {
		w.Job.Annotations = map[string]string{}
	}
	w.Job.Annotations[k] = v
	return w
}

// PodAnnotation adds an annotation to the pod template.
func (w *JobWrapper) PodAnnotation(k, v string) *JobWrapper {
	if w.Job.Spec.Template.Annotations == nil {
		w.Job.Spec.Template.Annotations = map[string]string{}
	}
	w.Job.Spec.Template.Annotations[k] = v
	return w
}

// UID sets metadata.uid (for unit tests with fake clients).
func (w *JobWrapper) UID(uid string) *JobWrapper {
	w.Job.UID = types.UID(uid)
	return w
}

// Condition appends a status condition with status True.
func (w *JobWrapper) Condition(t batchv1.JobConditionType, reason string, at metav1.Time) *JobWrapper {
	w.Job.Status.Conditions = append(w.Job.Status.Conditions, batchv1.JobCondition{
		Type: t, Status: corev1.ConditionTrue, Reason: reason,
		LastProbeTime: at, LastTransitionTime: at,
	})
	return w
}

// SucceededStatus is the status of a one-pod Job that started at start and
// whose pod succeeded at at, as the Job controller leaves it: both counters
// of pods in flight zero, SuccessCriteriaMet and Complete with reason
// CompletionsReached.
func SucceededStatus(start, at metav1.Time) batchv1.JobStatus {
	return batchv1.JobStatus{
		StartTime: &start, CompletionTime: &at, Succeeded: 1,
		Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0),
		Conditions: []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonCompletionsReached, LastProbeTime: at, LastTransitionTime: at},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonCompletionsReached, LastProbeTime: at, LastTransitionTime: at},
		},
	}
}

// Status replaces the whole status.
func (w *JobWrapper) Status(s batchv1.JobStatus) *JobWrapper {
	w.Job.Status = s
	return w
}
