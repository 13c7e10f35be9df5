// Package keeplast tests TTLPolicy history limits (keepLast) against a real
// control plane: exactly N objects stay per group after a burst of finished
// objects, and across a controller killed mid-way and restarted. It has its
// own package, so that no other controller acts on its policies while its
// controller is stopped.
package keeplast

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclientset "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/deploy/crds"
	"jobkeeper.dev/jobkeeper/pkg/apis/jobkeeper/v1alpha1"
	"jobkeeper.dev/jobkeeper/pkg/controller/ttlafterfinished"
	"jobkeeper.dev/jobkeeper/pkg/manager"
	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
	"jobkeeper.dev/jobkeeper/test/manifests"
)

func TestMain(m *testing.M) { framework.Main(m) }

// runGVR is the resource of the test's Tekton-shaped runs.
var runGVR = schema.GroupVersionResource{Group: "keeplast.example.com", Version: "v1", Resource: "runs"}

// Limits of the test's policy, per pipeline.
const (
	keepSucceeded = 10
	keepFailed    = 5
)

// startController starts a TTL-after-finished controller and returns the
// function that stops it (as a kill would: nothing is flushed).
func startController(t *testing.T) func() {
	t.Helper()
	cfg := framework.Config()
	cfg.QPS, cfg.Burst = 500, 1000
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(manager.CacheTransform))
	c, err := ttlafterfinished.New(ctx, ttlafterfinished.Options{}, ttlafterfinished.Clients{Client: client, Dynamic: dynamic.NewForConfigOrDie(cfg)}, factory)
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	done := make(chan struct{})
	go func() { c.Run(ctx, 5); close(done) }()
	return func() { cancel(); <-done; factory.Shutdown() }
}

func TestKeepLastBurstAndRestart(t *testing.T) {
	ctx := context.Background()
	cfg := framework.Config()
	cfg.QPS, cfg.Burst = 1000, 2000
	ext := apiextensionsclientset.NewForConfigOrDie(cfg)
	if err := crds.Install(ctx, ext); err != nil {
		t.Fatal(err)
	}
	installRunCRD(t, ext)
	dyn := dynamic.NewForConfigOrDie(cfg)
	ns := framework.CreateNamespace(t)

	pol := builder.MakeTTLPolicy("runs").Target("keeplast.example.com/v1", "Run").
		Succeeded(builder.Cond("Succeeded", "True")).Failed(builder.Cond("Succeeded", "False")).FinishTime("status.completionTime").
		KeepLast(keepSucceeded, keepFailed).GroupByLabel("example.com/pipeline").Obj()
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(pol)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: content}
	u.SetGroupVersionKind(v1alpha1.TTLPolicyKind)
	if _, err := dyn.Resource(v1alpha1.TTLPolicyResource).Create(ctx, u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	stop := startController(t)
	// 1,000 finished runs in a burst, over three pipelines, finishing in
	// an order unrelated to their creation order.
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var all []run
	for i := 0; i < 1000; i++ {
		all = append(all, run{
			name:     fmt.Sprintf("run-%04d", i),
			pipeline: fmt.Sprintf("p%d", i%3),
			failed:   i%4 == 0,
			at:       base.Add(time.Duration((i*7919)%1000) * time.Second),
		})
	}
	createRuns(t, dyn, ns, all[:600])
	// Kill the controller while it is deleting, create the rest while it
	// is down, and start a new one: it must rebuild every group from its
	// initial list and end exact.
	stop()
	createRuns(t, dyn, ns, all[600:])
	stop = startController(t)
	defer stop()
	waitExact(t, dyn, ns, all)

	// Stable: nothing more goes, even after the policy's resync.
	time.Sleep(2 * time.Second)
	waitExact(t, dyn, ns, all)
}

// run is one test object.
type run struct {
	name, pipeline string
	failed         bool
	at             time.Time
}

// createRuns creates runs in parallel with their finished status.
func createRuns(t *testing.T, dyn dynamic.Interface, ns string, runs []run) {
	t.Helper()
	api := dyn.Resource(runGVR).Namespace(ns)
	var wg sync.WaitGroup
	errs := make(chan error, len(runs))
	work := make(chan run)
	for w := 0; w < 16; w++ {
		wg.Go(func() {
			for r := range work {
				obj := &unstructured.Unstructured{Object: map[string]interface{}{
					"apiVersion": "keeplast.example.com/v1", "kind": "Run",
					"metadata": map[string]interface{}{"name": r.name, "namespace": ns, "labels": map[string]interface{}{"example.com/pipeline": r.pipeline}},
				}}
				created, err := api.Create(context.Background(), obj, metav1.CreateOptions{})
				if err != nil {
					errs <- err
					continue
				}
				status := "True"
				if r.failed {
					status = "False"
				}
				ts := r.at.Format(time.RFC3339)
				created.Object["status"] = map[string]interface{}{
					"completionTime": ts,
					"conditions":     []interface{}{map[string]interface{}{"type": "Succeeded", "status": status, "reason": "Done", "lastTransitionTime": ts}},
				}
				if _, err := api.UpdateStatus(context.Background(), created, metav1.UpdateOptions{}); err != nil {
					errs <- err
				}
			}
		})
	}
	for _, r := range runs {
		work <- r
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// expectedSurvivors are, per pipeline and outcome, the newest runs by
// finish time (ties by name).
func expectedSurvivors(all []run) []string {
	groups := map[string][]run{}
	for _, r := range all {
		k := fmt.Sprintf("%s/%v", r.pipeline, r.failed)
		groups[k] = append(groups[k], r)
	}
	var out []string
	for _, rs := range groups {
		sort.Slice(rs, func(i, j int) bool {
			if !rs[i].at.Equal(rs[j].at) {
				return rs[i].at.After(rs[j].at)
			}
			return rs[i].name < rs[j].name
		})
		keep := keepSucceeded
		if rs[0].failed {
			keep = keepFailed
		}
		for _, r := range rs[:min(keep, len(rs))] {
			out = append(out, r.name)
		}
	}
	sort.Strings(out)
	return out
}

// waitExact waits until the stored runs (not being deleted) are exactly the
// expected survivors, and fails at once if one of those is gone.
func waitExact(t *testing.T, dyn dynamic.Interface, ns string, all []run) {
	t.Helper()
	want := expectedSurvivors(all)
	wantSet := map[string]bool{}
	for _, n := range want {
		wantSet[n] = true
	}
	var got []string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := dyn.Resource(runGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		got = got[:0]
		present := map[string]bool{}
		for _, o := range list.Items {
			present[o.GetName()] = true
			if o.GetDeletionTimestamp() == nil {
				got = append(got, o.GetName())
			}
		}
		for n := range wantSet {
			if !present[n] {
				return false, fmt.Errorf("%s, one of the newest runs of its pipeline, was deleted", n)
			}
		}
		sort.Strings(got)
		return len(got) == len(want), nil
	})
	if err != nil {
		t.Fatalf("%v: %d runs left, want %d", err, len(got), len(want))
	}
	for _, n := range got {
		if !wantSet[n] {
			t.Errorf("%s is left but is not among the newest", n)
		}
	}
	if len(want) != 3*(keepSucceeded+keepFailed) {
		t.Fatalf("test setup: %d survivors expected", len(want))
	}
}

// installRunCRD installs a namespaced kind with Tekton's status shape.
func installRunCRD(t *testing.T, ext apiextensionsclientset.Interface) {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "runs.keeplast.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "keeplast.example.com",
			Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "runs", Singular: "run", Kind: "Run", ListKind: "RunList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true),
				}},
			}},
		},
	}
	if err := manifests.InstallCRD(context.Background(), ext, crd, time.Minute); err != nil {
		t.Fatal(err)
	}
}
