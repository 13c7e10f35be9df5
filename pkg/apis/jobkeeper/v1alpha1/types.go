package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types and reasons written to CleanupPolicy status.
const (
	// PolicyReady is True when the controller understood the policy and is
	// applying it.
	PolicyReady = "Ready"

	// ReasonReady: the policy is valid and applied.
	ReasonReady = "Ready"
	// ReasonUnknownKind: the target apiVersion/kind is not served by the cluster.
	ReasonUnknownKind = "UnknownKind"
	// ReasonMissingCompletionRule: the target kind has no built-in rule and the
	// policy has no spec.completion.
	ReasonMissingCompletionRule = "MissingCompletionRule"
	// ReasonFieldPathNotFound: a field path of spec.completion does not exist
	// in the target kind's schema.
	ReasonFieldPathNotFound = "FieldPathNotFound"
	// ReasonInvalidSelector: a label selector could not be parsed.
	ReasonInvalidSelector = "InvalidSelector"
	// ReasonNotNamespaced: the target kind is cluster-scoped.
	ReasonNotNamespaced = "NotNamespaced"
)

// TTLAnnotation is the annotation with which a single object (a Pod, or an
// object of any kind a CleanupPolicy targets) sets its own TTL, in whole
// seconds after it finished. It wins over every policy.
const TTLAnnotation = "jobkeeper.dev/ttl-seconds-after-finished"

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// CleanupPolicy gives finished objects of one kind a time to live: once an
// object it selects has finished, the TTL-after-finished controller deletes it
// ttlSecondsAfterSuccess or ttlSecondsAfterFailure seconds later.
type CleanupPolicy struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec says which objects the policy applies to and when they expire.
	Spec CleanupPolicySpec `json:"spec"`
	// Status is written by the controller.
	Status CleanupPolicyStatus `json:"status,omitempty"`
}

// CleanupPolicySpec is the desired behaviour of a CleanupPolicy.
type CleanupPolicySpec struct {
	// Target names the kind of objects the policy applies to.
	Target TargetKind `json:"target"`
	// NamespaceSelector restricts the policy to namespaces whose labels match.
	// Unset matches every namespace.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	// Selector restricts the policy to objects whose labels match. Unset
	// matches every object.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
	// IncludeJobPods lets a policy that targets Pods select Pods controlled by
	// a Job. By default those are left to their Job's own TTL.
	// +optional
	IncludeJobPods bool `json:"includeJobPods,omitempty"`
	// Completion says how to read "succeeded", "failed" and the finish time
	// from an object of the target kind. Optional for batch/v1 Job and v1 Pod,
	// which have built-in rules; required for every other kind.
	// +optional
	Completion *CompletionRule `json:"completion,omitempty"`
	// TTLSecondsAfterSuccess is how long a succeeded object is kept. Unset:
	// the policy does not delete succeeded objects.
	// +optional
	TTLSecondsAfterSuccess *int32 `json:"ttlSecondsAfterSuccess,omitempty"`
	// TTLSecondsAfterFailure is how long a failed object is kept. Unset: the
	// policy does not delete failed objects.
	// +optional
	TTLSecondsAfterFailure *int32 `json:"ttlSecondsAfterFailure,omitempty"`
	// PropagationPolicy of the delete call. Default Foreground.
	// +optional
	PropagationPolicy *metav1.DeletionPropagation `json:"propagationPolicy,omitempty"`
	// DryRun makes the controller record a TTLExpiredDryRun event instead of
	// deleting.
	// +optional
	DryRun bool `json:"dryRun,omitempty"`
	// DeletionEvents records a TTLExpired event on each object the policy
	// deletes. Off by default: an event is one more API write per deletion
	// (the controller's --ttl-deletion-events turns them on for every
	// deletion). Deletions are always counted in the
	// ttl_after_finished_controller metrics.
	// +optional
	DeletionEvents bool `json:"deletionEvents,omitempty"`
}

// TargetKind is a group/version/kind.
type TargetKind struct {
	// APIVersion is "group/version", or "v1" for the core group.
	APIVersion string `json:"apiVersion"`
	// Kind is the kind, e.g. "Job".
	Kind string `json:"kind"`
}

// CompletionRule reads an object's outcome and finish time. Exactly one of
// Conditions and Phase is set.
type CompletionRule struct {
	// Conditions reads the outcome from status.conditions.
	// +optional
	Conditions *ConditionsRule `json:"conditions,omitempty"`
	// Phase reads the outcome from a string field.
	// +optional
	Phase *PhaseRule `json:"phase,omitempty"`
	// FinishTime says where the finish time is. Optional with Conditions
	// (default: the lastTransitionTime of the condition that matched);
	// required with Phase.
	// +optional
	FinishTime *FieldRef `json:"finishTime,omitempty"`
}

// ConditionsRule: an object has succeeded (failed) when it has a condition
// whose type is listed in Succeeded (Failed) with status "True". Failed is
// checked first.
type ConditionsRule struct {
	// Succeeded lists condition types that mean success.
	// +optional
	Succeeded []string `json:"succeeded,omitempty"`
	// Failed lists condition types that mean failure.
	// +optional
	Failed []string `json:"failed,omitempty"`
}

// PhaseRule: an object has succeeded (failed) when the string at Field is one
// of Succeeded (Failed).
type PhaseRule struct {
	// Field is a dot-separated path, e.g. "status.phase".
	Field string `json:"field"`
	// Succeeded lists values that mean success.
	// +optional
	Succeeded []string `json:"succeeded,omitempty"`
	// Failed lists values that mean failure.
	// +optional
	Failed []string `json:"failed,omitempty"`
}

// FieldRef points at a field holding an RFC 3339 timestamp.
type FieldRef struct {
	// Field is a dot-separated path, e.g. "status.completionTime".
	Field string `json:"field"`
}

// CleanupPolicyStatus is what the controller observed.
type CleanupPolicyStatus struct {
	// ObservedGeneration is the generation the status refers to.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// MatchedObjects is how many objects the policy selects right now.
	// +optional
	MatchedObjects int32 `json:"matchedObjects"`
	// DeletedObjects counts the objects this policy deleted (or, in dry-run,
	// would have deleted), over the policy's lifetime.
	// +optional
	DeletedObjects int64 `json:"deletedObjects"`
	// LastDeletionTime is when the policy last deleted an object.
	// +optional
	LastDeletionTime *metav1.Time `json:"lastDeletionTime,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// CleanupPolicyList is a list of CleanupPolicy.
type CleanupPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the policies.
	Items []CleanupPolicy `json:"items"`
}
