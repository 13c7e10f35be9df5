package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclientset "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"jobkeeper.dev/jobkeeper/pkg/apis/jobkeeper/v1alpha1"
	"jobkeeper.dev/jobkeeper/test/manifests"
)

// goldenShapes holds each project's CRD and objects with its real status
// shapes; each shape names its example in deploy/examples.
const goldenShapes = "../../pkg/controller/ttlafterfinished/policy/testdata/golden"

// TestUpTTLPolicyExamples applies every example TTLPolicy of deploy/examples
// to `jobkeeper up`, with the project CRDs they target installed, and waits
// for each to be Ready with no Warning. Then it runs Tekton PipelineRuns, the
// shape whose failures were never deleted before TTLPolicy, through the
// example end to end: finished runs (succeeded, failed, cancelled, timed
// out) are deleted once their TTL has passed, running ones are kept.
func TestUpTTLPolicyExamples(t *testing.T) {
	ctx := context.Background()
	up, _, kc := startUp(t, t.TempDir())
	defer up.stop(t)
	cfg := restConfig(t, kc)
	ext := apiextensionsclientset.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)

	crdFiles, err := filepath.Glob(filepath.Join(goldenShapes, "*", "crd.yaml"))
	if err != nil || len(crdFiles) < 8 {
		t.Fatalf("golden CRDs: %v, %v", crdFiles, err)
	}
	for _, f := range crdFiles {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(readFile(t, f), crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if err := manifests.InstallCRD(ctx, ext, crd, time.Minute); err != nil {
			t.Fatal(err)
		}
	}

	policies := dyn.Resource(v1alpha1.TTLPolicyResource)
	examples, err := filepath.Glob("../../deploy/examples/*.yaml")
	if err != nil || len(examples) < 10 {
		t.Fatalf("examples: %v, %v", examples, err)
	}
	var names []string
	for _, f := range examples {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(readFile(t, f), &u.Object); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if _, err := policies.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("applying %s: %v", filepath.Base(f), err)
		}
		names = append(names, u.GetName())
	}
	for _, name := range names {
		var last *v1alpha1.TTLPolicy
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			u, err := policies.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			last = &v1alpha1.TTLPolicy{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, last); err != nil {
				return false, err
			}
			ready := apimeta.FindStatusCondition(last.Status.Conditions, v1alpha1.PolicyReady)
			return ready != nil && ready.Status == metav1.ConditionTrue && ready.ObservedGeneration == last.Generation, nil
		})
		if err != nil {
			t.Fatalf("example %s not Ready: %v; status %+v", name, err, last)
		}
		for _, c := range last.Status.Conditions {
			if c.Type != v1alpha1.PolicyReady && c.Status == metav1.ConditionTrue {
				t.Errorf("example %s: condition %s %s: %s", name, c.Type, c.Reason, c.Message)
			}
		}
	}

	// Tekton PipelineRuns end to end, with the example's TTLs shortened so
	// the test does not wait an hour: the objects finished in 2025, so a TTL
	// of 1 s has passed for every finished one.
	pr := schema.GroupVersionResource{Group: "tekton.dev", Version: "v1", Resource: "pipelineruns"}
	pol, err := policies.Get(ctx, "tekton-pipelineruns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(pol.Object, int64(1), "spec", "ttlSecondsAfterSuccess")
	_ = unstructured.SetNestedField(pol.Object, int64(1), "spec", "ttlSecondsAfterFailure")
	unstructured.RemoveNestedField(pol.Object, "spec", "keepLast")
	if _, err := policies.Update(ctx, pol, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var gone, kept []string
	objs, err := manifests.ReadObjects(filepath.Join(goldenShapes, "tekton-pipelinerun", "objects.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range objs {
		expect := obj.GetAnnotations()["test.jobkeeper.dev/expect"]
		status := obj.Object["status"]
		obj.SetNamespace("default")
		obj.SetOwnerReferences(nil) // the owners they name do not exist here
		created, err := dyn.Resource(pr).Namespace("default").Create(ctx, obj, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating %s: %v", obj.GetName(), err)
		}
		created.Object["status"] = status
		if _, err := dyn.Resource(pr).Namespace("default").UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			if expect == "unreadable" && apierrors.IsInvalid(err) {
				continue // refused by the schema: never stored
			}
			t.Fatalf("status of %s: %v", obj.GetName(), err)
		}
		if expect == "succeeded" || expect == "failed" {
			gone = append(gone, obj.GetName())
		} else {
			kept = append(kept, obj.GetName())
		}
	}
	if len(gone) < 3 || len(kept) < 1 {
		t.Fatalf("shape has %d finished and %d kept PipelineRuns", len(gone), len(kept))
	}
	start := time.Now()
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, n := range gone {
			o, err := dyn.Resource(pr).Namespace("default").Get(ctx, n, metav1.GetOptions{})
			if !apierrors.IsNotFound(err) && (err != nil || o.GetDeletionTimestamp() == nil) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("finished PipelineRuns %v not all deleted: %v", gone, err)
	}
	t.Logf("%d finished PipelineRuns deleted %v after their creation", len(gone), time.Since(start).Round(time.Millisecond))
	for _, n := range kept {
		o, err := dyn.Resource(pr).Namespace("default").Get(ctx, n, metav1.GetOptions{})
		if err != nil || o.GetDeletionTimestamp() != nil {
			t.Errorf("PipelineRun %s was deleted: it is running or its finish time is unreadable (%v)", n, err)
		}
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
