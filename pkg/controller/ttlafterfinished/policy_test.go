package ttlafterfinished

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/apis/jobkeeper/v1alpha1"
	"jobkeeper.dev/jobkeeper/test/builder"
)

var (
	widgetGVK       = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}
	widgetGVR       = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	clusterThingGVK = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "ClusterThing"}
)

// testMapper knows Jobs, Pods, Widgets and a cluster-scoped kind.
func testMapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	m.Add(jobGVK, meta.RESTScopeNamespace)
	m.Add(podGVK, meta.RESTScopeNamespace)
	m.Add(widgetGVK, meta.RESTScopeNamespace)
	m.Add(clusterThingGVK, meta.RESTScopeRoot)
	return m
}

func TestCompilePolicy(t *testing.T) {
	cases := map[string]struct {
		policy     *v1alpha1.CleanupPolicy
		wantReady  bool
		wantReason string
		wantGVR    schema.GroupVersionResource
	}{
		"job with built-in rule": {
			policy:     builder.MakeCleanupPolicy("p").TTLAfterSuccess(1).Obj(),
			wantReady:  true,
			wantReason: v1alpha1.ReasonReady,
			wantGVR:    jobResource,
		},
		"pod with built-in rule": {
			policy:     builder.MakeCleanupPolicy("p").Target("v1", "Pod").TTLAfterFailure(1).Obj(),
			wantReady:  true,
			wantReason: v1alpha1.ReasonReady,
			wantGVR:    podResource,
		},
		"custom kind with conditions": {
			policy:     builder.MakeCleanupPolicy("p").Target("example.com/v1", "Widget").Conditions([]string{"Done"}, nil).TTLAfterSuccess(1).Obj(),
			wantReady:  true,
			wantReason: v1alpha1.ReasonReady,
			wantGVR:    widgetGVR,
		},
		"unknown kind": {
			policy:     builder.MakeCleanupPolicy("p").Target("example.com/v1", "Gadget").Conditions([]string{"Done"}, nil).TTLAfterSuccess(1).Obj(),
			wantReason: v1alpha1.ReasonUnknownKind,
		},
		"unknown version": {
			policy:     builder.MakeCleanupPolicy("p").Target("example.com/v2", "Widget").Conditions([]string{"Done"}, nil).TTLAfterSuccess(1).Obj(),
			wantReason: v1alpha1.ReasonUnknownKind,
		},
		"cluster-scoped kind": {
			policy:     builder.MakeCleanupPolicy("p").Target("example.com/v1", "ClusterThing").Conditions([]string{"Done"}, nil).TTLAfterSuccess(1).Obj(),
			wantReason: v1alpha1.ReasonNotNamespaced,
		},
		"custom kind without rule": {
			policy:     builder.MakeCleanupPolicy("p").Target("example.com/v1", "Widget").TTLAfterSuccess(1).Obj(),
			wantReason: v1alpha1.ReasonMissingCompletionRule,
		},
		"phase without finish time": {
			policy:     builder.MakeCleanupPolicy("p").Target("example.com/v1", "Widget").Phase("status.phase", []string{"Done"}, nil).TTLAfterSuccess(1).Obj(),
			wantReason: v1alpha1.ReasonMissingCompletionRule,
		},
		"invalid selector": {
			policy: func() *v1alpha1.CleanupPolicy {
				p := builder.MakeCleanupPolicy("p").TTLAfterSuccess(1).Obj()
				p.Spec.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}}
				return p
			}(),
			wantReason: v1alpha1.ReasonInvalidSelector,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := compilePolicy(tc.policy, testMapper())
			if got.ready != tc.wantReady || got.reason != tc.wantReason {
				t.Errorf("ready=%v reason=%q (%s), want ready=%v reason=%q", got.ready, got.reason, got.message, tc.wantReady, tc.wantReason)
			}
			if tc.wantReady && got.gvr != tc.wantGVR {
				t.Errorf("gvr %v, want %v", got.gvr, tc.wantGVR)
			}
		})
	}
}

func TestPolicyMatches(t *testing.T) {
	p := compilePolicy(builder.MakeCleanupPolicy("p").Target("v1", "Pod").TTLAfterSuccess(1).Selector("app", "x").NamespaceSelector("team", "a").Obj(), testMapper())
	withJobPods := compilePolicy(builder.MakeCleanupPolicy("p").Target("v1", "Pod").TTLAfterSuccess(1).IncludeJobPods().Obj(), testMapper())
	cases := map[string]struct {
		policy   *compiledPolicy
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
			if got := tc.policy.matches(obj, tc.nsLabels, tc.jobPod); got != tc.want {
				t.Errorf("matches %v, want %v", got, tc.want)
			}
		})
	}
}

func TestChoose(t *testing.T) {
	pol := func(name string, success, failure *int32, dry bool) *compiledPolicy {
		return &compiledPolicy{name: name, ttlSuccess: success, ttlFailure: failure, dryRun: dry, propagation: metav1.DeletePropagationForeground}
	}
	ok := finishState{finished: true, at: t0}
	bad := finishState{finished: true, failed: true, at: t0}
	cases := map[string]struct {
		cands []candidate
		own   *int32
		want  *verdictView
	}{
		"none": {},
		"not finished": {
			cands: []candidate{{policy: pol("a", ptr.To[int32](5), nil, false), state: finishState{}}},
		},
		"success TTL for success": {
			cands: []candidate{{policy: pol("a", ptr.To[int32](5), ptr.To[int32](50), false), state: ok}},
			want:  &verdictView{FinishedAt: t0, TTL: 5 * time.Second, Policy: "a", Propagation: metav1.DeletePropagationForeground},
		},
		"failure TTL for failure": {
			cands: []candidate{{policy: pol("a", ptr.To[int32](5), ptr.To[int32](50), false), state: bad}},
			want:  &verdictView{FinishedAt: t0, TTL: 50 * time.Second, Policy: "a", Failed: true, Propagation: metav1.DeletePropagationForeground},
		},
		"no TTL for the outcome keeps the object": {
			cands: []candidate{{policy: pol("a", nil, ptr.To[int32](50), false), state: ok}},
		},
		"longest TTL wins": {
			cands: []candidate{
				{policy: pol("a", ptr.To[int32](5), nil, false), state: ok},
				{policy: pol("b", ptr.To[int32](60), nil, true), state: ok},
				{policy: pol("c", ptr.To[int32](10), nil, false), state: ok},
			},
			want: &verdictView{FinishedAt: t0, TTL: 60 * time.Second, Policy: "b", DryRun: true, Propagation: metav1.DeletePropagationForeground},
		},
		"tie goes to first name": {
			cands: []candidate{
				{policy: pol("z", ptr.To[int32](10), nil, true), state: ok},
				{policy: pol("m", ptr.To[int32](10), nil, false), state: ok},
			},
			want: &verdictView{FinishedAt: t0, TTL: 10 * time.Second, Policy: "m", Propagation: metav1.DeletePropagationForeground},
		},
		"own TTL overrides the winner's": {
			cands: []candidate{{policy: pol("a", ptr.To[int32](500), nil, false), state: ok}},
			own:   ptr.To[int32](1),
			want:  &verdictView{FinishedAt: t0, TTL: time.Second, Policy: "a", Propagation: metav1.DeletePropagationForeground},
		},
		"own TTL applies even without a policy TTL for the outcome": {
			cands: []candidate{{policy: pol("a", nil, ptr.To[int32](50), false), state: ok}},
			own:   ptr.To[int32](2),
			want:  &verdictView{FinishedAt: t0, TTL: 2 * time.Second, Policy: "a", Propagation: metav1.DeletePropagationForeground},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, view(choose(tc.cands, tc.own))); diff != "" {
				t.Errorf("verdict (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCompletionRules(t *testing.T) {
	at := metav1.NewTime(t0)
	later := metav1.NewTime(t0.Add(time.Minute))
	conds := conditionsRule{succeeded: []string{"Done"}, failed: []string{"Broken"}}
	condsWithTime := conditionsRule{succeeded: []string{"Done"}, finishTime: []string{"status", "finishedAt"}}
	phase := phaseRule{field: []string{"status", "phase"}, succeeded: []string{"Succeeded"}, failed: []string{"Failed", "Error"}, finishTime: []string{"status", "endTime"}}
	w := func() *builder.CustomObjectWrapper {
		return builder.MakeCustomObject("example.com/v1", "Widget", "w", "ns")
	}
	cases := map[string]struct {
		rule    completionRule
		obj     runtime.Object
		want    finishState
		wantErr bool
	}{
		"conditions: none":          {rule: conds, obj: w().Obj()},
		"conditions: done is False": {rule: conds, obj: w().Condition("Done", "False", at).Obj()},
		"conditions: done": {
			rule: conds, obj: w().Condition("Ready", "True", later).Condition("Done", "True", at).Obj(),
			want: finishState{finished: true, at: t0},
		},
		"conditions: failure first": {
			rule: conds, obj: w().Condition("Done", "True", at).Condition("Broken", "True", later).Obj(),
			want: finishState{finished: true, failed: true, at: t0.Add(time.Minute)},
		},
		"conditions: finish time field": {
			rule: condsWithTime, obj: w().Condition("Done", "True", at).TimeField("status.finishedAt", later).Obj(),
			want: finishState{finished: true, at: t0.Add(time.Minute)},
		},
		"conditions: finish time field missing": {
			rule: condsWithTime, obj: w().Condition("Done", "True", at).Obj(), wantErr: true,
		},
		"phase: unset":   {rule: phase, obj: w().Obj()},
		"phase: running": {rule: phase, obj: w().Field("status.phase", "Running").Obj()},
		"phase: succeeded": {
			rule: phase, obj: w().Field("status.phase", "Succeeded").TimeField("status.endTime", at).Obj(),
			want: finishState{finished: true, at: t0},
		},
		"phase: error counts as failure": {
			rule: phase, obj: w().Field("status.phase", "Error").TimeField("status.endTime", at).Obj(),
			want: finishState{finished: true, failed: true, at: t0},
		},
		"phase: bad time": {
			rule: phase, obj: w().Field("status.phase", "Failed").Field("status.endTime", "yesterday").Obj(), wantErr: true,
		},
		"built-in job rule on typed Job": {
			rule: jobRule{}, obj: builder.MakeJob("j", "ns").Condition("Failed", "", at).Obj(),
			want: finishState{finished: true, failed: true, at: t0},
		},
		"conditions rule on typed Job": {
			rule: conditionsRule{succeeded: []string{"Complete"}}, obj: builder.MakeJob("j", "ns").Condition("Complete", "", at).Obj(),
			want: finishState{finished: true, at: t0},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := tc.rule.read(tc.obj)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(finishState{})); diff != "" {
				t.Errorf("state (-want +got):\n%s", diff)
			}
		})
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
	widget := func() *builder.CleanupPolicyWrapper {
		return builder.MakeCleanupPolicy("p").Target("example.com/v1", "Widget").TTLAfterSuccess(1)
	}
	cases := map[string]struct {
		policy     *v1alpha1.CleanupPolicy
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
		"unknown schema is not checked": {
			policy:     widget().Phase("anything.at.all", []string{"Done"}, nil).FinishTime("status.x").Obj(),
			wantReason: v1alpha1.ReasonReady,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := compilePolicy(tc.policy, testMapper()).checkFieldPaths(tc.schema)
			if got.reason != tc.wantReason {
				t.Errorf("reason %q (%s), want %q", got.reason, got.message, tc.wantReason)
			}
		})
	}
}
