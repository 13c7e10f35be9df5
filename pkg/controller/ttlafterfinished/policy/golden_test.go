package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"jobkeeper.dev/jobkeeper/pkg/apis/jobkeeper/v1alpha1"
	"jobkeeper.dev/jobkeeper/test/manifests"
)

// Annotations of the golden objects.
const (
	expectAnnotation = "test.jobkeeper.dev/expect"
	ttlAnnotation    = "test.jobkeeper.dev/ttl"
)

// TestGoldenShapes runs each example policy of deploy/examples against
// objects with the real status shapes of the project it targets
// (testdata/golden/<shape>: a minimal CRD built from the project's API types,
// and objects annotated with the expected verdict). For each object it
// checks the outcome, the finish time, and the TTL that applies (the
// policy's for the outcome, or the object's own TTL field).
func TestGoldenShapes(t *testing.T) {
	shapes, err := os.ReadDir("testdata/golden")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, d := range shapes {
		if !d.IsDir() {
			continue
		}
		seen++
		dir := filepath.Join("testdata/golden", d.Name())
		// A shape may come with several CRDs of one project (Argo ships a
		// full and a minimal one); the objects are read under each.
		crds, err := filepath.Glob(filepath.Join(dir, "crd*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if len(crds) == 0 {
			crds = []string{""} // Jobs and Pods: built-in kinds
		}
		for _, crdFile := range crds {
			name := d.Name()
			if crdFile != "" && filepath.Base(crdFile) != "crd.yaml" {
				name += "/" + strings.TrimSuffix(filepath.Base(crdFile), ".yaml")
			}
			t.Run(name, func(t *testing.T) { checkShape(t, dir, crdFile) })
		}
	}
	if seen < 10 {
		t.Errorf("%d shapes, want at least 10", seen)
	}
}

// checkShape runs the example a shape directory names against its objects,
// with the CRD in crdFile (none for built-in kinds).
func checkShape(t *testing.T, dir, crdFile string) {
	example := strings.TrimSpace(string(mustRead(t, filepath.Join(dir, "example"))))
	pol := &v1alpha1.TTLPolicy{}
	if err := yaml.UnmarshalStrict(mustRead(t, filepath.Join("../../../../deploy/examples", example)), pol); err != nil {
		t.Fatalf("%s: %v", example, err)
	}
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(PodGVK, meta.RESTScopeNamespace)
	mapper.Add(JobGVK, meta.RESTScopeNamespace)
	var crdSchema map[string]interface{}
	if crdFile != "" {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(mustRead(t, crdFile), crd); err != nil {
			t.Fatalf("%s: %v", crdFile, err)
		}
		v := crd.Spec.Versions[0] // the version the example targets comes first
		mapper.AddSpecific(schema.GroupVersionKind{Group: crd.Spec.Group, Version: v.Name, Kind: crd.Spec.Names.Kind},
			schema.GroupVersionResource{Group: crd.Spec.Group, Version: v.Name, Resource: crd.Spec.Names.Plural},
			schema.GroupVersionResource{Group: crd.Spec.Group, Version: v.Name, Resource: crd.Spec.Names.Singular}, meta.RESTScopeNamespace)
		var err error
		if crdSchema, err = runtime.DefaultUnstructuredConverter.ToUnstructured(v.Schema.OpenAPIV3Schema); err != nil {
			t.Fatal(err)
		}
	}
	p := Compile(pol, mapper).CheckSchema(crdSchema)
	if !p.Ready {
		t.Fatalf("example %s is not ready: %s: %s", example, p.Reason, p.Message)
	}
	if len(p.Warnings) > 0 {
		t.Errorf("example %s has warnings: %q", example, p.Warnings)
	}
	kinds := map[string]int{}
	for _, obj := range readObjects(t, filepath.Join(dir, "objects.yaml")) {
		m, _ := meta.Accessor(obj)
		expect := m.GetAnnotations()[expectAnnotation]
		kinds[expect]++
		t.Run(m.GetName(), func(t *testing.T) {
			f := p.Rule.Read(obj)
			switch expect {
			case "running":
				if f.Finished {
					t.Fatalf("a running object reads as finished: %+v", f)
				}
				return
			case "unreadable":
				if !f.Finished || !errors.Is(f.Err, ErrNoFinishTime) {
					t.Fatalf("want finished with an unreadable finish time, got %+v", f)
				}
				return
			case "succeeded", "failed":
				if !f.Expirable() || f.Failed != (expect == "failed") {
					t.Fatalf("want %s, got %+v", expect, f)
				}
			default:
				t.Fatalf("unknown expectation %q", expect)
			}
			if f.At.Before(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)) {
				t.Errorf("finish time %v was not read from the object", f.At)
			}
			c := Candidate{Policy: p, State: f}
			if own, ok, err := p.OwnTTL(obj); err != nil {
				t.Fatal(err)
			} else if ok {
				c.Own = &own
			}
			v := Choose([]Candidate{c})
			if v == nil {
				t.Fatal("no TTL applies")
			}
			want, err := strconv.Atoi(m.GetAnnotations()[ttlAnnotation])
			if err != nil {
				t.Fatalf("object lacks %s: %v", ttlAnnotation, err)
			}
			if v.TTL != time.Duration(want)*time.Second {
				t.Errorf("TTL %v, want %ds", v.TTL, want)
			}
		})
	}
	// Every shape covers a running, a succeeded and a failed object,
	// and every CRD shape a malformed finish time.
	for _, k := range []string{"running", "succeeded", "failed"} {
		if kinds[k] == 0 {
			t.Errorf("no %s object", k)
		}
	}
	if crdSchema != nil && kinds["unreadable"] == 0 {
		t.Error("no object with a malformed finish time")
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// readObjects decodes a multi-document YAML file: Pods and Jobs as typed
// objects (as the controller's shared informers hold them), others as
// unstructured.
func readObjects(t *testing.T, path string) []runtime.Object {
	t.Helper()
	docs, err := manifests.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []runtime.Object
	for _, d := range docs {
		var typed runtime.Object
		switch d.Object.GetKind() {
		case "Pod":
			typed = &corev1.Pod{}
		case "Job":
			typed = &batchv1.Job{}
		default:
			out = append(out, d.Object)
			continue
		}
		if err := yaml.UnmarshalStrict(d.Raw, typed); err != nil {
			t.Fatal(err)
		}
		out = append(out, typed)
	}
	return out
}
