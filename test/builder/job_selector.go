package builder

import (
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Selector does what the apiserver does on create for a Job without
// manualSelector: sets metadata.uid to uid, spec.selector to
// batch.kubernetes.io/controller-uid=<uid>, and the template labels
// (controller-uid and job-name, in both the batch.kubernetes.io/ and the
// legacy unprefixed form). For unit tests with fake clients.
func (w *JobWrapper) Selector(uid string) *JobWrapper {
	w.Job.UID = types.UID(uid)
	w.Job.Spec.Selector = &metav1.LabelSelector{
		MatchLabels: map[string]string{batchv1.ControllerUidLabel: uid},
	}
	if w.Job.Spec.Template.Labels == nil {
		w.Job.Spec.Template.Labels = map[string]string{}
	}
	l := w.Job.Spec.Template.Labels
	l[batchv1.ControllerUidLabel] = uid
	l[batchv1.JobNameLabel] = w.Job.Name
	l["controller-uid"] = uid
	l["job-name"] = w.Job.Name
	return w
}

// PodReplacementPolicy sets spec.podReplacementPolicy.
func (w *JobWrapper) PodReplacementPolicy(p batchv1.PodReplacementPolicy) *JobWrapper {
	w.Job.Spec.PodReplacementPolicy = &p
	return w
}
