package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	psaapi "k8s.io/pod-security-admission/api"
	psapolicy "k8s.io/pod-security-admission/policy"
)

// TestChartManifestsApply server-side applies the plain manifests
// (deploy/manifests, rendered from the Helm chart with its default values;
// CI checks that they match the chart) to the embedded control plane with
// strict field validation, twice (install, then an idempotent upgrade), and
// checks what a reviewer of the chart would: every object kind is there and
// accepted without warnings, the CRD is the one of deploy/crds, the pod
// template meets the restricted Pod Security Standard, and the
// ServiceAccount may do what the controllers do and nothing more.
// The ServiceMonitor is off by default, so it is not rendered and not
// applied (it needs the Prometheus Operator's CRD).
func TestChartManifestsApply(t *testing.T) {
	cp := inProcessControlPlane(t)
	objs := manifestObjects(t)

	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.GetKind())
	}
	for _, want := range []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
		"CustomResourceDefinition", "Deployment", "Service", "PodDisruptionBudget"} {
		if !slices.Contains(kinds, want) {
			t.Errorf("the manifests have no %s (kinds: %v)", want, kinds)
		}
	}
	if slices.Contains(kinds, "ServiceMonitor") {
		t.Errorf("the default manifests render a ServiceMonitor; it must be opt-in")
	}

	checkCRDsMatchSource(t, objs)
	checkDeployment(t, objs)

	for round, what := range []string{"install", "upgrade"} {
		warnings := applyManifests(t, cp.AdminConfig(), objs)
		if len(warnings) > 0 {
			t.Errorf("%s (apply %d): the apiserver warned: %v", what, round+1, warnings)
		}
	}
	checkServiceAccountAccess(t, cp.AdminConfig())
}

// checkCRDsMatchSource checks that the manifests carry deploy/crds unchanged.
func checkCRDsMatchSource(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	sources, err := filepath.Glob("../../deploy/crds/*.yaml")
	if err != nil || len(sources) == 0 {
		t.Fatalf("no CRD sources in deploy/crds (%v)", err)
	}
	for _, src := range sources {
		f, err := os.Open(src)
		if err != nil {
			t.Fatal(err)
		}
		want := decodeManifests(t, f)[0]
		f.Close()
		var got *unstructured.Unstructured
		for _, o := range objs {
			if o.GetKind() == "CustomResourceDefinition" && o.GetName() == want.GetName() {
				got = o
			}
		}
		if got == nil {
			t.Errorf("the manifests lack CRD %s of %s", want.GetName(), src)
			continue
		}
		if diff := cmp.Diff(want.Object, got.Object); diff != "" {
			t.Errorf("CRD %s differs from %s (-source +manifests):\n%s", want.GetName(), src, diff)
		}
	}
}

// checkDeployment checks the Deployment's HA and hardening settings.
func checkDeployment(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	var d appsv1.Deployment
	for _, o := range objs {
		if o.GetKind() == "Deployment" {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, &d, true); err != nil {
				t.Fatalf("decoding the Deployment: %v", err)
			}
		}
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas = %v, want 2", d.Spec.Replicas)
	}
	pod := d.Spec.Template
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	for _, want := range []string{"controller", "--leader-elect=true", "--leader-elect-resource-namespace=" + chartNamespace,
		"--managed-by=jobkeeper.dev/job-controller", "--controllers=job,ttl-after-finished"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args %q lack %q", c.Args, want)
		}
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("liveness probe %+v, want GET /healthz", c.LivenessProbe)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness probe %+v, want GET /readyz", c.ReadinessProbe)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("resource requests %v: want cpu and memory", c.Resources.Requests)
	}
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("container securityContext %+v: want readOnlyRootFilesystem", sc)
	}
	evaluator, err := psapolicy.NewEvaluator(psapolicy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	restricted := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}
	for _, r := range evaluator.EvaluatePod(restricted, &pod.ObjectMeta, &pod.Spec) {
		if !r.Allowed {
			t.Errorf("pod template violates the restricted Pod Security Standard: %s: %s", r.ForbiddenReason, r.ForbiddenDetail)
		}
	}
}

// checkServiceAccountAccess checks with SubjectAccessReviews that the
// chart's ServiceAccount, as installed by the default manifests (both
// controllers), may make every call the controllers make and nothing more.
func checkServiceAccountAccess(t *testing.T, admin *rest.Config) {
	t.Helper()
	c, err := kubernetes.NewForConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	checkChartAccess(t, c, true, true, false)
}
