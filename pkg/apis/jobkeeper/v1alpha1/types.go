package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types and reasons written to TTLPolicy status.
const (
	// PolicyReady is True when the controller understood the policy and is
	// applying it.
	PolicyReady = "Ready"
	// PolicyWarning is True when the policy is applied but part of it can
	// never take effect (for example a failure TTL with no failure matcher).
	// Its message says which part and why.
	PolicyWarning = "Warning"

	// ReasonReady: the policy is valid and applied.
	ReasonReady = "Ready"
	// ReasonUnknownKind: the target apiVersion/kind is not served by the
	// cluster (for example its CRD is not installed, or was deleted).
	ReasonUnknownKind = "UnknownKind"
	// ReasonMissingOutcomeRule: the target kind has no built-in rule and the
	// policy has no spec.outcome.
	ReasonMissingOutcomeRule = "MissingOutcomeRule"
	// ReasonFieldPathNotFound: a field path of the policy does not exist in
	// the target kind's schema.
	ReasonFieldPathNotFound = "FieldPathNotFound"
	// ReasonFieldPathIntoList: a field path crosses a list, which a path
	// cannot index.
	ReasonFieldPathIntoList = "FieldPathIntoList"
	// ReasonInvalidSelector: a label selector could not be parsed.
	ReasonInvalidSelector = "InvalidSelector"
	// ReasonNotNamespaced: the target kind is cluster-scoped.
	ReasonNotNamespaced = "NotNamespaced"
	// ReasonInvalidPolicy: the policy breaks a rule the CRD schema could not
	// express; the message names the field.
	ReasonInvalidPolicy = "InvalidPolicy"

	// WarningNeverMatches (reason of the Warning condition): a TTL or a
	// history limit can never apply, for example a failure TTL while no
	// matcher can say "failed".
	WarningNeverMatches = "NeverMatches"
	// WarningFieldNeverSet: objects are matched, but none of them has a value
	// at a field path the outcome rule reads (a mistyped path on a kind whose
	// schema keeps unknown fields).
	WarningFieldNeverSet = "FieldNeverSet"
)

// TTLAnnotation is the annotation with which a single object (a Pod, or an
// object of any kind a TTLPolicy targets) sets its own TTL, in whole seconds
// after it finished. It wins over every policy and over an own TTL field.
const TTLAnnotation = "jobkeeper.dev/ttl-seconds-after-finished"

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TTLPolicy gives finished objects of one kind a time to live and a history
// limit: once an object it selects has finished, the TTL-after-finished
// controller deletes it ttlSecondsAfterSuccess or ttlSecondsAfterFailure
// seconds later, or as soon as it is older than the last keepLast finished
// objects of its group, whichever comes first.
type TTLPolicy struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec says which objects the policy applies to and when they expire.
	Spec TTLPolicySpec `json:"spec"`
	// Status is written by the controller.
	Status TTLPolicyStatus `json:"status,omitempty"`
}

// TTLPolicySpec is the desired behaviour of a TTLPolicy.
type TTLPolicySpec struct {
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
	// Outcome says how to read "finished", "succeeded", "failed" and the
	// finish time from an object of the target kind. Optional for batch/v1
	// Job and v1 Pod, which have built-in rules; required for every other
	// kind.
	// +optional
	Outcome *OutcomeRule `json:"outcome,omitempty"`
	// OwnTTL reads the object's own TTL from one of its fields (for example
	// a JobSet's spec.ttlSecondsAfterFinished). When the object sets it, it
	// wins over this and every other policy's TTLs, as the
	// jobkeeper.dev/ttl-seconds-after-finished annotation does.
	// +optional
	OwnTTL *OwnTTL `json:"ownTTL,omitempty"`
	// TTLSecondsAfterSuccess is how long a succeeded object is kept. Unset:
	// the policy does not delete succeeded objects by age.
	// +optional
	TTLSecondsAfterSuccess *int32 `json:"ttlSecondsAfterSuccess,omitempty"`
	// TTLSecondsAfterFailure is how long a failed object is kept. Unset: the
	// policy does not delete failed objects by age.
	// +optional
	TTLSecondsAfterFailure *int32 `json:"ttlSecondsAfterFailure,omitempty"`
	// KeepLast is a history limit: only the newest finished objects of each
	// group are kept. An object goes when either its TTL or the history limit
	// says so.
	// +optional
	KeepLast *KeepLast `json:"keepLast,omitempty"`
	// PropagationPolicy of the delete call. Default Foreground.
	// +optional
	PropagationPolicy *metav1.DeletionPropagation `json:"propagationPolicy,omitempty"`
	// DryRun makes the policy report what it would delete (a TTLExpiredDryRun
	// event, status.wouldDelete and the metrics) instead of deleting. A
	// dry-run policy never changes what live policies do.
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

// OutcomeRule reads whether an object has finished, how, and when. Each list
// is any-of: the first matcher that matches decides. Failed is checked first,
// then Succeeded, then Finished; an object that matches only Finished has
// finished without succeeding and counts as failed.
type OutcomeRule struct {
	// Succeeded lists matchers any of which means the object succeeded.
	// +optional
	Succeeded []Matcher `json:"succeeded,omitempty"`
	// Failed lists matchers any of which means the object failed.
	// +optional
	Failed []Matcher `json:"failed,omitempty"`
	// Finished lists matchers any of which means the object finished, without
	// saying how; such an object counts as failed.
	// +optional
	Finished []Matcher `json:"finished,omitempty"`
	// FinishTime says where the finish time is. Unset, or when its field is
	// absent from the object: the lastTransitionTime of the condition that
	// matched. When no condition matched and no field is readable, the finish
	// time is unreadable: the object is kept and counted in
	// status.unreadableFinishTime.
	// +optional
	FinishTime *FinishTime `json:"finishTime,omitempty"`
}

// Matcher matches one condition or one field. Exactly one of Condition and
// Field is set.
type Matcher struct {
	// Condition matches an entry of status.conditions.
	// +optional
	Condition *ConditionMatcher `json:"condition,omitempty"`
	// Field matches a string field against a list of values.
	// +optional
	Field *FieldMatcher `json:"field,omitempty"`
}

// ConditionMatcher matches an entry of status.conditions by type, status
// and, optionally, reason.
type ConditionMatcher struct {
	// Type is the condition type, e.g. "Succeeded".
	Type string `json:"type"`
	// Status is "True", "False" or "Unknown". Default "True".
	// +optional
	Status string `json:"status,omitempty"`
	// Reasons, when set, restrict the match to conditions whose reason is one
	// of them.
	// +optional
	Reasons []string `json:"reasons,omitempty"`
}

// FieldMatcher matches when the string at Path is one of Values.
type FieldMatcher struct {
	// Path is a dot-separated path without a leading dot, e.g.
	// "status.phase". It cannot cross a list.
	Path string `json:"path"`
	// Values lists the values that match.
	Values []string `json:"values"`
}

// FinishTime points at a field holding an RFC 3339 timestamp.
type FinishTime struct {
	// Field is a dot-separated path, e.g. "status.completionTime". When the
	// object has it but it is not an RFC 3339 timestamp, the finish time is
	// unreadable (no fallback).
	Field string `json:"field"`
}

// OwnTTL points at an object's own TTL field.
type OwnTTL struct {
	// Field is a dot-separated path to an integer number of seconds after the
	// object finished, e.g. "spec.ttlSecondsAfterFinished".
	Field string `json:"field"`
}

// KeepLast keeps only the newest finished objects of each group, by finish
// time (ties broken by name).
type KeepLast struct {
	// Succeeded is how many succeeded objects each group keeps. Unset: no
	// limit.
	// +optional
	Succeeded *int32 `json:"succeeded,omitempty"`
	// Failed is how many failed objects each group keeps. Unset: no limit.
	// +optional
	Failed *int32 `json:"failed,omitempty"`
	// GroupBy says how objects are grouped. Unset: one group per namespace.
	// +optional
	GroupBy *GroupBy `json:"groupBy,omitempty"`
}

// GroupBy groups objects within a namespace. At most one field is set.
type GroupBy struct {
	// LabelKey groups objects by the value of this label (for example
	// "tekton.dev/pipeline"). Objects without the label have no history
	// limit.
	// +optional
	LabelKey string `json:"labelKey,omitempty"`
	// ControllerOwner groups objects by their controller owner reference (for
	// example the CronJob of a Job). Objects without one have no history
	// limit.
	// +optional
	ControllerOwner bool `json:"controllerOwner,omitempty"`
}

// TTLPolicyStatus is what the controller observed.
type TTLPolicyStatus struct {
	// ObservedGeneration is the generation the status refers to.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready, and Warning when part of the policy can never apply.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Target is the target as "Kind.group" (or "Kind" for the core group),
	// for printing.
	// +optional
	Target string `json:"target,omitempty"`
	// Matched is how many objects the policy selects right now.
	// +optional
	Matched int32 `json:"matched"`
	// Finished is how many of them have finished.
	// +optional
	Finished int32 `json:"finished"`
	// NoApplicableTTL is how many finished objects nothing will delete: no
	// TTL applies to their outcome and no history limit covers them.
	// +optional
	NoApplicableTTL int32 `json:"noApplicableTTL"`
	// UnreadableFinishTime is how many objects have finished but have no
	// readable finish time; they are kept.
	// +optional
	UnreadableFinishTime int32 `json:"unreadableFinishTime"`
	// Deleted counts the objects this policy deleted, over its lifetime.
	// +optional
	Deleted int64 `json:"deleted"`
	// WouldDelete counts the objects this dry-run policy would have deleted,
	// over its lifetime.
	// +optional
	WouldDelete int64 `json:"wouldDelete"`
	// NextExpiry is when the next selected object expires.
	// +optional
	NextExpiry *metav1.Time `json:"nextExpiry,omitempty"`
	// LastDeletionTime is when the policy last deleted (or, in dry run, would
	// have deleted) an object.
	// +optional
	LastDeletionTime *metav1.Time `json:"lastDeletionTime,omitempty"`
	// LastError is the last error met while applying the policy (a failed
	// delete, an unreadable object), or empty.
	// +optional
	LastError string `json:"lastError,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TTLPolicyList is a list of TTLPolicy.
type TTLPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the policies.
	Items []TTLPolicy `json:"items"`
}
