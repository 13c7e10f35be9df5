package policy

import (
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/apis/jobkeeper/v1alpha1"
	"jobkeeper.dev/jobkeeper/test/builder"
)

var (
	widgetGVK       = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}
	widgetGVR       = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	clusterThingGVK = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "ClusterThing"}
	jobResource     = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}
	podResource     = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	t0              = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
)

// testMapper knows Jobs, Pods, Widgets and a cluster-scoped kind.
func testMapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	m.Add(JobGVK, meta.RESTScopeNamespace)
	m.Add(PodGVK, meta.RESTScopeNamespace)
	m.Add(widgetGVK, meta.RESTScopeNamespace)
	m.Add(clusterThingGVK, meta.RESTScopeRoot)
	return m
}

func TestCompilePolicy(t *testing.T) {
	cases := map[string]struct {
		policy     *v1alpha1.TTLPolicy
		wantReady  bool
		wantReason string
		wantGVR    schema.GroupVersionResource
	}{
		"job with built-in rule": {
			policy:     builder.MakeTTLPolicy("p").TTLAfterSuccess(1).Obj(),
			wantReady:  true,
			wantReason: v1alpha1.ReasonReady,
			wantGVR:    jobResource,
		},
		"pod with built-in rule": {
			policy:     builder.MakeTTLPolicy("p").Target("v1", "Pod").TTLAfterFailure(1).Obj(),
			wantReady:  true,
			wantReason: v1alpha1.ReasonReady,
			wantGVR:    podResource,
		},
		"custom kind with conditions": {
			policy:     builder.MakeTTLPolicy("p").Target("example.com/v1", "Widget").Conditions([]string{"Done"}, nil).TTLAfterSuccess(1).Obj(),
			wantReady:  true,
			wantReason: v1alpha1.ReasonReady,
			wantGVR:    widgetGVR,
		},
		"unknown kind": {
			policy:     builder.MakeTTLPolicy("p").Target("example.com/v1", "Gadget").Conditions([]string{"Done"}, nil).TTLAfterSuccess(1).Obj(),
			wantReason: v1alpha1.ReasonUnknownKind,
		},
		"unknown version": {
			policy:     builder.MakeTTLPolicy("p").Target("example.com/v2", "Widget").Conditions([]string{"Done"}, nil).TTLAfterSuccess(1).Obj(),
			wantReason: v1alpha1.ReasonUnknownKind,
		},
		"cluster-scoped kind": {
			policy:     builder.MakeTTLPolicy("p").Target("example.com/v1", "ClusterThing").Conditions([]string{"Done"}, nil).TTLAfterSuccess(1).Obj(),
			wantReason: v1alpha1.ReasonNotNamespaced,
		},
		"custom kind without rule": {
			policy:     builder.MakeTTLPolicy("p").Target("example.com/v1", "Widget").TTLAfterSuccess(1).Obj(),
			wantReason: v1alpha1.ReasonMissingOutcomeRule,
		},
		"field matcher without finish time is accepted (it falls back to nothing: unreadable)": {
			policy:     builder.MakeTTLPolicy("p").Target("example.com/v1", "Widget").Phase("status.phase", []string{"Done"}, nil).TTLAfterSuccess(1).Obj(),
			wantReady:  true,
			wantReason: v1alpha1.ReasonReady,
			wantGVR:    widgetGVR,
		},
		"matcher with both condition and field": {
			policy: builder.MakeTTLPolicy("p").Target("example.com/v1", "Widget").TTLAfterSuccess(1).
				Succeeded(v1alpha1.Matcher{Condition: &v1alpha1.ConditionMatcher{Type: "Done"}, Field: &v1alpha1.FieldMatcher{Path: "status.phase", Values: []string{"x"}}}).Obj(),
			wantReason: v1alpha1.ReasonInvalidPolicy,
		},
		"condition status that is not a status": {
			policy:     builder.MakeTTLPolicy("p").Target("example.com/v1", "Widget").TTLAfterSuccess(1).Succeeded(builder.Cond("Done", "Yes")).Obj(),
			wantReason: v1alpha1.ReasonInvalidPolicy,
		},
		"leading dot in a path": {
			policy:     builder.MakeTTLPolicy("p").Target("example.com/v1", "Widget").TTLAfterSuccess(1).Succeeded(builder.Field(".status.phase", "Done")).Obj(),
			wantReason: v1alpha1.ReasonInvalidPolicy,
		},
		"nothing to do": {
			policy:     builder.MakeTTLPolicy("p").Obj(),
			wantReason: v1alpha1.ReasonInvalidPolicy,
		},
		"history limit alone": {
			policy:     builder.MakeTTLPolicy("p").KeepLast(3, -1).GroupByControllerOwner().Obj(),
			wantReady:  true,
			wantReason: v1alpha1.ReasonReady,
			wantGVR:    jobResource,
		},
		"invalid selector": {
			policy: func() *v1alpha1.TTLPolicy {
				p := builder.MakeTTLPolicy("p").TTLAfterSuccess(1).Obj()
				p.Spec.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}}
				return p
			}(),
			wantReason: v1alpha1.ReasonInvalidSelector,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Compile(tc.policy, testMapper())
			if got.Ready != tc.wantReady || got.Reason != tc.wantReason {
				t.Errorf("ready=%v reason=%q (%s), want ready=%v reason=%q", got.Ready, got.Reason, got.Message, tc.wantReady, tc.wantReason)
			}
			if tc.wantReady && got.GVR != tc.wantGVR {
				t.Errorf("gvr %v, want %v", got.GVR, tc.wantGVR)
			}
		})
	}
}

func TestPolicyMatches(t *testing.T) {
	p := Compile(builder.MakeTTLPolicy("p").Target("v1", "Pod").TTLAfterSuccess(1).Selector("app", "x").NamespaceSelector("team", "a").Obj(), testMapper())
	withJobPods := Compile(builder.MakeTTLPolicy("p").Target("v1", "Pod").TTLAfterSuccess(1).IncludeJobPods().Obj(), testMapper())
	cases := map[string]struct {
		policy   *Policy
		labels   map[string]string
		nsLabels labels.Set
		jobPod   bool
		want     bool
	}{
		"both match":             {policy: p, labels: map[string]string{"app": "x"}, nsLabels: labels.Set{"team": "a"}, want: true},
		"label mismatch":         {policy: p, labels: map[string]string{"app": "y"}, nsLabels: labels.Set{"team": "a"}},
		"namespace mismatch":     {policy: p, labels: map[string]string{"app": "x"}, nsLabels: labels.Set{"team": "b"}},
		"namespace unknown":      {policy: p, labels: map[string]string{"app": "x"}},
		"job pod not included":   {policy: p, labels: map[string]string{"app": "x"}, nsLabels: labels.Set{"team": "a"}, jobPod: true},
		"job pod included":       {policy: withJobPods, jobPod: true, want: true},
		"no selectors match all": {policy: withJobPods, want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			obj := builder.MakePod("x", "ns").Obj()
			obj.Labels = tc.labels
			if got := tc.policy.Matches(obj, tc.nsLabels, tc.jobPod); got != tc.want {
				t.Errorf("matches %v, want %v", got, tc.want)
			}
		})
	}
}

func TestChoose(t *testing.T) {
	pol := func(name string, success, failure *int32) *Policy {
		return &Policy{Name: name, ttlSuccess: success, ttlFailure: failure, Propagation: metav1.DeletePropagationForeground}
	}
	ok := Finish{Finished: true, At: t0}
	bad := Finish{Finished: true, Failed: true, At: t0}
	unreadable := Finish{Finished: true, Err: ErrNoFinishTime}
	cases := map[string]struct {
		cands []Candidate
		want  *Verdict
	}{
		"none": {},
		"not finished": {
			cands: []Candidate{{Policy: pol("a", ptr.To[int32](5), nil), State: Finish{}}},
		},
		"unreadable finish time": {
			cands: []Candidate{{Policy: pol("a", ptr.To[int32](5), nil), State: unreadable}},
		},
		"success TTL for success": {
			cands: []Candidate{{Policy: pol("a", ptr.To[int32](5), ptr.To[int32](50)), State: ok}},
			want:  &Verdict{FinishedAt: t0, TTL: 5 * time.Second, Policy: "a", Propagation: metav1.DeletePropagationForeground},
		},
		"failure TTL for failure": {
			cands: []Candidate{{Policy: pol("a", ptr.To[int32](5), ptr.To[int32](50)), State: bad}},
			want:  &Verdict{FinishedAt: t0, TTL: 50 * time.Second, Policy: "a", Failed: true, Propagation: metav1.DeletePropagationForeground},
		},
		"no TTL for the outcome keeps the object": {
			cands: []Candidate{{Policy: pol("a", nil, ptr.To[int32](50)), State: ok}},
		},
		"longest TTL wins": {
			cands: []Candidate{
				{Policy: pol("a", ptr.To[int32](5), nil), State: ok},
				{Policy: pol("b", ptr.To[int32](60), nil), State: ok},
				{Policy: pol("c", ptr.To[int32](10), nil), State: ok},
			},
			want: &Verdict{FinishedAt: t0, TTL: 60 * time.Second, Policy: "b", Propagation: metav1.DeletePropagationForeground},
		},
		"tie goes to first name": {
			cands: []Candidate{
				{Policy: pol("z", ptr.To[int32](10), nil), State: ok},
				{Policy: pol("m", ptr.To[int32](10), nil), State: ok},
			},
			want: &Verdict{FinishedAt: t0, TTL: 10 * time.Second, Policy: "m", Propagation: metav1.DeletePropagationForeground},
		},
		"own TTL overrides a longer policy TTL": {
			cands: []Candidate{{Policy: pol("a", ptr.To[int32](500), nil), State: ok, Own: ptr.To[int32](1)}},
			want:  &Verdict{FinishedAt: t0, TTL: time.Second, Policy: "a", Propagation: metav1.DeletePropagationForeground},
		},
		"own TTL applies even without a policy TTL for the outcome": {
			cands: []Candidate{{Policy: pol("a", nil, ptr.To[int32](50)), State: ok, Own: ptr.To[int32](2)}},
			want:  &Verdict{FinishedAt: t0, TTL: 2 * time.Second, Policy: "a", Propagation: metav1.DeletePropagationForeground},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Choose(tc.cands)); diff != "" {
				t.Errorf("verdict (-want +got):\n%s", diff)
			}
		})
	}
}

func TestOutcomeRules(t *testing.T) {
	at := metav1.NewTime(t0)
	later := metav1.NewTime(t0.Add(time.Minute))
	rule := func(w *builder.TTLPolicyWrapper) Rule {
		p := Compile(w.Target("example.com/v1", "Widget").TTLAfterSuccess(1).Obj(), testMapper())
		if !p.Ready {
			t.Fatalf("policy not ready: %s", p.Message)
		}
		return p.Rule
	}
	conds := rule(builder.MakeTTLPolicy("p").Conditions([]string{"Done"}, []string{"Broken"}))
	condsWithTime := rule(builder.MakeTTLPolicy("p").Conditions([]string{"Done"}, nil).FinishTime("status.finishedAt"))
	phase := rule(builder.MakeTTLPolicy("p").Phase("status.phase", []string{"Succeeded"}, []string{"Failed", "Error"}).FinishTime("status.endTime"))
	phaseNoTime := rule(builder.MakeTTLPolicy("p").Phase("status.phase", []string{"Succeeded"}, nil))
	// Knative style: one condition type, outcome in its status.
	knative := rule(builder.MakeTTLPolicy("p").Succeeded(builder.Cond("Succeeded", "True")).Failed(builder.Cond("Succeeded", "False")).FinishTime("status.completionTime"))
	// Outcome in the reason.
	byReason := rule(builder.MakeTTLPolicy("p").Succeeded(builder.Cond("Finished", "True", "Succeeded")).Failed(builder.Cond("Finished", "True", "Failed")))
	// Two fields, any of which finishes it.
	anyOf := rule(builder.MakeTTLPolicy("p").Succeeded(builder.Field("status.jobStatus", "SUCCEEDED")).
		Failed(builder.Field("status.jobStatus", "FAILED", "STOPPED"), builder.Field("status.jobDeploymentStatus", "Failed")).FinishTime("status.endTime"))
	finishedOnly := rule(builder.MakeTTLPolicy("p").Succeeded(builder.Cond("Done", "True")).Finished(builder.Cond("Over", "True")))
	w := func() *builder.CustomObjectWrapper {
		return builder.MakeCustomObject("example.com/v1", "Widget", "w", "ns")
	}
	withReason := func(obj *unstructured.Unstructured, reason string) *unstructured.Unstructured {
		conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
		conds[len(conds)-1].(map[string]interface{})["reason"] = reason
		_ = unstructured.SetNestedSlice(obj.Object, conds, "status", "conditions")
		return obj
	}
	done := Finish{Finished: true, At: t0}
	cases := map[string]struct {
		rule    Rule
		obj     runtime.Object
		want    Finish
		wantErr bool
	}{
		"conditions: none":          {rule: conds, obj: w().Obj()},
		"conditions: done is False": {rule: conds, obj: w().Condition("Done", "False", at).Obj()},
		"conditions: done": {
			rule: conds, obj: w().Condition("Ready", "True", later).Condition("Done", "True", at).Obj(), want: done,
		},
		"conditions: failure first": {
			rule: conds, obj: w().Condition("Done", "True", at).Condition("Broken", "True", later).Obj(),
			want: Finish{Finished: true, Failed: true, At: t0.Add(time.Minute)},
		},
		"conditions: finish time field": {
			rule: condsWithTime, obj: w().Condition("Done", "True", at).TimeField("status.finishedAt", later).Obj(),
			want: Finish{Finished: true, At: t0.Add(time.Minute)},
		},
		"conditions: finish time field absent falls back to the condition": {
			rule: condsWithTime, obj: w().Condition("Done", "True", at).Obj(), want: done,
		},
		"conditions: finish time field malformed is unreadable": {
			rule: condsWithTime, obj: w().Condition("Done", "True", at).Field("status.finishedAt", "yesterday").Obj(), wantErr: true,
		},
		"phase: unset":   {rule: phase, obj: w().Obj()},
		"phase: running": {rule: phase, obj: w().Field("status.phase", "Running").Obj()},
		"phase: succeeded": {
			rule: phase, obj: w().Field("status.phase", "Succeeded").TimeField("status.endTime", at).Obj(), want: done,
		},
		"phase: error counts as failure": {
			rule: phase, obj: w().Field("status.phase", "Error").TimeField("status.endTime", at).Obj(),
			want: Finish{Finished: true, Failed: true, At: t0},
		},
		"phase: bad time":      {rule: phase, obj: w().Field("status.phase", "Failed").Field("status.endTime", "yesterday").Obj(), wantErr: true},
		"phase: no time field": {rule: phaseNoTime, obj: w().Field("status.phase", "Succeeded").Obj(), wantErr: true},
		"knative: running":     {rule: knative, obj: w().Condition("Succeeded", "Unknown", at).Obj()},
		"knative: succeeded": {
			rule: knative, obj: w().Condition("Succeeded", "True", at).TimeField("status.completionTime", later).Obj(),
			want: Finish{Finished: true, At: t0.Add(time.Minute)},
		},
		"knative: failed": {
			rule: knative, obj: w().Condition("Succeeded", "False", at).TimeField("status.completionTime", later).Obj(),
			want: Finish{Finished: true, Failed: true, At: t0.Add(time.Minute)},
		},
		"reason: succeeded": {rule: byReason, obj: withReason(w().Condition("Finished", "True", at).Obj(), "Succeeded"), want: done},
		"reason: failed": {
			rule: byReason, obj: withReason(w().Condition("Finished", "True", at).Obj(), "Failed"),
			want: Finish{Finished: true, Failed: true, At: t0},
		},
		"reason: other reason does not match": {rule: byReason, obj: withReason(w().Condition("Finished", "True", at).Obj(), "Evicted")},
		"any-of: second field finishes it": {
			rule: anyOf, obj: w().Field("status.jobStatus", "RUNNING").Field("status.jobDeploymentStatus", "Failed").TimeField("status.endTime", at).Obj(),
			want: Finish{Finished: true, Failed: true, At: t0},
		},
		"any-of: stopped": {
			rule: anyOf, obj: w().Field("status.jobStatus", "STOPPED").TimeField("status.endTime", at).Obj(),
			want: Finish{Finished: true, Failed: true, At: t0},
		},
		"any-of: running": {rule: anyOf, obj: w().Field("status.jobStatus", "RUNNING").Field("status.jobDeploymentStatus", "Running").Obj()},
		"finished without success counts as failed": {
			rule: finishedOnly, obj: w().Condition("Over", "True", at).Obj(), want: Finish{Finished: true, Failed: true, At: t0},
		},
		"built-in job rule on typed Job": {
			rule: JobRule, obj: builder.MakeJob("j", "ns").Condition("Failed", "", at).Obj(),
			want: Finish{Finished: true, Failed: true, At: t0},
		},
		"matcher rule on typed Job": {
			rule: rule(builder.MakeTTLPolicy("p").Conditions([]string{"Complete"}, nil)), obj: builder.MakeJob("j", "ns").Condition("Complete", "", at).Obj(),
			want: done,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := tc.rule.Read(tc.obj)
			if (got.Err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v", got.Err, tc.wantErr)
			}
			if tc.wantErr {
				if !got.Finished || !errors.Is(got.Err, ErrNoFinishTime) {
					t.Errorf("unreadable finish time must be finished and wrap ErrNoFinishTime: %+v", got)
				}
				return
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("state (-want +got):\n%s", diff)
			}
		})
	}
}

func TestOwnTTL(t *testing.T) {
	p := Compile(builder.MakeTTLPolicy("p").Target("example.com/v1", "Widget").Conditions([]string{"Done"}, nil).OwnTTL("spec.ttlSecondsAfterFinished").Obj(), testMapper())
	w := func() *unstructured.Unstructured {
		return builder.MakeCustomObject("example.com/v1", "Widget", "w", "ns").Obj()
	}
	set := func(v interface{}) *unstructured.Unstructured {
		o := w()
		_ = unstructured.SetNestedField(o.Object, v, "spec", "ttlSecondsAfterFinished")
		return o
	}
	cases := map[string]struct {
		obj     *unstructured.Unstructured
		want    int32
		wantOK  bool
		wantErr bool
	}{
		"unset":        {obj: w()},
		"set":          {obj: set(int64(30)), want: 30, wantOK: true},
		"zero":         {obj: set(int64(0)), want: 0, wantOK: true},
		"negative":     {obj: set(int64(-1)), wantOK: true, wantErr: true},
		"overflow":     {obj: set(int64(1) << 40), wantOK: true, wantErr: true},
		"not a number": {obj: set("soon"), wantOK: true, wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok, err := p.OwnTTL(tc.obj)
			if got != tc.want || ok != tc.wantOK || (err != nil) != tc.wantErr {
				t.Errorf("OwnTTL = %d, %v, %v; want %d, %v, error %v", got, ok, err, tc.want, tc.wantOK, tc.wantErr)
			}
		})
	}
}

func TestStaticWarnings(t *testing.T) {
	widget := func() *builder.TTLPolicyWrapper {
		return builder.MakeTTLPolicy("p").Target("example.com/v1", "Widget")
	}
	cases := map[string]struct {
		policy *v1alpha1.TTLPolicy
		want   int
	}{
		"built-in rule":                      {policy: builder.MakeTTLPolicy("p").TTLAfterFailure(1).TTLAfterSuccess(1).Obj()},
		"failure TTL without failed matcher": {policy: widget().Conditions([]string{"Done"}, nil).TTLAfterFailure(1).Obj(), want: 1},
		"failure TTL with finished matcher":  {policy: widget().Finished(builder.Cond("Over", "True")).TTLAfterFailure(1).Obj()},
		"success TTL without succeeded":      {policy: widget().Conditions(nil, []string{"Broken"}).TTLAfterSuccess(1).Obj(), want: 1},
		"history limit that cannot apply":    {policy: widget().Conditions(nil, []string{"Broken"}).KeepLast(2, -1).Obj(), want: 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := Compile(tc.policy, testMapper())
			if !p.Ready {
				t.Fatalf("not ready: %s", p.Message)
			}
			if len(p.Warnings) != tc.want {
				t.Errorf("warnings %q, want %d", p.Warnings, tc.want)
			}
		})
	}
}

func TestExcess(t *testing.T) {
	m := func(name string, failed bool, minutes int) Member {
		return Member{Name: name, UID: types.UID(name), Failed: failed, At: t0.Add(time.Duration(minutes) * time.Minute)}
	}
	members := []Member{m("s1", false, 1), m("s2", false, 2), m("s3", false, 3), m("f1", true, 1), m("f2", true, 2), m("tie-b", false, 3)}
	names := func(ms []Member) []string {
		var out []string
		for _, x := range ms {
			out = append(out, x.Name)
		}
		sort.Strings(out)
		return out
	}
	cases := map[string]struct {
		keepS, keepF *int32
		want         []string
	}{
		"no limits":                     {},
		"keep 2 succeeded, tie by name": {keepS: ptr.To[int32](2), want: []string{"s1", "s2"}},
		"keep 1 failed":                 {keepF: ptr.To[int32](1), want: []string{"f1"}},
		"keep 0 of each":                {keepS: ptr.To[int32](0), keepF: ptr.To[int32](0), want: []string{"f1", "f2", "s1", "s2", "s3", "tie-b"}},
		"limit above count":             {keepS: ptr.To[int32](10)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, names(Excess(members, tc.keepS, tc.keepF))); diff != "" {
				t.Errorf("excess (-want +got):\n%s", diff)
			}
		})
	}
	// A subset of the members (a lagging cache) never removes more than the
	// whole would: every object Excess returns for a subset is also
	// returned for the whole set.
	whole := map[string]bool{}
	for _, x := range Excess(members, ptr.To[int32](2), ptr.To[int32](1)) {
		whole[x.Name] = true
	}
	for i := range members {
		sub := append(append([]Member{}, members[:i]...), members[i+1:]...)
		for _, x := range Excess(sub, ptr.To[int32](2), ptr.To[int32](1)) {
			if !whole[x.Name] {
				t.Errorf("without %s, Excess removes %s, which the whole set keeps", members[i].Name, x.Name)
			}
		}
	}
}

func TestCheckFieldPaths(t *testing.T) {
	strict := map[string]interface{}{
		"type": "object",
		"properties": map[string]interface{}{
			"status": map[string]interface{}{
				"type": "object",
				"properties": map[string]interface{}{
					"phase":      map[string]interface{}{"type": "string"},
					"endTime":    map[string]interface{}{"type": "string"},
					"conditions": map[string]interface{}{"type": "array"},
					"extra":      map[string]interface{}{"type": "object", "x-kubernetes-preserve-unknown-fields": true},
					"byName":     map[string]interface{}{"type": "object", "additionalProperties": map[string]interface{}{"type": "string"}},
				},
			},
		},
	}
	widget := func() *builder.TTLPolicyWrapper {
		return builder.MakeTTLPolicy("p").Target("example.com/v1", "Widget").TTLAfterSuccess(1)
	}
	cases := map[string]struct {
		policy     *v1alpha1.TTLPolicy
		schema     map[string]interface{}
		wantReason string
	}{
		"phase and time resolve": {
			policy:     widget().Phase("status.phase", []string{"Done"}, nil).FinishTime("status.endTime").Obj(),
			schema:     strict,
			wantReason: v1alpha1.ReasonReady,
		},
		"phase does not resolve": {
			policy:     widget().Phase("status.state", []string{"Done"}, nil).FinishTime("status.endTime").Obj(),
			schema:     strict,
			wantReason: v1alpha1.ReasonFieldPathNotFound,
		},
		"finish time does not resolve": {
			policy:     widget().Conditions([]string{"Done"}, nil).FinishTime("status.doneAt").Obj(),
			schema:     strict,
			wantReason: v1alpha1.ReasonFieldPathNotFound,
		},
		"below preserve-unknown-fields": {
			policy:     widget().Phase("status.extra.deep.phase", []string{"Done"}, nil).FinishTime("status.byName.x").Obj(),
			schema:     strict,
			wantReason: v1alpha1.ReasonReady,
		},
		"no conditions in schema": {
			policy:     widget().Conditions([]string{"Done"}, nil).Obj(),
			schema:     map[string]interface{}{"type": "object", "properties": map[string]interface{}{"status": map[string]interface{}{"type": "object"}}},
			wantReason: v1alpha1.ReasonFieldPathNotFound,
		},
		"path into a list": {
			policy:     widget().Phase("status.conditions.status", []string{"True"}, nil).FinishTime("status.endTime").Obj(),
			schema:     strict,
			wantReason: v1alpha1.ReasonFieldPathIntoList,
		},
		"own TTL field does not resolve": {
			policy:     widget().Conditions([]string{"Done"}, nil).OwnTTL("spec.ttl").Obj(),
			schema:     strict,
			wantReason: v1alpha1.ReasonFieldPathNotFound,
		},
		"unknown schema is not checked": {
			policy:     widget().Phase("anything.at.all", []string{"Done"}, nil).FinishTime("status.x").Obj(),
			wantReason: v1alpha1.ReasonReady,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Compile(tc.policy, testMapper()).CheckSchema(tc.schema)
			if got.Reason != tc.wantReason {
				t.Errorf("reason %q (%s), want %q", got.Reason, got.Message, tc.wantReason)
			}
		})
	}
}
