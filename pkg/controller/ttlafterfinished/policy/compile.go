package policy

import (
	"fmt"
	"math"
	"sort"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"jobkeeper.dev/jobkeeper/pkg/apis/jobkeeper/v1alpha1"
)

var (
	// JobGVK and PodGVK are the kinds with built-in rules.
	JobGVK = batchv1.SchemeGroupVersion.WithKind("Job")
	PodGVK = corev1.SchemeGroupVersion.WithKind("Pod")
)

// Policy is a TTLPolicy compiled into what evaluation needs.
type Policy struct {
	// Name, UID and Generation identify the policy version compiled.
	Name       string
	UID        types.UID
	Generation int64
	// GVK is the target kind; GVR its resource (set when the kind resolved).
	GVK schema.GroupVersionKind
	GVR schema.GroupVersionResource
	// namespaceSelector and selector filter objects; never nil once ready.
	namespaceSelector, selector labels.Selector
	// HasNamespaceSelector is true when namespace labels must be read.
	HasNamespaceSelector bool
	// includeJobPods selects Pods controlled by a Job.
	includeJobPods bool
	// Rule reads outcome and finish time.
	Rule Rule
	// ownTTL is the path of the object's own TTL field, or nil.
	ownTTL []string
	// ttlSuccess and ttlFailure are in seconds; nil means no TTL.
	ttlSuccess, ttlFailure *int32
	// keepSucceeded and keepFailed are history limits; nil means none.
	keepSucceeded, keepFailed *int32
	// groupLabel and groupByOwner say how history limits group objects.
	groupLabel   string
	groupByOwner bool
	// Propagation of the delete call.
	Propagation metav1.DeletionPropagation
	// DryRun reports instead of deleting.
	DryRun bool
	// Events records an event on each deletion.
	Events bool
	// Ready is false when the policy cannot be applied; Reason and Message
	// then say why (they go to the Ready condition).
	Ready           bool
	Reason, Message string
	// Warnings are parts of the policy that can never apply, as
	// "field: why" sentences.
	Warnings []string
}

// TTLFor returns the policy's TTL for an outcome, or nil.
func (p *Policy) TTLFor(failed bool) *int32 {
	if failed {
		return p.ttlFailure
	}
	return p.ttlSuccess
}

// KeepFor returns the policy's history limit for an outcome, or nil.
func (p *Policy) KeepFor(failed bool) *int32 {
	if failed {
		return p.keepFailed
	}
	return p.keepSucceeded
}

// HasHistoryLimit reports whether the policy has a keepLast.
func (p *Policy) HasHistoryLimit() bool { return p.keepSucceeded != nil || p.keepFailed != nil }

// Matches reports whether the policy selects an object, given the labels of
// its namespace and whether a Job controls it.
func (p *Policy) Matches(obj metav1.Object, nsLabels labels.Set, jobPod bool) bool {
	if jobPod && !p.includeJobPods {
		return false
	}
	if p.HasNamespaceSelector && !p.namespaceSelector.Matches(nsLabels) {
		return false
	}
	return p.selector.Matches(labels.Set(obj.GetLabels()))
}

// Group returns the history-limit group of an object within its namespace,
// and false when the object has no group (no label, or no controller).
func (p *Policy) Group(obj metav1.Object) (string, bool) {
	switch {
	case p.groupLabel != "":
		v, ok := obj.GetLabels()[p.groupLabel]
		return v, ok
	case p.groupByOwner:
		ref := metav1.GetControllerOfNoCopy(obj)
		if ref == nil {
			return "", false
		}
		return string(ref.UID), true
	}
	return "", true
}

// OwnTTL reads the object's own TTL field. ok is false when the policy
// declares none or the object does not set it; err is set when it is set
// but is not a number of seconds in [0, 2147483647].
func (p *Policy) OwnTTL(obj runtime.Object) (ttl int32, ok bool, err error) {
	if p.ownTTL == nil {
		return 0, false, nil
	}
	content, err := toUnstructured(obj)
	if err != nil {
		return 0, false, err
	}
	v, found, _ := unstructured.NestedFieldNoCopy(content, p.ownTTL...)
	if !found || v == nil {
		return 0, false, nil
	}
	var n int64
	switch x := v.(type) {
	case int64:
		n = x
	case int32:
		n = int64(x)
	case int:
		n = int64(x)
	case float64:
		if x != math.Trunc(x) {
			n = -1
		} else {
			n = int64(x)
		}
	default:
		n = -1
	}
	if n < 0 || n > math.MaxInt32 {
		return 0, true, fmt.Errorf("%s=%v is not a number of seconds in [0, 2147483647]", strings.Join(p.ownTTL, "."), v)
	}
	return int32(n), true, nil
}

// OwnTTLTopLevelField is the top-level field of the own TTL path, or "".
func (p *Policy) OwnTTLTopLevelField() string {
	if p.ownTTL == nil {
		return ""
	}
	return p.ownTTL[0]
}

// TargetString is the target as "Kind.group", or "Kind" for the core group.
func (p *Policy) TargetString() string {
	if p.GVK.Group == "" {
		return p.GVK.Kind
	}
	return p.GVK.Kind + "." + p.GVK.Group
}

// notReady marks the policy unusable with a reason and message.
func (p *Policy) notReady(reason, format string, args ...interface{}) *Policy {
	p.Ready, p.Reason, p.Message = false, reason, fmt.Sprintf(format, args...)
	return p
}

// Compile turns a TTLPolicy into a Policy, resolving the target kind with
// mapper. Problems only the controller can detect make the result not ready;
// they are never returned as errors, so one bad policy cannot stop the
// others.
func Compile(pol *v1alpha1.TTLPolicy, mapper meta.RESTMapper) *Policy {
	spec := &pol.Spec
	p := &Policy{
		Name:        pol.Name,
		UID:         pol.UID,
		Generation:  pol.Generation,
		ttlSuccess:  spec.TTLSecondsAfterSuccess,
		ttlFailure:  spec.TTLSecondsAfterFailure,
		Propagation: metav1.DeletePropagationForeground,
		DryRun:      spec.DryRun,
		Events:      spec.DeletionEvents,

		includeJobPods: spec.IncludeJobPods,
	}
	if spec.PropagationPolicy != nil {
		p.Propagation = *spec.PropagationPolicy
	}
	gv, err := schema.ParseGroupVersion(spec.Target.APIVersion)
	if err != nil {
		return p.notReady(v1alpha1.ReasonUnknownKind, "spec.target.apiVersion: %v", err)
	}
	p.GVK = gv.WithKind(spec.Target.Kind)
	mapping, err := ResolveKind(mapper, p.GVK)
	if err != nil {
		return p.notReady(v1alpha1.ReasonUnknownKind, "spec.target: %s %s is not served by the cluster: %v", spec.Target.APIVersion, spec.Target.Kind, err)
	}
	p.GVR = mapping.Resource
	if mapping.Scope.Name() != meta.RESTScopeNameNamespace {
		return p.notReady(v1alpha1.ReasonNotNamespaced, "spec.target: %s is cluster-scoped; only namespaced kinds can be cleaned up", spec.Target.Kind)
	}
	if p.namespaceSelector, err = selectorOrEverything(spec.NamespaceSelector); err != nil {
		return p.notReady(v1alpha1.ReasonInvalidSelector, "spec.namespaceSelector: %v", err)
	}
	p.HasNamespaceSelector = spec.NamespaceSelector != nil
	if p.selector, err = selectorOrEverything(spec.Selector); err != nil {
		return p.notReady(v1alpha1.ReasonInvalidSelector, "spec.selector: %v", err)
	}
	if spec.TTLSecondsAfterSuccess == nil && spec.TTLSecondsAfterFailure == nil && spec.KeepLast == nil && spec.OwnTTL == nil {
		return p.notReady(v1alpha1.ReasonInvalidPolicy, "spec: set at least one of ttlSecondsAfterSuccess, ttlSecondsAfterFailure, keepLast and ownTTL")
	}
	if o := spec.Outcome; o != nil {
		r, msg := compileOutcome(o)
		if msg != "" {
			return p.notReady(v1alpha1.ReasonInvalidPolicy, "%s", msg)
		}
		p.Rule = r
	} else {
		switch p.GVK {
		case JobGVK:
			p.Rule = JobRule
		case PodGVK:
			p.Rule = PodRule
		default:
			return p.notReady(v1alpha1.ReasonMissingOutcomeRule, "spec.outcome is required for %s %s: only batch/v1 Job and v1 Pod have built-in rules", spec.Target.APIVersion, spec.Target.Kind)
		}
	}
	if spec.OwnTTL != nil {
		if p.ownTTL, err = splitPath(spec.OwnTTL.Field); err != nil {
			return p.notReady(v1alpha1.ReasonInvalidPolicy, "spec.ownTTL.field: %v", err)
		}
	}
	if k := spec.KeepLast; k != nil {
		p.keepSucceeded, p.keepFailed = k.Succeeded, k.Failed
		if g := k.GroupBy; g != nil {
			if g.LabelKey != "" && g.ControllerOwner {
				return p.notReady(v1alpha1.ReasonInvalidPolicy, "spec.keepLast.groupBy: set at most one of labelKey and controllerOwner")
			}
			p.groupLabel, p.groupByOwner = g.LabelKey, g.ControllerOwner
		}
	}
	p.Warnings = staticWarnings(p)
	p.Ready, p.Reason, p.Message = true, v1alpha1.ReasonReady, fmt.Sprintf("Applying to %s", p.GVR.GroupResource())
	return p
}

// compileOutcome compiles spec.outcome; msg names the offending field.
func compileOutcome(o *v1alpha1.OutcomeRule) (*matcherRule, string) {
	r := &matcherRule{}
	var err error
	if o.FinishTime != nil {
		if r.finishTime, err = splitPath(o.FinishTime.Field); err != nil {
			return nil, "spec.outcome.finishTime.field: " + err.Error()
		}
	}
	lists := []struct {
		name string
		in   []v1alpha1.Matcher
		out  *[]matcher
	}{{"failed", o.Failed, &r.failed}, {"succeeded", o.Succeeded, &r.succeeded}, {"finished", o.Finished, &r.finished}}
	for _, l := range lists {
		for i, m := range l.in {
			field := fmt.Sprintf("spec.outcome.%s[%d]", l.name, i)
			switch {
			case (m.Condition == nil) == (m.Field == nil):
				return nil, field + ": set exactly one of condition and field"
			case m.Condition != nil:
				status := m.Condition.Status
				if status == "" {
					status = string(metav1.ConditionTrue)
				}
				if status != string(metav1.ConditionTrue) && status != string(metav1.ConditionFalse) && status != string(metav1.ConditionUnknown) {
					return nil, fmt.Sprintf("%s.condition.status: %q is not True, False or Unknown", field, status)
				}
				*l.out = append(*l.out, matcher{condType: m.Condition.Type, condStatus: status, reasons: m.Condition.Reasons})
			default:
				path, err := splitPath(m.Field.Path)
				if err != nil {
					return nil, field + ".field.path: " + err.Error()
				}
				*l.out = append(*l.out, matcher{path: path, values: m.Field.Values})
			}
		}
	}
	if len(r.all()) == 0 {
		return nil, "spec.outcome: set at least one matcher in succeeded, failed or finished"
	}
	return r, ""
}

// staticWarnings lists the settings of a compiled policy that can never take
// effect.
func staticWarnings(p *Policy) []string {
	var w []string
	if p.ttlFailure != nil && !p.Rule.CanSay(true) {
		w = append(w, "spec.ttlSecondsAfterFailure never applies: no matcher in spec.outcome.failed or spec.outcome.finished can say an object failed")
	}
	if p.ttlSuccess != nil && !p.Rule.CanSay(false) {
		w = append(w, "spec.ttlSecondsAfterSuccess never applies: spec.outcome.succeeded has no matcher")
	}
	if p.keepFailed != nil && !p.Rule.CanSay(true) {
		w = append(w, "spec.keepLast.failed never applies: no matcher can say an object failed")
	}
	if p.keepSucceeded != nil && !p.Rule.CanSay(false) {
		w = append(w, "spec.keepLast.succeeded never applies: spec.outcome.succeeded has no matcher")
	}
	return w
}

// CheckSchema marks the policy not ready when one of its field paths does
// not exist in the target's schema, or crosses a list (nil schema: not
// checked).
func (p *Policy) CheckSchema(s map[string]interface{}) *Policy {
	if !p.Ready || s == nil {
		return p
	}
	paths := p.Rule.Paths()
	if p.ownTTL != nil {
		paths = append(paths, p.ownTTL)
	}
	for _, path := range paths {
		switch pathInSchema(s, path) {
		case pathMissing:
			return p.notReady(v1alpha1.ReasonFieldPathNotFound, "field %s does not exist in the schema of %s", strings.Join(path, "."), p.GVR.GroupResource())
		case pathIntoList:
			if len(path) == 2 && path[0] == "status" && path[1] == "conditions" {
				continue
			}
			return p.notReady(v1alpha1.ReasonFieldPathIntoList, "field %s crosses a list in the schema of %s; a path cannot index a list (use a condition matcher for status.conditions)", strings.Join(path, "."), p.GVR.GroupResource())
		}
	}
	return p
}

// FieldMatcherPaths lists the paths of the policy's field matchers.
func (p *Policy) FieldMatcherPaths() [][]string {
	if r, ok := p.Rule.(*matcherRule); ok {
		return r.fieldPaths()
	}
	return nil
}

// ResolveKind maps a kind to its resource, resetting a caching mapper once
// when the kind is unknown (it may have been installed since).
func ResolveKind(mapper meta.RESTMapper, gvk schema.GroupVersionKind) (*meta.RESTMapping, error) {
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

// splitPath splits a dot-separated field path, refusing empty segments with
// a hint for the common mistakes.
func splitPath(p string) ([]string, error) {
	switch {
	case p == "":
		return nil, fmt.Errorf("must not be empty")
	case strings.HasPrefix(p, "."):
		return nil, fmt.Errorf("%q: remove the leading '.'; paths are written like status.completionTime", p)
	case strings.ContainsAny(p, "[]"):
		return nil, fmt.Errorf("%q: a path cannot index a list", p)
	}
	parts := strings.Split(p, ".")
	for _, s := range parts {
		if s == "" {
			return nil, fmt.Errorf("%q has an empty segment", p)
		}
	}
	if parts[0] == "metadata" {
		return nil, fmt.Errorf("%q: metadata fields cannot be read", p)
	}
	return parts, nil
}

// SortByName orders policies by name.
func SortByName(ps []*Policy) {
	sort.Slice(ps, func(i, j int) bool { return ps[i].Name < ps[j].Name })
}
