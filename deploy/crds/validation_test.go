package crds

// These tests check the TTLPolicy CRD the way the apiserver does, without an
// apiserver: the CRD itself goes through the apiextensions validation that a
// create runs (structural schema, CEL compilation and its estimated cost),
// and policies go through the same steps as a custom resource create
// (defaulting, OpenAPI schema, list types, then the x-kubernetes-validations
// rules unless an earlier error blocks them).

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	crvalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresource/tableconvertor"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"
)

// ttlPolicyCRD returns the embedded TTLPolicy CRD with the v1 defaults the
// apiserver applies before validating it.
func ttlPolicyCRD(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crds, err := CRDs()
	if err != nil {
		t.Fatal(err)
	}
	for _, crd := range crds {
		if crd.Spec.Names.Kind == "TTLPolicy" {
			apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(crd)
			return crd
		}
	}
	t.Fatal("no TTLPolicy CRD embedded")
	return nil
}

func toInternal(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition) *apiextensions.CustomResourceDefinition {
	t.Helper()
	out := &apiextensions.CustomResourceDefinition{}
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(crd, out, nil); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCRDPassesAPIServerValidation runs the validation of a CRD create: a
// CEL rule that does not compile, or whose estimated cost is over the
// apiserver's limits, fails here.
func TestCRDPassesAPIServerValidation(t *testing.T) {
	crd := toInternal(t, ttlPolicyCRD(t))
	// What the CRD strategy's PrepareForCreate sets.
	crd.Status = apiextensions.CustomResourceDefinitionStatus{}
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			crd.Status.StoredVersions = []string{v.Name}
		}
	}
	for _, err := range crdvalidation.ValidateCustomResourceDefinition(context.Background(), crd) {
		t.Errorf("CRD invalid: %v", err)
	}
}

// policyValidator validates TTLPolicy objects as the custom resource
// strategy does on create.
type policyValidator struct {
	structural *structuralschema.Structural
	schema     crvalidation.SchemaCreateValidator
	cel        *cel.Validator
}

func newPolicyValidator(t *testing.T) *policyValidator {
	t.Helper()
	crd := ttlPolicyCRD(t)
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Schema == nil {
		t.Fatalf("want one version with a schema, got %d versions", len(crd.Spec.Versions))
	}
	// As the apiserver's custom resource handler does, per version.
	internal := &apiextensions.CustomResourceValidation{}
	if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(crd.Spec.Versions[0].Schema, internal, nil); err != nil {
		t.Fatal(err)
	}
	openAPI := internal.OpenAPIV3Schema
	s, err := structuralschema.NewStructural(openAPI)
	if err != nil {
		t.Fatalf("schema not structural: %v", err)
	}
	sv, _, err := crvalidation.NewSchemaValidator(openAPI)
	if err != nil {
		t.Fatal(err)
	}
	cv := cel.NewValidator(s, true, celconfig.PerCallLimit)
	if cv == nil {
		t.Fatal("no CEL validator: the schema has no x-kubernetes-validations?")
	}
	return &policyValidator{structural: s, schema: sv, cel: cv}
}

// blocking mirrors the custom resource strategy: after these errors the CEL
// rules are not run.
func blocking(errs field.ErrorList) bool {
	for _, e := range errs {
		switch e.Type {
		case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong,
			field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
			return true
		}
	}
	return false
}

func (v *policyValidator) validate(obj map[string]interface{}) field.ErrorList {
	structuraldefaulting.Default(obj, v.structural)
	errs := crvalidation.ValidateCustomResource(nil, obj, v.schema)
	errs = append(errs, listtype.ValidateListSetsAndMaps(nil, v.structural, obj)...)
	if blocking(errs) {
		return errs
	}
	celErrs, remaining := v.cel.Validate(context.Background(), nil, v.structural, obj, nil, celconfig.RuntimeCELCostBudget)
	if remaining < 0 {
		errs = append(errs, field.Invalid(nil, nil, "CEL cost budget exceeded"))
	}
	return append(errs, celErrs...)
}

// decode reads a YAML object as the apiserver reads a JSON body into an
// unstructured object: whole numbers are int64, not float64.
func decode(data []byte) (map[string]interface{}, error) {
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, err
	}
	obj := map[string]interface{}{}
	if err := utiljson.Unmarshal(j, &obj); err != nil {
		return nil, err
	}
	return obj, nil
}

// policy builds a TTLPolicy from the YAML of its spec.
func policy(t *testing.T, spec string) map[string]interface{} {
	t.Helper()
	s, err := decode([]byte(spec))
	if err != nil {
		t.Fatalf("bad test spec %q: %v", spec, err)
	}
	return map[string]interface{}{
		"apiVersion": "jobkeeper.dev/v1alpha1",
		"kind":       "TTLPolicy",
		"metadata":   map[string]interface{}{"name": "p"},
		"spec":       s,
	}
}

const (
	jobTarget = "target: {apiVersion: batch/v1, kind: Job}\n"
	wfTarget  = "target: {apiVersion: argoproj.io/v1alpha1, kind: Workflow}\n"
	// A valid outcome, for cases about other fields.
	wfOutcome = "outcome: {succeeded: [{field: {path: status.phase, values: [Succeeded]}}]}\n"
)

func TestPolicyValidation(t *testing.T) {
	v := newPolicyValidator(t)
	many := func(n int, item string) string {
		return "[" + strings.TrimSuffix(strings.Repeat(item+",", n), ",") + "]"
	}
	distinct := func(n int) string {
		s := make([]string, n)
		for i := range s {
			s[i] = fmt.Sprintf("R%d", i)
		}
		return "[" + strings.Join(s, ",") + "]"
	}
	cases := []struct {
		name string
		spec string
		// want: the field path and a part of the message of the one
		// expected error ("" for a valid policy).
		field, msg string
		// also: a part of the message of a second expected error, with no
		// field path (the OpenAPI format check of an int32 beyond its range
		// names the field only in its message).
		also string
	}{
		// Valid policies.
		{name: "job with a TTL", spec: jobTarget + "ttlSecondsAfterSuccess: 0"},
		{name: "pod with includeJobPods", spec: "target: {apiVersion: v1, kind: Pod}\nincludeJobPods: true\nttlSecondsAfterFailure: 60"},
		{name: "only a history limit", spec: jobTarget + "keepLast: {failed: 0, groupBy: {controllerOwner: true}}"},
		{name: "only an own TTL", spec: wfTarget + wfOutcome + "ownTTL: {field: spec.ttlStrategy.secondsAfterCompletion}"},
		{name: "int32 max", spec: jobTarget + "ttlSecondsAfterSuccess: 2147483647\nkeepLast: {succeeded: 2147483647}"},
		{name: "condition matchers with reasons", spec: wfTarget + `
outcome:
  succeeded: [{condition: {type: Finished, reasons: [Succeeded]}}]
  failed: [{condition: {type: Finished, status: "True", reasons: [Failed, Evicted]}}, {condition: {type: Succeeded, status: "False"}}]
  finished: [{condition: {type: Done, status: Unknown}}]
  finishTime: {field: status.finishedAt}
ttlSecondsAfterFailure: 10`},
		{name: "labelKey with controllerOwner false", spec: jobTarget + "keepLast: {succeeded: 3, groupBy: {labelKey: tekton.dev/pipeline, controllerOwner: false}}"},
		{name: "label key without prefix", spec: jobTarget + "keepLast: {succeeded: 3, groupBy: {labelKey: app}}"},
		{name: "16 matchers", spec: wfTarget + "ttlSecondsAfterSuccess: 1\noutcome: {failed: " + many(16, "{condition: {type: Failed}}") + "}"},
		{name: "path with underscore and dash", spec: wfTarget + "ttlSecondsAfterSuccess: 1\noutcome: {finished: [{field: {path: status.job_state.x-y, values: [DONE]}}]}"},

		// Nothing to do.
		{name: "no TTL, keepLast or ownTTL", spec: jobTarget, field: "spec", msg: "set at least one of spec.ttlSecondsAfterSuccess, spec.ttlSecondsAfterFailure, spec.keepLast and spec.ownTTL"},

		// Target.
		{name: "apiVersion without version", spec: "target: {apiVersion: batch, kind: Job}\n" + wfOutcome + "ttlSecondsAfterSuccess: 1", field: "spec.target.apiVersion", msg: `must be "group/version" or "v1"`},
		{name: "apiVersion upper case", spec: "target: {apiVersion: Batch/v1, kind: Job}\n" + wfOutcome + "ttlSecondsAfterSuccess: 1", field: "spec.target.apiVersion", msg: `must be "group/version"`},
		{name: "kind lower case", spec: "target: {apiVersion: batch/v1, kind: job}\n" + wfOutcome + "ttlSecondsAfterSuccess: 1", field: "spec.target.kind", msg: "CamelCase"},
		{name: "kind TTLPolicy", spec: "target: {apiVersion: jobkeeper.dev/v1alpha1, kind: TTLPolicy}\n" + wfOutcome + "ttlSecondsAfterSuccess: 1", field: "spec.target.kind", msg: "must not be a kind whose deletion would harm"},
		{name: "kind Namespace", spec: "target: {apiVersion: v1, kind: Namespace}\n" + wfOutcome + "ttlSecondsAfterSuccess: 1", field: "spec.target.kind", msg: "must not be a kind"},
		{name: "kind CustomResourceDefinition", spec: "target: {apiVersion: apiextensions.k8s.io/v1, kind: CustomResourceDefinition}\n" + wfOutcome + "ttlSecondsAfterSuccess: 1", field: "spec.target.kind", msg: "must not be a kind"},
		{name: "includeJobPods on a Job", spec: jobTarget + "includeJobPods: true\nttlSecondsAfterSuccess: 1", field: "spec.includeJobPods", msg: "only applies to Pod targets"},

		// Outcome.
		{name: "custom kind without outcome", spec: wfTarget + "ttlSecondsAfterSuccess: 1", field: "spec.outcome", msg: "spec.outcome is required unless the target is batch/v1 Job or v1 Pod"},
		{name: "Job of another group without outcome", spec: "target: {apiVersion: example.com/v1, kind: Job}\nttlSecondsAfterSuccess: 1", field: "spec.outcome", msg: "spec.outcome is required"},
		{name: "empty outcome", spec: wfTarget + "outcome: {}\nttlSecondsAfterSuccess: 1", field: "spec.outcome", msg: "at least one matcher in succeeded, failed or finished"},
		{name: "outcome with empty lists", spec: wfTarget + "outcome: {succeeded: [], failed: [], finishTime: {field: status.finishedAt}}\nttlSecondsAfterSuccess: 1", field: "spec.outcome", msg: "at least one matcher"},
		{name: "matcher with both", spec: wfTarget + "ttlSecondsAfterSuccess: 1\noutcome: {succeeded: [{condition: {type: Done}, field: {path: status.phase, values: [Succeeded]}}]}", field: "spec.outcome.succeeded[0]", msg: "exactly one of condition and field"},
		{name: "matcher with neither", spec: wfTarget + "ttlSecondsAfterSuccess: 1\noutcome: {failed: [{condition: {type: Failed}}, {}]}", field: "spec.outcome.failed[1]", msg: "exactly one of condition and field"},
		{name: "condition status lower case", spec: wfTarget + "ttlSecondsAfterSuccess: 1\noutcome: {succeeded: [{condition: {type: Done, status: \"true\"}}]}", field: "spec.outcome.succeeded[0].condition.status", msg: "Unsupported value"},
		{name: "condition without type", spec: wfTarget + "ttlSecondsAfterSuccess: 1\noutcome: {succeeded: [{condition: {status: \"True\"}}]}", field: "spec.outcome.succeeded[0].condition.type", msg: "Required value"},
		{name: "empty condition type", spec: wfTarget + "ttlSecondsAfterSuccess: 1\noutcome: {succeeded: [{condition: {type: \"\"}}]}", field: "spec.outcome.succeeded[0].condition.type", msg: "at least 1 chars long"},
		{name: "empty reason", spec: wfTarget + "ttlSecondsAfterSuccess: 1\noutcome: {failed: [{condition: {type: Done, reasons: [\"\"]}}]}", field: "spec.outcome.failed[0].condition.reasons[0]", msg: "at least 1 chars long"},
		{name: "duplicate reason", spec: wfTarget + "ttlSecondsAfterSuccess: 1\noutcome: {failed: [{condition: {type: Done, reasons: [A, A]}}]}", field: "spec.outcome.failed[0].condition.reasons[1]", msg: "Duplicate value"},
		{name: "33 reasons", spec: wfTarget + "ttlSecondsAfterSuccess: 1\noutcome: {failed: [{condition: {type: Done, reasons: " + distinct(33) + "}}]}", field: "spec.outcome.failed[0].condition.reasons", msg: "must have at most 32 items"},
		{name: "17 matchers", spec: wfTarget + "ttlSecondsAfterSuccess: 1\noutcome: {finished: " + many(17, "{condition: {type: Done}}") + "}", field: "spec.outcome.finished", msg: "must have at most 16 items"},
		{name: "field without values", spec: wfTarget + "ttlSecondsAfterSuccess: 1\noutcome: {succeeded: [{field: {path: status.phase}}]}", field: "spec.outcome.succeeded[0].field.values", msg: "Required value"},
		{name: "field with no values", spec: wfTarget + "ttlSecondsAfterSuccess: 1\noutcome: {succeeded: [{field: {path: status.phase, values: []}}]}", field: "spec.outcome.succeeded[0].field.values", msg: "at least 1 items"},
		{name: "empty value", spec: wfTarget + "ttlSecondsAfterSuccess: 1\noutcome: {succeeded: [{field: {path: status.phase, values: [\"\"]}}]}", field: "spec.outcome.succeeded[0].field.values[0]", msg: "at least 1 chars long"},
		{name: "33 values", spec: wfTarget + "ttlSecondsAfterSuccess: 1\noutcome: {succeeded: [{field: {path: status.phase, values: " + distinct(33) + "}}]}", field: "spec.outcome.succeeded[0].field.values", msg: "must have at most 32 items"},

		// Field paths.
		{name: "leading dot in a matcher path", spec: wfTarget + "ttlSecondsAfterSuccess: 1\noutcome: {succeeded: [{field: {path: .status.phase, values: [Succeeded]}}]}", field: "spec.outcome.succeeded[0].field.path", msg: "remove the leading '.': paths are written like status.completionTime"},
		{name: "leading dot in finishTime", spec: wfTarget + "ttlSecondsAfterSuccess: 1\noutcome: {succeeded: [{condition: {type: Done}}], finishTime: {field: .status.t}}", field: "spec.outcome.finishTime.field", msg: "remove the leading '.'"},
		{name: "leading dot in ownTTL", spec: wfTarget + wfOutcome + "ownTTL: {field: .spec.ttl}", field: "spec.ownTTL.field", msg: "remove the leading '.'"},
		{name: "list index in a path", spec: wfTarget + "ttlSecondsAfterSuccess: 1\noutcome: {succeeded: [{field: {path: \"status.conditions[0].status\", values: [\"True\"]}}]}", field: "spec.outcome.succeeded[0].field.path", msg: "must be a dot-separated field path"},
		{name: "empty path segment", spec: wfTarget + "ttlSecondsAfterSuccess: 1\noutcome: {succeeded: [{condition: {type: Done}}], finishTime: {field: status..t}}", field: "spec.outcome.finishTime.field", msg: "must be a dot-separated field path"},
		{name: "trailing dot", spec: wfTarget + wfOutcome + "ownTTL: {field: spec.}", field: "spec.ownTTL.field", msg: "must be a dot-separated field path"},
		{name: "empty path", spec: wfTarget + wfOutcome + "ownTTL: {field: \"\"}", field: "spec.ownTTL.field", msg: "must be a dot-separated field path"},
		{name: "path into metadata", spec: wfTarget + "ttlSecondsAfterSuccess: 1\noutcome: {finished: [{field: {path: metadata.labels.done, values: [\"yes\"]}}]}", field: "spec.outcome.finished[0].field.path", msg: "must not point into metadata"},
		{name: "ownTTL in metadata", spec: wfTarget + wfOutcome + "ownTTL: {field: metadata.annotations.ttl}", field: "spec.ownTTL.field", msg: "must not point into metadata"},

		// TTLs and history limits.
		{name: "negative TTL", spec: jobTarget + "ttlSecondsAfterSuccess: -1", field: "spec.ttlSecondsAfterSuccess", msg: "greater than or equal to 0"},
		{name: "TTL beyond int32", spec: jobTarget + "ttlSecondsAfterFailure: 2147483648", field: "spec.ttlSecondsAfterFailure", msg: "less than or equal to 2147483647", also: "must be of type integer with format int32 in spec.ttlSecondsAfterFailure"},
		{name: "empty keepLast", spec: jobTarget + "keepLast: {}", field: "spec.keepLast", msg: "spec.keepLast needs succeeded or failed"},
		{name: "keepLast with only groupBy", spec: jobTarget + "keepLast: {groupBy: {controllerOwner: true}}", field: "spec.keepLast", msg: "needs succeeded or failed"},
		{name: "negative keepLast", spec: jobTarget + "keepLast: {failed: -1}", field: "spec.keepLast.failed", msg: "greater than or equal to 0"},
		{name: "keepLast beyond int32", spec: jobTarget + "keepLast: {succeeded: 4294967296}", field: "spec.keepLast.succeeded", msg: "less than or equal to 2147483647", also: "must be of type integer with format int32 in spec.keepLast.succeeded"},
		{name: "groupBy with both", spec: jobTarget + "keepLast: {failed: 5, groupBy: {labelKey: app, controllerOwner: true}}", field: "spec.keepLast.groupBy", msg: "at most one of labelKey and controllerOwner"},
		{name: "bad label key", spec: jobTarget + "keepLast: {failed: 5, groupBy: {labelKey: \"my key\"}}", field: "spec.keepLast.groupBy.labelKey", msg: "must be a label key"},
		{name: "label key with two slashes", spec: jobTarget + "keepLast: {failed: 5, groupBy: {labelKey: a/b/c}}", field: "spec.keepLast.groupBy.labelKey", msg: "must be a label key"},
		{name: "empty label key", spec: jobTarget + "keepLast: {failed: 5, groupBy: {labelKey: \"\"}}", field: "spec.keepLast.groupBy.labelKey", msg: "must be a label key"},

		// Delete options.
		{name: "unknown propagationPolicy", spec: jobTarget + "ttlSecondsAfterSuccess: 1\npropagationPolicy: Cascade", field: "spec.propagationPolicy", msg: "Unsupported value"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := v.validate(policy(t, tc.spec))
			if tc.msg == "" {
				for _, e := range errs {
					t.Errorf("unexpected error: %v", e)
				}
				return
			}
			want := 1
			if tc.also != "" {
				want = 2
			}
			if len(errs) != want {
				t.Fatalf("got %d errors, want %d, at %s containing %q: %v", len(errs), want, tc.field, tc.msg, errs)
			}
			found := false
			for _, e := range errs {
				switch {
				case e.Field == tc.field && strings.Contains(e.Error(), tc.msg):
					found = true
				case tc.also != "" && e.Field == "<nil>" && strings.Contains(e.Error(), tc.also):
				default:
					t.Errorf("unexpected error %q", e.Error())
				}
			}
			if !found {
				t.Errorf("no error at %s containing %q in %v", tc.field, tc.msg, errs)
			}
		})
	}
}

// TestPropagationPolicyDefault checks the schema default the controller
// relies on.
func TestPropagationPolicyDefault(t *testing.T) {
	v := newPolicyValidator(t)
	obj := policy(t, jobTarget+"ttlSecondsAfterSuccess: 1")
	if errs := v.validate(obj); len(errs) > 0 {
		t.Fatal(errs)
	}
	spec := obj["spec"].(map[string]interface{})
	if got := spec["propagationPolicy"]; got != "Foreground" {
		t.Errorf("propagationPolicy defaulted to %v, want Foreground", got)
	}
}

// TestExamplesValid checks that every TTLPolicy in deploy/examples passes
// the schema and CEL rules.
func TestExamplesValid(t *testing.T) {
	v := newPolicyValidator(t)
	files, err := filepath.Glob(filepath.Join("..", "examples", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 10 {
		t.Fatalf("%d examples in deploy/examples, want the 10 the docs list", len(files))
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for i := 0; ; i++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: document %d: %v", f, i, err)
			}
			obj, err := decode(doc)
			if err != nil {
				t.Fatalf("%s: document %d: %v", f, i, err)
			}
			if obj["kind"] != "TTLPolicy" {
				continue
			}
			for _, e := range v.validate(obj) {
				t.Errorf("%s: document %d: %v", filepath.Base(f), i, e)
			}
		}
	}
}

// TestInt32FieldsBounded keeps every int32 field of the spec bounded, so an
// overflow is refused with an error that names the field instead of a
// decoding error in the controller.
func TestInt32FieldsBounded(t *testing.T) {
	crd := ttlPolicyCRD(t)
	var walk func(path string, s *apiextensionsv1.JSONSchemaProps)
	walk = func(path string, s *apiextensionsv1.JSONSchemaProps) {
		if s.Format == "int32" && strings.HasPrefix(path, ".spec") {
			if s.Minimum == nil || *s.Minimum != 0 || s.Maximum == nil || *s.Maximum != 2147483647 {
				t.Errorf("%s: int32 without minimum 0 and maximum 2147483647", path)
			}
		}
		for name, p := range s.Properties {
			walk(path+"."+name, &p)
		}
		if s.Items != nil && s.Items.Schema != nil {
			walk(path+"[]", s.Items.Schema)
		}
	}
	walk("", crd.Spec.Versions[0].Schema.OpenAPIV3Schema)
}

// TestPrinterColumns renders a TTLPolicy with the CRD's printer columns, as
// the apiserver does for kubectl get, and checks what each column shows.
func TestPrinterColumns(t *testing.T) {
	crd := ttlPolicyCRD(t)
	columns := crd.Spec.Versions[0].AdditionalPrinterColumns
	convertor, err := tableconvertor.New(columns)
	if err != nil {
		t.Fatal(err)
	}
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	obj, err := decode([]byte(`
apiVersion: jobkeeper.dev/v1alpha1
kind: TTLPolicy
metadata: {name: pipelineruns, creationTimestamp: "2026-01-02T03:04:05Z"}
spec:
  target: {apiVersion: tekton.dev/v1, kind: PipelineRun}
  namespaceSelector: {matchLabels: {team: a}}
  selector: {matchExpressions: [{key: tier, operator: Exists}]}
  outcome: {failed: [{condition: {type: Succeeded, status: "False"}}]}
  ttlSecondsAfterSuccess: 3600
  ttlSecondsAfterFailure: 86400
  keepLast: {succeeded: 3, failed: 5}
  dryRun: true
status:
  target: PipelineRun.tekton.dev
  matched: 40
  finished: 31
  noApplicableTTL: 2
  unreadableFinishTime: 1
  deleted: 118
  wouldDelete: 7
  nextExpiry: "` + future + `"
  conditions:
  - {type: Warning, status: "True", reason: NeverMatches, message: ttlSecondsAfterSuccess never applies, lastTransitionTime: "2026-01-02T03:04:05Z"}
  - {type: Ready, status: "True", reason: Ready, message: applied, lastTransitionTime: "2026-01-02T03:04:05Z"}
`))
	if err != nil {
		t.Fatal(err)
	}
	table, err := convertor.ConvertToTable(context.Background(), &unstructured.Unstructured{Object: obj}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(table.Rows) != 1 {
		t.Fatalf("got %d rows", len(table.Rows))
	}
	got := map[string]interface{}{}
	wide := map[string]bool{}
	for i, c := range table.ColumnDefinitions {
		got[c.Name] = table.Rows[0].Cells[i]
		wide[c.Name] = c.Priority > 0
	}
	want := []struct {
		name  string
		value interface{}
		wide  bool
	}{
		{"Target", "PipelineRun.tekton.dev", false},
		{"Success-TTL", int64(3600), false},
		{"Failure-TTL", int64(86400), false},
		{"Keep-Succeeded", int64(3), false},
		{"Keep-Failed", int64(5), false},
		{"Next-Expiry", future, false},
		{"Ready", "True", false},
		{"Reason", "Ready", false},
		{"Matched", int64(40), false},
		{"Finished", int64(31), false},
		{"Deleted", int64(118), false},
		{"Dry-Run", true, true},
		{"Would-Delete", int64(7), true},
		{"No-TTL", int64(2), true},
		{"Unreadable", int64(1), true},
		{"Namespace-Selector", `{"matchLabels":{"team":"a"}}`, true},
		{"Selector", `{"matchExpressions":[{"key":"tier","operator":"Exists"}]}`, true},
		{"Warning", "ttlSecondsAfterSuccess never applies", true},
	}
	for _, w := range want {
		v, ok := got[w.name]
		if !ok {
			t.Errorf("no column %s", w.name)
			continue
		}
		if v != w.value {
			t.Errorf("column %s = %#v, want %#v", w.name, v, w.value)
		}
		if wide[w.name] != w.wide {
			t.Errorf("column %s: shown only with -o wide = %v, want %v", w.name, wide[w.name], w.wide)
		}
	}
	if age, _ := got["Age"].(string); age == "" || strings.HasPrefix(age, "<") {
		t.Errorf("column Age = %#v", got["Age"])
	}
	if len(got) != len(want)+2 { // + Name and Age
		t.Errorf("%d columns, want %d: update this test with the new column", len(got), len(want)+2)
	}
}

// TestPrinterColumnPaths checks that each printer column's JSON path names a
// field of the schema, of a type the column can print, so that a typo does
// not leave a column empty forever.
func TestPrinterColumnPaths(t *testing.T) {
	crd := ttlPolicyCRD(t)
	root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	// conditions[?(@.type=="Ready")] -> conditions[].type, checked as a list
	// of objects with that field.
	filter := regexp.MustCompile(`\[\?\(@\.([A-Za-z]+)==".*?"\)\]`)
	// Which schema types each column type can print.
	printable := map[string][]string{
		"integer": {"integer"},
		"boolean": {"boolean"},
		"date":    {"string"},
		"string":  {"string", "object"},
	}
	for _, c := range crd.Spec.Versions[0].AdditionalPrinterColumns {
		if strings.HasPrefix(c.JSONPath, ".metadata.") {
			continue // metadata has no schema in a CRD
		}
		path := filter.ReplaceAllString(c.JSONPath, "[]")
		s := root
		for _, name := range strings.Split(strings.TrimPrefix(path, "."), ".") {
			list := strings.HasSuffix(name, "[]")
			name = strings.TrimSuffix(name, "[]")
			p, ok := s.Properties[name]
			if !ok {
				t.Errorf("column %s: %s: no field %q", c.Name, c.JSONPath, name)
				s = nil
				break
			}
			s = &p
			if list {
				if p.Items == nil || p.Items.Schema == nil {
					t.Errorf("column %s: %s: %q is not a list", c.Name, c.JSONPath, name)
					s = nil
					break
				}
				s = p.Items.Schema
			}
		}
		if s != nil && !slices.Contains(printable[c.Type], s.Type) {
			t.Errorf("column %s (%s): field of type %q", c.Name, c.Type, s.Type)
		}
	}
}
