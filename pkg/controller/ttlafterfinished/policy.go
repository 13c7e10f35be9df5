package ttlafterfinished

import (
	"fmt"
	"sort"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"jobkeeper.dev/jobkeeper/pkg/apis/jobkeeper/v1alpha1"
)

var (
	// jobGVK and podGVK are the kinds with built-in completion rules.
	jobGVK = batchv1.SchemeGroupVersion.WithKind("Job")
	podGVK = corev1.SchemeGroupVersion.WithKind("Pod")
	// jobResource is the resource of Jobs.
	jobResource = batchv1.SchemeGroupVersion.WithResource("jobs")
)

// compiledPolicy is a CleanupPolicy parsed into what evaluation needs.
type compiledPolicy struct {
	// name, uid and generation identify the policy version compiled.
	name       string
	uid        types.UID
	generation int64
	// gvk is the target kind; gvr its resource (set when the kind resolved).
	gvk schema.GroupVersionKind
	gvr schema.GroupVersionResource
	// namespaceSelector and selector filter objects; never nil once ready.
	namespaceSelector, selector labels.Selector
	// hasNamespaceSelector is true when namespace labels must be read.
	hasNamespaceSelector bool
	// includeJobPods selects Pods controlled by a Job.
	includeJobPods bool
	// rule reads outcome and finish time.
	rule completionRule
	// ttlSuccess and ttlFailure are in seconds; nil means "keep".
	ttlSuccess, ttlFailure *int32
	// propagation of the delete call.
	propagation metav1.DeletionPropagation
	// dryRun reports instead of deleting.
	dryRun bool
	// events records an event on each deletion.
	events bool
	// ready is false when the policy cannot be applied; reason and message
	// then say why (they go to the Ready condition).
	ready           bool
	reason, message string
}

// ttlFor returns the TTL for an outcome, or nil.
func (p *compiledPolicy) ttlFor(failed bool) *int32 {
	if failed {
		return p.ttlFailure
	}
	return p.ttlSuccess
}

// matches reports whether the policy selects an object, given the labels of
// its namespace and whether a Job controls it.
func (p *compiledPolicy) matches(obj metav1.Object, nsLabels labels.Set, jobPod bool) bool {
	if jobPod && !p.includeJobPods {
		return false
	}
	if p.hasNamespaceSelector && !p.namespaceSelector.Matches(nsLabels) {
		return false
	}
	return p.selector.Matches(labels.Set(obj.GetLabels()))
}

// notReady marks the policy unusable with a reason and message.
func (p *compiledPolicy) notReady(reason, format string, args ...interface{}) *compiledPolicy {
	p.ready, p.reason, p.message = false, reason, fmt.Sprintf(format, args...)
	return p
}

// compilePolicy turns a CleanupPolicy into a compiledPolicy, resolving the
// target kind with mapper. Problems only the controller can detect make the
// result not ready; they are never returned as errors, so one bad policy
// cannot stop the others.
func compilePolicy(pol *v1alpha1.CleanupPolicy, mapper meta.RESTMapper) *compiledPolicy {
	spec := &pol.Spec
	p := &compiledPolicy{
		name:           pol.Name,
		uid:            pol.UID,
		generation:     pol.Generation,
		includeJobPods: spec.IncludeJobPods,
		ttlSuccess:     spec.TTLSecondsAfterSuccess,
		ttlFailure:     spec.TTLSecondsAfterFailure,
		propagation:    metav1.DeletePropagationForeground,
		dryRun:         spec.DryRun,
		events:         spec.DeletionEvents,
	}
	if spec.PropagationPolicy != nil {
		p.propagation = *spec.PropagationPolicy
	}
	gv, err := schema.ParseGroupVersion(spec.Target.APIVersion)
	if err != nil {
		return p.notReady(v1alpha1.ReasonUnknownKind, "spec.target.apiVersion: %v", err)
	}
	p.gvk = gv.WithKind(spec.Target.Kind)
	mapping, err := resolveKind(mapper, p.gvk)
	if err != nil {
		return p.notReady(v1alpha1.ReasonUnknownKind, "spec.target: %s %s is not served by the cluster: %v", spec.Target.APIVersion, spec.Target.Kind, err)
	}
	p.gvr = mapping.Resource
	if mapping.Scope.Name() != meta.RESTScopeNameNamespace {
		return p.notReady(v1alpha1.ReasonNotNamespaced, "spec.target: %s is cluster-scoped; only namespaced kinds can be cleaned up", spec.Target.Kind)
	}
	if p.namespaceSelector, err = selectorOrEverything(spec.NamespaceSelector); err != nil {
		return p.notReady(v1alpha1.ReasonInvalidSelector, "spec.namespaceSelector: %v", err)
	}
	p.hasNamespaceSelector = spec.NamespaceSelector != nil
	if p.selector, err = selectorOrEverything(spec.Selector); err != nil {
		return p.notReady(v1alpha1.ReasonInvalidSelector, "spec.selector: %v", err)
	}
	switch c := spec.Completion; {
	case c != nil && c.Conditions != nil:
		r := conditionsRule{succeeded: c.Conditions.Succeeded, failed: c.Conditions.Failed}
		if c.FinishTime != nil {
			r.finishTime = splitPath(c.FinishTime.Field)
		}
		p.rule = r
	case c != nil && c.Phase != nil:
		if c.FinishTime == nil {
			return p.notReady(v1alpha1.ReasonMissingCompletionRule, "spec.completion.finishTime is required with spec.completion.phase")
		}
		p.rule = phaseRule{
			field:      splitPath(c.Phase.Field),
			succeeded:  c.Phase.Succeeded,
			failed:     c.Phase.Failed,
			finishTime: splitPath(c.FinishTime.Field),
		}
	case p.gvk == jobGVK:
		p.rule = jobRule{}
	case p.gvk == podGVK:
		p.rule = podRule{}
	default:
		return p.notReady(v1alpha1.ReasonMissingCompletionRule, "spec.completion is required for %s %s: only batch/v1 Job and v1 Pod have built-in rules", spec.Target.APIVersion, spec.Target.Kind)
	}
	p.ready, p.reason, p.message = true, v1alpha1.ReasonReady, fmt.Sprintf("Applying to %s", p.gvr.GroupResource())
	return p
}

// checkFieldPaths marks the policy not ready when one of its rule's field
// paths does not exist in the target's schema (nil schema: not checked).
func (p *compiledPolicy) checkFieldPaths(s map[string]interface{}) *compiledPolicy {
	if !p.ready || s == nil {
		return p
	}
	for _, path := range fieldPaths(p.rule) {
		if !pathInSchema(s, path) {
			return p.notReady(v1alpha1.ReasonFieldPathNotFound, "spec.completion: field %s does not exist in the schema of %s", strings.Join(path, "."), p.gvr.GroupResource())
		}
	}
	return p
}

// resolveKind maps a kind to its resource, resetting a caching mapper once
// when the kind is unknown (it may have been installed since).
func resolveKind(mapper meta.RESTMapper, gvk schema.GroupVersionKind) (*meta.RESTMapping, error) {
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil && meta.IsNoMatchError(err) {
		if r, ok := mapper.(meta.ResettableRESTMapper); ok {
			r.Reset()
			m, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		}
	}
	return m, err
}

// selectorOrEverything parses a label selector; nil selects everything.
func selectorOrEverything(s *metav1.LabelSelector) (labels.Selector, error) {
	if s == nil {
		return labels.Everything(), nil
	}
	return metav1.LabelSelectorAsSelector(s)
}

// splitPath splits a dot-separated field path.
func splitPath(p string) []string { return strings.Split(p, ".") }

// candidate is a policy that selects an object and under which the object
// has finished.
type candidate struct {
	// policy is the selecting policy.
	policy *compiledPolicy
	// state is what its rule read.
	state finishState
}

// choose applies the precedence rule to the candidates for one object.
//
// Without an own TTL, only candidates with a TTL for the object's outcome
// count, and the one with the longest TTL wins (the object is kept as long as
// any matching policy wants it); equal TTLs go to the policy whose name sorts
// first. With an own TTL (the annotation), that TTL replaces the policy's,
// and the same order picks the policy whose rule, dry-run and propagation
// apply, a policy without a TTL for the outcome ranking last. It returns nil
// when nothing applies.
func choose(cands []candidate, own *int32) *verdict {
	var best *candidate
	rank := func(c *candidate) int64 {
		if t := c.policy.ttlFor(c.state.failed); t != nil {
			return int64(*t)
		}
		return -1
	}
	for i := range cands {
		c := &cands[i]
		if !c.state.finished || (own == nil && rank(c) < 0) {
			continue
		}
		if best == nil || rank(c) > rank(best) || (rank(c) == rank(best) && c.policy.name < best.policy.name) {
			best = c
		}
	}
	if best == nil {
		return nil
	}
	ttl := own
	if ttl == nil {
		ttl = best.policy.ttlFor(best.state.failed)
	}
	return &verdict{
		finishedAt:  best.state.at,
		ttl:         secondsToDuration(*ttl),
		policy:      best.policy.name,
		failed:      best.state.failed,
		dryRun:      best.policy.dryRun,
		events:      best.policy.events,
		propagation: best.policy.propagation,
	}
}

// sortPolicies orders policies by name.
func sortPolicies(ps []*compiledPolicy) {
	sort.Slice(ps, func(i, j int) bool { return ps[i].name < ps[j].name })
}
