package ttlafterfinished

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclientset "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"jobkeeper.dev/jobkeeper/pkg/apis/jobkeeper/v1alpha1"
	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
	"jobkeeper.dev/jobkeeper/test/manifests"
)

// goldenDir holds the real status shapes the policy engine's golden tests
// use; each shape names its example policy in deploy/examples.
const goldenDir = "../../../pkg/controller/ttlafterfinished/policy/testdata/golden"

// TestExamplesApply: every example in deploy/examples is accepted by the
// apiserver (schema and CEL), as a server-side dry run.
func TestExamplesApply(t *testing.T) {
	e := setup(t)
	files, err := filepath.Glob("../../../deploy/examples/*.yaml")
	if err != nil || len(files) < 10 {
		t.Fatalf("examples: %v, %v", files, err)
	}
	for _, f := range files {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(mustReadFile(t, f), &u.Object); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if _, err := e.dyn.Resource(v1alpha1.TTLPolicyResource).Create(e.ctx, u, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("%s is refused: %v", filepath.Base(f), err)
		}
	}
}

// TestExamplesDeleteOnTime installs, for each real CRD shape, its minimal
// CRD and its example policy (restricted to the test's namespace), then
// creates the shape's objects with their real statuses: the finished ones
// (finished in 2025, long past their TTL) are deleted, the running ones and
// those with a malformed finish time are kept, and the policy's status
// counts them.
func TestExamplesDeleteOnTime(t *testing.T) {
	e := setup(t)
	ext := apiextensionsclientset.NewForConfigOrDie(framework.Config())
	dirs, err := os.ReadDir(goldenDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		crdFile := filepath.Join(goldenDir, d.Name(), "crd.yaml")
		if _, err := os.Stat(crdFile); err != nil {
			continue // Jobs and Pods: covered by the other tests
		}
		t.Run(d.Name(), func(t *testing.T) {
			t.Parallel()
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := yaml.UnmarshalStrict(mustReadFile(t, crdFile), crd); err != nil {
				t.Fatal(err)
			}
			installCRD(t, ext, crd)
			v := crd.Spec.Versions[0]
			gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: v.Name, Resource: crd.Spec.Names.Plural}
			// Argo's CRDs have no status subresource: its controller writes
			// status with the object.
			statusSubresource := v.Subresources != nil && v.Subresources.Status != nil

			example := strings.TrimSpace(string(mustReadFile(t, filepath.Join(goldenDir, d.Name(), "example"))))
			pol := &v1alpha1.TTLPolicy{}
			if err := yaml.UnmarshalStrict(mustReadFile(t, filepath.Join("../../../deploy/examples", example)), pol); err != nil {
				t.Fatal(err)
			}
			pol.Name = e.ns + "-" + pol.Name
			pol.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": e.ns}}
			pol.Spec.KeepLast = nil // history limits have their own test
			start := time.Now()
			e.createPolicy(t, pol)
			e.waitPolicy(t, pol.Name, "Ready", func(p *v1alpha1.TTLPolicy) bool {
				return readyIs(p, metav1.ConditionTrue, v1alpha1.ReasonReady)
			})
			t.Logf("policy Ready after %v", time.Since(start).Round(time.Millisecond))
			start = time.Now()

			var gone, kept []string
			unreadable := 0
			for _, obj := range readDocs(t, filepath.Join(goldenDir, d.Name(), "objects.yaml")) {
				expect := obj.GetAnnotations()["test.jobkeeper.dev/expect"]
				obj.SetNamespace(e.ns)
				// The owners named in the shapes do not exist here, and the
				// garbage collector would delete their dependents: the
				// kept objects must stay for another reason than this.
				obj.SetOwnerReferences(nil)
				if err := e.createWithStatus(gvr, statusSubresource, obj); err != nil {
					if expect == "unreadable" && apierrors.IsInvalid(err) {
						// The CRD's schema refuses the malformed time: it
						// can never be stored, so it needs no handling.
						continue
					}
					t.Fatalf("creating %s with its status: %v", obj.GetName(), err)
				}
				switch expect {
				case "succeeded", "failed":
					gone = append(gone, obj.GetName())
				default:
					kept = append(kept, obj.GetName())
					if expect == "unreadable" {
						unreadable++
					}
				}
			}
			err := wait.PollUntilContextTimeout(e.ctx, framework.Interval, framework.Timeout, true, func(ctx context.Context) (bool, error) {
				// Deleted means the delete call was made: with Foreground
				// propagation the object then waits for the garbage
				// collector, which discovers a new CRD only at its next
				// discovery resync (up to 10 s here).
				for _, n := range gone {
					o, err := e.dyn.Resource(gvr).Namespace(e.ns).Get(ctx, n, metav1.GetOptions{})
					if !apierrors.IsNotFound(err) && (err != nil || o.GetDeletionTimestamp() == nil) {
						return false, nil
					}
				}
				return true, nil
			})
			if err != nil {
				t.Fatalf("expired objects %v not all deleted: %v", gone, err)
			}
			t.Logf("objects created and the expired ones deleted (delete calls made) in %v", time.Since(start).Round(time.Millisecond))
			start = time.Now()
			e.waitPolicy(t, pol.Name, "status counts", func(p *v1alpha1.TTLPolicy) bool {
				return p.Status.Deleted == int64(len(gone)) && p.Status.Matched == int32(len(kept)) && p.Status.UnreadableFinishTime == int32(unreadable)
			})
			t.Logf("status counted them after %v", time.Since(start).Round(time.Millisecond))
			for _, n := range kept {
				o, err := e.dyn.Resource(gvr).Namespace(e.ns).Get(e.ctx, n, metav1.GetOptions{})
				if err != nil || o.GetDeletionTimestamp() != nil {
					t.Errorf("%s was deleted: it is running or its finish time is unreadable (%v)", n, err)
				}
			}
		})
	}
}

// TestTargetCRDDeleted: deleting the CRD a policy targets turns it
// Ready=False (UnknownKind) within seconds, not at the next periodic resync.
func TestTargetCRDDeleted(t *testing.T) {
	e := setup(t)
	ext := apiextensionsclientset.NewForConfigOrDie(framework.Config())
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(mustReadFile(t, filepath.Join(goldenDir, "rayjob", "crd.yaml")), crd); err != nil {
		t.Fatal(err)
	}
	// A group of its own, so that no other test's policy targets it.
	crd.Spec.Group = "doomed.example.com"
	crd.Name = crd.Spec.Names.Plural + "." + crd.Spec.Group
	installCRD(t, ext, crd)
	name := e.ns + "-doomed"
	e.createPolicy(t, func() *v1alpha1.TTLPolicy {
		pol := &v1alpha1.TTLPolicy{}
		if err := yaml.UnmarshalStrict(mustReadFile(t, "../../../deploy/examples/rayjobs.yaml"), pol); err != nil {
			t.Fatal(err)
		}
		pol.Name = name
		pol.Spec.Target.APIVersion = "doomed.example.com/v1"
		return pol
	}())
	e.waitPolicy(t, name, "Ready", func(p *v1alpha1.TTLPolicy) bool { return readyIs(p, metav1.ConditionTrue, v1alpha1.ReasonReady) })
	// The target informer's watch fails as the CRD goes; the controller
	// then refreshes discovery and compiles the policy again at once (the
	// unit test TestTargetWatchError checks that path on its own).
	if err := ext.ApiextensionsV1().CustomResourceDefinitions().Delete(e.ctx, crd.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	e.waitPolicy(t, name, "Ready=False after its CRD was deleted", func(p *v1alpha1.TTLPolicy) bool {
		return readyIs(p, metav1.ConditionFalse, v1alpha1.ReasonUnknownKind)
	})
	t.Logf("Ready=False %v after the CRD deletion", time.Since(start).Round(time.Millisecond))
}

// createWithStatus creates obj with the status it carries: through the
// status subresource after the create when the CRD has one (as each
// project's controller writes it), else in the create itself. An object
// whose status is refused is deleted again.
func (e *env) createWithStatus(gvr schema.GroupVersionResource, statusSubresource bool, obj *unstructured.Unstructured) error {
	client := e.dyn.Resource(gvr).Namespace(obj.GetNamespace())
	if !statusSubresource {
		_, err := client.Create(e.ctx, obj, metav1.CreateOptions{FieldManager: fieldManager})
		return err
	}
	status := obj.Object["status"]
	created, err := client.Create(e.ctx, obj, metav1.CreateOptions{FieldManager: fieldManager})
	if err != nil {
		return err
	}
	created.Object["status"] = status
	if _, err := client.UpdateStatus(e.ctx, created, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
		_ = client.Delete(e.ctx, obj.GetName(), metav1.DeleteOptions{})
		return err
	}
	return nil
}

// installCRD creates a CRD (or keeps an existing one), waits until it is
// established, and deletes it when the test ends.
func installCRD(t *testing.T, ext apiextensionsclientset.Interface, crd *apiextensionsv1.CustomResourceDefinition) {
	t.Helper()
	if err := manifests.InstallCRD(context.Background(), ext, crd, framework.Timeout); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = ext.ApiextensionsV1().CustomResourceDefinitions().Delete(context.Background(), crd.Name, metav1.DeleteOptions{})
	})
}

func mustReadFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// readDocs decodes a multi-document YAML file into unstructured objects.
func readDocs(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := manifests.ReadObjects(path)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// TestBesideKyverno: with Kyverno's cleanuppolicies.kyverno.io installed
// beside ours, each name resolves to its own kind, as kubectl resolves
// resource names and short names, and neither controller's objects are
// touched by the other's name.
func TestBesideKyverno(t *testing.T) {
	e := setup(t)
	ext := apiextensionsclientset.NewForConfigOrDie(framework.Config())
	// The names, short names and categories Kyverno's CRDs declare.
	for _, k := range []struct{ plural, singular, kind, short string }{
		{"cleanuppolicies", "cleanuppolicy", "CleanupPolicy", "cleanpol"},
		{"clustercleanuppolicies", "clustercleanuppolicy", "ClusterCleanupPolicy", "ccleanpol"},
	} {
		installCRD(t, ext, &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: k.plural + ".kyverno.io"},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{
				Group: "kyverno.io",
				Scope: apiextensionsv1.NamespaceScoped,
				Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: k.plural, Singular: k.singular, Kind: k.kind, ListKind: k.kind + "List",
					ShortNames: []string{k.short}, Categories: []string{"kyverno"}},
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
					Name: "v2", Served: true, Storage: true,
					Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptrTo(true)}},
				}},
			},
		})
	}
	disco := memory.NewMemCacheClient(discovery.NewDiscoveryClientForConfigOrDie(framework.Config()))
	mapper := restmapper.NewShortcutExpander(restmapper.NewDeferredDiscoveryRESTMapper(disco), disco, nil)
	for name, want := range map[string]string{
		"ttlpolicies": "jobkeeper.dev", "ttlpolicy": "jobkeeper.dev", "ttlp": "jobkeeper.dev",
		"cleanuppolicies": "kyverno.io", "cleanuppolicy": "kyverno.io", "cleanpol": "kyverno.io",
	} {
		var gvr schema.GroupVersionResource
		err := wait.PollUntilContextTimeout(e.ctx, framework.Interval, framework.Timeout, true, func(ctx context.Context) (bool, error) {
			disco.Invalidate()
			var err error
			gvr, err = mapper.ResourceFor(schema.GroupVersionResource{Resource: name})
			return err == nil && gvr.Group == want, nil
		})
		if err != nil {
			t.Errorf("%q resolves to %v, want group %s", name, gvr, want)
		}
	}
	// A Kyverno policy is left alone, and a TTLPolicy still works.
	kyverno := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "kyverno.io/v2", "kind": "CleanupPolicy",
		"metadata": map[string]interface{}{"name": "theirs", "namespace": e.ns},
		"spec":     map[string]interface{}{"schedule": "*/5 * * * *"},
	}}
	kgvr := schema.GroupVersionResource{Group: "kyverno.io", Version: "v2", Resource: "cleanuppolicies"}
	if _, err := e.dyn.Resource(kgvr).Namespace(e.ns).Create(e.ctx, kyverno, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	name := e.ns + "-ours"
	e.createPolicy(t, builder.MakeTTLPolicy(name).Selector("test", e.ns).TTLAfterSuccess(0).Obj())
	e.waitPolicy(t, name, "Ready", func(p *v1alpha1.TTLPolicy) bool { return readyIs(p, metav1.ConditionTrue, v1alpha1.ReasonReady) })
	e.sentinel(t)
	got, err := e.dyn.Resource(kgvr).Namespace(e.ns).Get(e.ctx, "theirs", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Kyverno's policy: %v", err)
	}
	if len(got.GetManagedFields()) != 1 || got.GetDeletionTimestamp() != nil {
		t.Errorf("Kyverno's policy was written by someone else: %+v", got.GetManagedFields())
	}
}
