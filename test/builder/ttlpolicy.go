package builder

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/apis/jobkeeper/v1alpha1"
)

// TTLPolicyWrapper builds a jobkeeper.dev/v1alpha1 TTLPolicy.
type TTLPolicyWrapper struct {
	// TTLPolicy is the object under construction.
	TTLPolicy v1alpha1.TTLPolicy
}

// MakeTTLPolicy returns a policy named name targeting batch/v1 Job, with
// no selectors, no outcome rule, no TTLs (set at least one), default
// propagation and dry-run off.
func MakeTTLPolicy(name string) *TTLPolicyWrapper {
	return &TTLPolicyWrapper{TTLPolicy: v1alpha1.TTLPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.TTLPolicyKind.Kind},
		ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1},
		Spec: v1alpha1.TTLPolicySpec{
			Target: v1alpha1.TargetKind{APIVersion: "batch/v1", Kind: "Job"},
		},
	}}
}

// Obj returns a deep copy of the policy built so far.
func (w *TTLPolicyWrapper) Obj() *v1alpha1.TTLPolicy { return w.TTLPolicy.DeepCopy() }

// Unstructured returns the policy as an unstructured object, for dynamic clients.
func (w *TTLPolicyWrapper) Unstructured() *unstructured.Unstructured {
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(w.Obj())
	if err != nil {
		panic(err)
	}
	return &unstructured.Unstructured{Object: content}
}

// UID sets metadata.uid.
func (w *TTLPolicyWrapper) UID(uid string) *TTLPolicyWrapper {
	w.TTLPolicy.UID = types.UID(uid)
	return w
}

// Target sets spec.target.
func (w *TTLPolicyWrapper) Target(apiVersion, kind string) *TTLPolicyWrapper {
	w.TTLPolicy.Spec.Target = v1alpha1.TargetKind{APIVersion: apiVersion, Kind: kind}
	return w
}

// TTLAfterSuccess sets spec.ttlSecondsAfterSuccess.
func (w *TTLPolicyWrapper) TTLAfterSuccess(s int32) *TTLPolicyWrapper {
	w.TTLPolicy.Spec.TTLSecondsAfterSuccess = ptr.To(s)
	return w
}

// TTLAfterFailure sets spec.ttlSecondsAfterFailure.
func (w *TTLPolicyWrapper) TTLAfterFailure(s int32) *TTLPolicyWrapper {
	w.TTLPolicy.Spec.TTLSecondsAfterFailure = ptr.To(s)
	return w
}

// Selector adds a matchLabels entry to spec.selector.
func (w *TTLPolicyWrapper) Selector(k, v string) *TTLPolicyWrapper {
	w.TTLPolicy.Spec.Selector = addMatchLabel(w.TTLPolicy.Spec.Selector, k, v)
	return w
}

// NamespaceSelector adds a matchLabels entry to spec.namespaceSelector.
func (w *TTLPolicyWrapper) NamespaceSelector(k, v string) *TTLPolicyWrapper {
	w.TTLPolicy.Spec.NamespaceSelector = addMatchLabel(w.TTLPolicy.Spec.NamespaceSelector, k, v)
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
func (w *TTLPolicyWrapper) IncludeJobPods() *TTLPolicyWrapper {
	w.TTLPolicy.Spec.IncludeJobPods = true
	return w
}

// Succeeded appends matchers to spec.outcome.succeeded.
func (w *TTLPolicyWrapper) Succeeded(ms ...v1alpha1.Matcher) *TTLPolicyWrapper {
	w.outcome().Succeeded = append(w.outcome().Succeeded, ms...)
	return w
}

// Failed appends matchers to spec.outcome.failed.
func (w *TTLPolicyWrapper) Failed(ms ...v1alpha1.Matcher) *TTLPolicyWrapper {
	w.outcome().Failed = append(w.outcome().Failed, ms...)
	return w
}

// Finished appends matchers to spec.outcome.finished.
func (w *TTLPolicyWrapper) Finished(ms ...v1alpha1.Matcher) *TTLPolicyWrapper {
	w.outcome().Finished = append(w.outcome().Finished, ms...)
	return w
}

// Conditions sets condition matchers of status True: succeeded types in
// spec.outcome.succeeded, failed types in spec.outcome.failed.
func (w *TTLPolicyWrapper) Conditions(succeeded, failed []string) *TTLPolicyWrapper {
	for _, t := range succeeded {
		w.Succeeded(Cond(t, "True"))
	}
	for _, t := range failed {
		w.Failed(Cond(t, "True"))
	}
	return w
}

// Phase sets field matchers on one path: succeeded values in
// spec.outcome.succeeded, failed values in spec.outcome.failed.
func (w *TTLPolicyWrapper) Phase(path string, succeeded, failed []string) *TTLPolicyWrapper {
	if len(succeeded) > 0 {
		w.Succeeded(Field(path, succeeded...))
	}
	if len(failed) > 0 {
		w.Failed(Field(path, failed...))
	}
	return w
}

// FinishTime sets spec.outcome.finishTime.field.
func (w *TTLPolicyWrapper) FinishTime(field string) *TTLPolicyWrapper {
	w.outcome().FinishTime = &v1alpha1.FinishTime{Field: field}
	return w
}

// OwnTTL sets spec.ownTTL.field.
func (w *TTLPolicyWrapper) OwnTTL(field string) *TTLPolicyWrapper {
	w.TTLPolicy.Spec.OwnTTL = &v1alpha1.OwnTTL{Field: field}
	return w
}

// KeepLast sets spec.keepLast's counts (negative: unset).
func (w *TTLPolicyWrapper) KeepLast(succeeded, failed int32) *TTLPolicyWrapper {
	k := w.keepLast()
	k.Succeeded, k.Failed = nil, nil
	if succeeded >= 0 {
		k.Succeeded = ptr.To(succeeded)
	}
	if failed >= 0 {
		k.Failed = ptr.To(failed)
	}
	return w
}

// GroupByLabel sets spec.keepLast.groupBy.labelKey.
func (w *TTLPolicyWrapper) GroupByLabel(key string) *TTLPolicyWrapper {
	w.keepLast().GroupBy = &v1alpha1.GroupBy{LabelKey: key}
	return w
}

// GroupByControllerOwner sets spec.keepLast.groupBy.controllerOwner.
func (w *TTLPolicyWrapper) GroupByControllerOwner() *TTLPolicyWrapper {
	w.keepLast().GroupBy = &v1alpha1.GroupBy{ControllerOwner: true}
	return w
}

func (w *TTLPolicyWrapper) keepLast() *v1alpha1.KeepLast {
	if w.TTLPolicy.Spec.KeepLast == nil {
		w.TTLPolicy.Spec.KeepLast = &v1alpha1.KeepLast{}
	}
	return w.TTLPolicy.Spec.KeepLast
}

func (w *TTLPolicyWrapper) outcome() *v1alpha1.OutcomeRule {
	if w.TTLPolicy.Spec.Outcome == nil {
		w.TTLPolicy.Spec.Outcome = &v1alpha1.OutcomeRule{}
	}
	return w.TTLPolicy.Spec.Outcome
}

// Cond is a condition matcher: type, status and optional reasons.
func Cond(condType, status string, reasons ...string) v1alpha1.Matcher {
	return v1alpha1.Matcher{Condition: &v1alpha1.ConditionMatcher{Type: condType, Status: status, Reasons: reasons}}
}

// Field is a field matcher: path and values.
func Field(path string, values ...string) v1alpha1.Matcher {
	return v1alpha1.Matcher{Field: &v1alpha1.FieldMatcher{Path: path, Values: values}}
}

// Propagation sets spec.propagationPolicy.
func (w *TTLPolicyWrapper) Propagation(p metav1.DeletionPropagation) *TTLPolicyWrapper {
	w.TTLPolicy.Spec.PropagationPolicy = &p
	return w
}

// DeletionEvents sets spec.deletionEvents.
func (w *TTLPolicyWrapper) DeletionEvents() *TTLPolicyWrapper {
	w.TTLPolicy.Spec.DeletionEvents = true
	return w
}

// DryRun sets spec.dryRun.
func (w *TTLPolicyWrapper) DryRun() *TTLPolicyWrapper {
	w.TTLPolicy.Spec.DryRun = true
	return w
}
