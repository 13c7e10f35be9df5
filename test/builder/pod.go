package builder

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// PodWrapper builds a core/v1 Pod.
type PodWrapper struct {
	// Pod is the object under construction.
	Pod corev1.Pod
}

// MakePod returns a Pod named name in namespace ns, phase Pending, restartPolicy
// Never, with one container "main" running image "busybox" with command ["true"].
func MakePod(name, ns string) *PodWrapper {
	return &PodWrapper{Pod: corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name:    "main",
				Image:   "busybox",
				Command: []string{"true"},
			}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}}
}

// Obj returns a deep copy of the Pod built so far.
func (w *PodWrapper) Obj() *corev1.Pod { return w.Pod.DeepCopy() }

// UID sets metadata.uid.
func (w *PodWrapper) UID(uid string) *PodWrapper {
	w.Pod.UID = types.UID(uid)
	return w
}

// Label adds a label.
func (w *PodWrapper) Label(k, v string) *PodWrapper {
	if w.Pod.Labels == nil {
		w.Pod.Labels = map[string]string{}
	}
	w.Pod.Labels[k] = v
	return w
}

// Annotation adds an annotation.
func (w *PodWrapper) Annotation(k, v string) *PodWrapper {
	if w.Pod.Annotations == nil {
		w.Pod.Annotations = map[string]string{}
	}
	w.Pod.Annotations[k] = v
	return w
}

// Finalizer adds a finalizer.
func (w *PodWrapper) Finalizer(f string) *PodWrapper {
	w.Pod.Finalizers = append(w.Pod.Finalizers, f)
	return w
}

// OwnedByJob makes the Job the pod's controller and copies the Job's
// selector labels (controller-uid, job-name) onto the pod.
func (w *PodWrapper) OwnedByJob(job *batchv1.Job) *PodWrapper {
	w.Pod.OwnerReferences = append(w.Pod.OwnerReferences, metav1.OwnerReference{
		APIVersion:         "batch/v1",
		Kind:               "Job",
		Name:               job.Name,
		UID:                job.UID,
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(true),
	})
	if job.Spec.Selector != nil {
		for k, v := range job.Spec.Selector.MatchLabels {
			w.Label(k, v)
		}
	}
	return w
}

// Phase sets status.phase.
func (w *PodWrapper) Phase(p corev1.PodPhase) *PodWrapper {
	w.Pod.Status.Phase = p
	return w
}

// Ready adds the Ready=True condition.
func (w *PodWrapper) Ready() *PodWrapper {
	w.Pod.Status.Conditions = append(w.Pod.Status.Conditions, corev1.PodCondition{
		Type: corev1.PodReady, Status: corev1.ConditionTrue,
	})
	return w
}

// NodeName sets spec.nodeName.
func (w *PodWrapper) NodeName(n string) *PodWrapper {
	w.Pod.Spec.NodeName = n
	return w
}

// Index sets the Indexed Job completion index annotation and label.
func (w *PodWrapper) Index(i string) *PodWrapper {
	w.Annotation(batchv1.JobCompletionIndexAnnotation, i)
	return w.Label(batchv1.JobCompletionIndexAnnotation, i)
}

// Terminated sets one terminated container status for container "main"
// with the given exit code and finish time, and the matching phase.
func (w *PodWrapper) Terminated(exitCode int32, finishedAt metav1.Time) *PodWrapper {
	reason := "Completed"
	w.Pod.Status.Phase = corev1.PodSucceeded
	if exitCode != 0 {
		reason = "Error"
		w.Pod.Status.Phase = corev1.PodFailed
	}
	w.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: "main",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: exitCode, Reason: reason, StartedAt: finishedAt, FinishedAt: finishedAt,
		}},
	}}
	return w
}

// DeletionTimestamp marks the pod as being deleted.
func (w *PodWrapper) DeletionTimestamp(t metav1.Time) *PodWrapper {
	w.Pod.DeletionTimestamp = &t
	return w
}

// CreationTimestamp sets metadata.creationTimestamp.
func (w *PodWrapper) CreationTimestamp(t metav1.Time) *PodWrapper {
	w.Pod.CreationTimestamp = t
	return w
}
