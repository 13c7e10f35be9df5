package builder

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/apis/jobkeeper/v1alpha1"
)

// CleanupPolicyWrapper builds a jobkeeper.dev/v1alpha1 CleanupPolicy.
type CleanupPolicyWrapper struct {
	// CleanupPolicy is the object under construction.
	CleanupPolicy v1alpha1.CleanupPolicy
}

// MakeCleanupPolicy returns a policy named name targeting batch/v1 Job, with
// no selectors, no completion rule, no TTLs (set at least one), default
// propagation and dry-run off.
func MakeCleanupPolicy(name string) *CleanupPolicyWrapper {
	return &CleanupPolicyWrapper{CleanupPolicy: v1alpha1.CleanupPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.CleanupPolicyKind.Kind},
		ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1},
		Spec: v1alpha1.CleanupPolicySpec{
			Target: v1alpha1.TargetKind{APIVersion: "batch/v1", Kind: "Job"},
		},
	}}
}

// Obj returns a deep copy of the policy built so far.
func (w *CleanupPolicyWrapper) Obj() *v1alpha1.CleanupPolicy { return w.CleanupPolicy.DeepCopy() }

// Unstructured returns the policy as an unstructured object, for dynamic clients.
func (w *CleanupPolicyWrapper) Unstructured() *unstructured.Unstructured {
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(w.Obj())
	if err != nil {
		panic(err)
	}
	return &unstructured.Unstructured{Object: content}
}

// UID sets metadata.uid.
func (w *CleanupPolicyWrapper) UID(uid string) *CleanupPolicyWrapper {
	w.CleanupPolicy.UID = types.UID(uid)
	return w
}

// Target sets spec.target.
func (w *CleanupPolicyWrapper) Target(apiVersion, kind string) *CleanupPolicyWrapper {
	w.CleanupPolicy.Spec.Target = v1alpha1.TargetKind{APIVersion: apiVersion, Kind: kind}
	return w
}

// TTLAfterSuccess sets spec.ttlSecondsAfterSuccess.
func (w *CleanupPolicyWrapper) TTLAfterSuccess(s int32) *CleanupPolicyWrapper {
	w.CleanupPolicy.Spec.TTLSecondsAfterSuccess = ptr.To(s)
	return w
}

// TTLAfterFailure sets spec.ttlSecondsAfterFailure.
func (w *CleanupPolicyWrapper) TTLAfterFailure(s int32) *CleanupPolicyWrapper {
	w.CleanupPolicy.Spec.TTLSecondsAfterFailure = ptr.To(s)
	return w
}

// Selector adds a matchLabels entry to spec.selector.
func (w *CleanupPolicyWrapper) Selector(k, v string) *CleanupPolicyWrapper {
	w.CleanupPolicy.Spec.Selector = addMatchLabel(w.CleanupPolicy.Spec.Selector, k, v)
	return w
}

// NamespaceSelector adds a matchLabels entry to spec.namespaceSelector.
func (w *CleanupPolicyWrapper) NamespaceSelector(k, v string) *CleanupPolicyWrapper {
	w.CleanupPolicy.Spec.NamespaceSelector = addMatchLabel(w.CleanupPolicy.Spec.NamespaceSelector, k, v)
	return w
}

func addMatchLabel(s *metav1.LabelSelector, k, v string) *metav1.LabelSelector {
	if s == nil {
		s = &metav1.LabelSelector{}
	}
	if s.MatchLabels == nil {
		s.MatchLabels = map[string]string{}
	}
	s.MatchLabels[k] = v
	return s
}

// IncludeJobPods sets spec.includeJobPods.
func (w *CleanupPolicyWrapper) IncludeJobPods() *CleanupPolicyWrapper {
	w.CleanupPolicy.Spec.IncludeJobPods = true
	return w
}

// Conditions sets spec.completion.conditions.
func (w *CleanupPolicyWrapper) Conditions(succeeded, failed []string) *CleanupPolicyWrapper {
	w.completion().Conditions = &v1alpha1.ConditionsRule{Succeeded: succeeded, Failed: failed}
	return w
}

// Phase sets spec.completion.phase.
func (w *CleanupPolicyWrapper) Phase(field string, succeeded, failed []string) *CleanupPolicyWrapper {
	w.completion().Phase = &v1alpha1.PhaseRule{Field: field, Succeeded: succeeded, Failed: failed}
	return w
}

// FinishTime sets spec.completion.finishTime.
func (w *CleanupPolicyWrapper) FinishTime(field string) *CleanupPolicyWrapper {
	w.completion().FinishTime = &v1alpha1.FieldRef{Field: field}
	return w
}

func (w *CleanupPolicyWrapper) completion() *v1alpha1.CompletionRule {
	if w.CleanupPolicy.Spec.Completion == nil {
		w.CleanupPolicy.Spec.Completion = &v1alpha1.CompletionRule{}
	}
	return w.CleanupPolicy.Spec.Completion
}

// Propagation sets spec.propagationPolicy.
func (w *CleanupPolicyWrapper) Propagation(p metav1.DeletionPropagation) *CleanupPolicyWrapper {
	w.CleanupPolicy.Spec.PropagationPolicy = &p
	return w
}

// DeletionEvents sets spec.deletionEvents.
func (w *CleanupPolicyWrapper) DeletionEvents() *CleanupPolicyWrapper {
	w.CleanupPolicy.Spec.DeletionEvents = true
	return w
}

// DryRun sets spec.dryRun.
func (w *CleanupPolicyWrapper) DryRun() *CleanupPolicyWrapper {
	w.CleanupPolicy.Spec.DryRun = true
	return w
}
