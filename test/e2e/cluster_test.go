package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"jobkeeper.dev/jobkeeper/pkg/controlplane"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

// The chart's release as rendered into deploy/manifests by deploy/generate.sh.
const (
	// chartNamespace is the release namespace of the rendered manifests.
	chartNamespace = "jobkeeper"
	// chartServiceAccount is the ServiceAccount the controller runs as.
	chartServiceAccount = "jobkeeper"
	// chartLease is the leader election Lease the chart's Role allows.
	chartLease = "jobkeeper"
	// manifestsDir is the kustomize base, relative to this package.
	manifestsDir = "../../deploy/manifests"
	// applyManager is the field manager of the test's server-side applies.
	applyManager = "jobkeeper-e2e"
)

// The in-process control plane shared by the tests that run upstream
// components beside the binary; started on first use, stopped by TestMain.
var (
	sharedOnce sync.Once
	sharedCP   *controlplane.ControlPlane
	sharedErr  error
	sharedDir  string
	sharedLog  io.Closer
)

// inProcessControlPlane returns the package's embedded control plane
// (etcd, kube-apiserver with RBAC authorization, garbage collector), started
// in the test process so that the test can run upstream's controllers
// against it with admin credentials.
func inProcessControlPlane(t *testing.T) *controlplane.ControlPlane {
	t.Helper()
	sharedOnce.Do(func() {
		sharedDir, sharedErr = os.MkdirTemp("", "jobkeeper-e2e-cp-")
		if sharedErr != nil {
			return
		}
		// The apiserver and upstream's controllers log through klog.
		sharedLog, sharedErr = controlplane.RedirectKlog(filepath.Join(sharedDir, "logs", "test.log"))
		if sharedErr != nil {
			return
		}
		sharedCP, sharedErr = controlplane.Start(context.Background(), controlplane.Config{DataDir: sharedDir})
	})
	if sharedErr != nil {
		t.Fatalf("starting the embedded control plane: %v", sharedErr)
	}
	return sharedCP
}

// stopInProcessControlPlane stops the shared control plane if it was started.
func stopInProcessControlPlane(failed bool) {
	if sharedCP != nil {
		sharedCP.Stop()
	}
	if sharedLog != nil {
		sharedLog.Close()
	}
	if sharedDir == "" {
		return
	}
	if failed || os.Getenv("JOBKEEPER_TEST_KEEP") != "" {
		fmt.Fprintf(os.Stderr, "e2e: control plane data and logs kept in %s\n", sharedDir)
		return
	}
	os.RemoveAll(sharedDir)
}

// warningRecorder collects the apiserver's warnings (deprecated APIs,
// PodSecurity violations, unknown fields).
type warningRecorder struct {
	// mu guards warnings.
	mu sync.Mutex
	// warnings are the warning texts received, in order.
	warnings []string
}

// HandleWarningHeader implements rest.WarningHandler.
func (w *warningRecorder) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.warnings = append(w.warnings, text)
}

// take returns the warnings received since the last call.
func (w *warningRecorder) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.warnings
	w.warnings = nil
	return out
}

var _ rest.WarningHandler = (*warningRecorder)(nil)

// manifestObjects reads the kustomize base the way `kubectl apply -k` sees
// it: every document of every file listed in kustomization.yaml's resources.
func manifestObjects(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(manifestsDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatalf("reading kustomization.yaml: %v", err)
	}
	if len(k.Resources) == 0 {
		t.Fatal("kustomization.yaml lists no resources")
	}
	var objs []*unstructured.Unstructured
	for _, r := range k.Resources {
		f, err := os.Open(filepath.Join(manifestsDir, r))
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, decodeManifests(t, f)...)
		f.Close()
	}
	return objs
}

// decodeManifests splits a multi-document YAML stream into objects,
// skipping empty documents.
func decodeManifests(t *testing.T, r io.Reader) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			t.Fatalf("decoding manifests: %v", err)
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}

// applyManifests server-side applies objs in order with strict field
// validation, as `kubectl apply --server-side` would, refreshing the REST
// mapping after each CRD, as the admin of config. It returns the warnings
// the apiserver sent per object ("Kind/name").
func applyManifests(t *testing.T, admin *rest.Config, objs []*unstructured.Unstructured) map[string][]string {
	t.Helper()
	ctx := context.Background()
	rec := &warningRecorder{}
	config := rest.CopyConfig(admin)
	config.WarningHandler = rec
	dyn, err := dynamic.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(client.Discovery()))
	warnings := map[string][]string{}
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		id := gvk.Kind + "/" + obj.GetName()
		var mapping *meta.RESTMapping
		// A just-established CRD can take a moment to appear in discovery.
		framework.WaitFor(t, "a REST mapping for "+gvk.String(), func(context.Context) (bool, error) {
			mapping, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				mapper.Reset()
				return false, err
			}
			return true, nil
		})
		var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			if obj.GetNamespace() == "" {
				t.Fatalf("%s is namespaced but the manifest sets no namespace", id)
			}
			ri = dyn.Resource(mapping.Resource).Namespace(obj.GetNamespace())
		}
		body, err := obj.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{
			FieldManager:    applyManager,
			Force:           ptr.To(true),
			FieldValidation: metav1.FieldValidationStrict,
		}); err != nil {
			t.Fatalf("server-side apply of %s: %v", id, err)
		}
		if w := rec.take(); len(w) > 0 {
			warnings[id] = w
		}
		if gvk.Kind == "CustomResourceDefinition" {
			waitCRDEstablished(t, dyn, obj.GetName())
			mapper.Reset()
		}
	}
	return warnings
}

// waitCRDEstablished waits for the CRD's Established condition.
func waitCRDEstablished(t *testing.T, dyn dynamic.Interface, name string) {
	t.Helper()
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	framework.WaitFor(t, "CRD "+name+" to be established", func(ctx context.Context) (bool, error) {
		u, err := crds.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Established" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
}

// installChart applies the rendered manifests and returns the Deployment's
// controller container arguments.
func installChart(t *testing.T, cp *controlplane.ControlPlane) []string {
	t.Helper()
	objs := manifestObjects(t)
	applyManifests(t, cp.AdminConfig(), objs)
	return chartControllerArgs(t, objs)
}

// chartControllerArgs returns the args of the Deployment's controller
// container, which start with the "controller" subcommand.
func chartControllerArgs(t *testing.T, objs []*unstructured.Unstructured) []string {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		ctrs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for _, c := range ctrs {
			m := c.(map[string]any)
			if m["name"] != "controller" {
				continue
			}
			var args []string
			for _, a := range m["args"].([]any) {
				args = append(args, a.(string))
			}
			return args
		}
	}
	t.Fatal("the manifests have no Deployment with a controller container")
	return nil
}

// serviceAccountKubeconfig writes a kubeconfig that authenticates as the
// chart's ServiceAccount with a bound token from the TokenRequest API, as a
// pod's projected token would, and returns its path.
func serviceAccountKubeconfig(t *testing.T, cp *controlplane.ControlPlane) string {
	t.Helper()
	admin, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	tr, err := admin.CoreV1().ServiceAccounts(chartNamespace).CreateToken(context.Background(), chartServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token for %s/%s: %v", chartNamespace, chartServiceAccount, err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["jobkeeper"] = &clientcmdapi.Cluster{Server: cp.URL(), CertificateAuthority: cp.PKI().CACert()}
	kc.AuthInfos["jobkeeper"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["jobkeeper"] = &clientcmdapi.Context{Cluster: "jobkeeper", AuthInfo: "jobkeeper"}
	kc.CurrentContext = "jobkeeper"
	path := filepath.Join(t.TempDir(), "jobkeeper-sa.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// startChartReplica runs the image's binary (jobkeeper-controller) with the
// chart's Deployment arguments, authenticated as the chart's ServiceAccount,
// with the HTTP endpoints on free loopback ports (a pod has its own network
// namespace; here replicas share one). extra flags are appended (the last
// occurrence of a flag wins).
func startChartReplica(t *testing.T, args []string, kubeconfig string, extra ...string) *process {
	t.Helper()
	all := append(append([]string(nil), args...),
		"--kubeconfig="+kubeconfig,
		"--metrics-bind-address=127.0.0.1:0",
		"--health-probe-bind-address=127.0.0.1:0")
	return startBinary(t, leanBinary, append(all, extra...)...)
}

// adminClient returns an admin clientset whose writes carry userAgent, which
// becomes their default field manager.
func adminClient(t *testing.T, cp *controlplane.ControlPlane, userAgent string) kubernetes.Interface {
	t.Helper()
	config := cp.AdminConfig()
	config.UserAgent = userAgent
	c, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// createTestNamespace creates a namespace for one test.
func createTestNamespace(t *testing.T, c kubernetes.Interface, prefix string) string {
	t.Helper()
	ns, err := c.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// runTestKubelet plays the kubelet for every pod of namespace: each pod is
// reported Succeeded (a container that exited 0) as soon as it appears. It
// runs until the test ends.
func runTestKubelet(t *testing.T, c kubernetes.Interface, namespace string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	factory := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithNamespace(namespace))
	pods := factory.Core().V1().Pods()
	queue := workqueue.NewTyped[string]()
	if _, err := pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if p, ok := obj.(*corev1.Pod); ok {
				queue.Add(p.Name)
			}
		},
	}); err != nil {
		t.Fatal(err)
	}
	lister := pods.Lister()
	factory.Start(ctx.Done())
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				name, quit := queue.Get()
				if quit {
					return
				}
				p, err := lister.Pods(namespace).Get(name)
				if err == nil && p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
					err = framework.SetPodPhase(ctx, c, p, corev1.PodSucceeded)
					if apierrors.IsConflict(err) {
						// The cache is behind; try again with the next version.
						time.Sleep(10 * time.Millisecond)
						queue.Add(name)
					}
				}
				queue.Done(name)
			}
		}()
	}
	t.Cleanup(func() {
		cancel()
		queue.ShutDown()
		wg.Wait()
		factory.Shutdown()
	})
}

// forbiddenLines returns the lines of out that report an authorization failure.
func forbiddenLines(out string) []string {
	var bad []string
	for _, l := range strings.Split(out, "\n") {
		low := strings.ToLower(l)
		if strings.Contains(low, "forbidden") || strings.Contains(low, " 403") || strings.Contains(low, "unauthorized") {
			bad = append(bad, l)
		}
	}
	return bad
}
