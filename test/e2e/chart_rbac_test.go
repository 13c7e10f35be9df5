package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/apis/jobkeeper/v1alpha1"
	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

// chartRendersDir holds the chart rendered by deploy/generate.sh for each
// combination of the controllers value (controllers-<combo>.yaml);
// `deploy/generate.sh --verify` fails when they are stale.
const chartRendersDir = "testdata/chart"

// rbacCombo is one value of the chart's controllers list.
type rbacCombo struct {
	// name is the render's file suffix.
	name string
	// job and ttl say which controllers the combination runs.
	job, ttl bool
	// gates are the render's featureGates, as up's --feature-gates (the
	// cluster's), and the chart's own; "" for none.
	gates string
	// upControllers are the controllers `jobkeeper up` runs itself: none
	// when the tested process runs the Job controller (both would manage
	// the same Jobs), the Job controller when only the TTL controller is
	// tested (someone must finish the Jobs it deletes).
	upControllers string
}

// TestChartRBACPerControllers installs the chart's RBAC as rendered for each
// combination of the controllers value ({job}, {ttl-after-finished}, both)
// on a `jobkeeper up` and runs the image's binary with the rendered
// Deployment's arguments as the chart's ServiceAccount (a TokenRequest
// token), under exactly those permissions:
//   - the ServiceAccount may make every call the selected controllers make
//     and none that only the others make (SubjectAccessReviews);
//   - with the Job controller, a Job runs to Complete with exact counts
//     although the answer to its first pod create is lost (a proxy between
//     controller and apiserver turns the 201 into a 504): the controller
//     must read that pod back by name before it syncs the Job again, which
//     is how a Job wedges when pods/get is not granted;
//   - with the TTL controller, a finished Job with ttlSecondsAfterFinished
//     and a finished Pod with jobkeeper's TTL annotation are deleted, and a
//     TTLPolicy's Ready condition is written;
//   - no request of the controller is refused (the proxy sees every
//     response) and its log has no authorization failure.
func TestChartRBACPerControllers(t *testing.T) {
	for _, combo := range []rbacCombo{
		{name: "job", job: true, upControllers: ""},
		{name: "ttl-after-finished", ttl: true, upControllers: "job"},
		{name: "both", job: true, ttl: true, upControllers: ""},
		{name: "gang", job: true, gates: "GenericWorkload=true,WorkloadWithJob=true", upControllers: ""},
	} {
		t.Run(combo.name, func(t *testing.T) { testChartRBAC(t, combo) })
	}
}

func testChartRBAC(t *testing.T, combo rbacCombo) {
	ctx := context.Background()
	objs := chartRender(t, combo.name)
	args := chartControllerArgs(t, objs)
	managedBy := flagValue(t, args, "--managed-by")
	var want []string
	if combo.job {
		want = append(want, "job")
	}
	if combo.ttl {
		want = append(want, "ttl-after-finished")
	}
	if got := flagValue(t, args, "--controllers"); got != strings.Join(want, ",") {
		t.Fatalf("the render runs --controllers=%s, want %s", got, strings.Join(want, ","))
	}

	gates := ""
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--feature-gates="); ok {
			gates = v
		}
	}
	if gates != combo.gates {
		t.Fatalf("the render runs --feature-gates=%q, want %q", gates, combo.gates)
	}
	upArgs := []string{"--controllers=" + combo.upControllers}
	if combo.gates != "" {
		upArgs = append(upArgs, "--feature-gates="+combo.gates+",GangScheduling=true")
	}
	up, c, kc := startUp(t, t.TempDir(), upArgs...)
	defer up.stop(t)
	admin, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	applyRBACObjects(t, admin, objs)
	checkChartAccess(t, c, combo.job, combo.ttl, combo.gates != "")

	proxy := startFaultProxy(t, admin, proxyFaults{loseCreate: combo.job})
	p := startChartReplica(t, args, tokenKubeconfig(t, c, proxy.url, proxy.caData))
	p.waitForOutput(t, healthAddr, 30*time.Second)
	ns := "default"

	var jobs []*batchv1.Job
	if combo.job {
		b := builder.MakeJob("managed", ns).ManagedBy(managedBy).Parallelism(2).Completions(3)
		if combo.gates != "" {
			// Gang-eligible: a Workload and a PodGroup come first.
			b = builder.MakeJob("managed", ns).ManagedBy(managedBy).Indexed().Parallelism(2).Completions(2)
		}
		if combo.ttl {
			b = b.TTLSecondsAfterFinished(2)
		}
		j, err := c.BatchV1().Jobs(ns).Create(ctx, b.Obj(), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	if combo.ttl && !combo.job {
		// Finished by up's own Job controller.
		j, err := c.BatchV1().Jobs(ns).Create(ctx, builder.MakeJob("unclaimed", ns).TTLSecondsAfterFinished(2).Obj(), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	var pod *corev1.Pod
	var policy *unstructured.Unstructured
	dyn, err := dynamic.NewForConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	if combo.ttl {
		pod, err = c.CoreV1().Pods(ns).Create(ctx, builder.MakePod("ttl-pod", ns).Annotation(v1alpha1.TTLAnnotation, "0").Obj(), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// A policy that selects nothing: its status is written all the same.
		policy = builder.MakeTTLPolicy("rbac-"+combo.name).NamespaceSelector("jobkeeper.dev/e2e", "no-such-namespace").
			TTLAfterSuccess(3600).Unstructured()
		if _, err := dyn.Resource(v1alpha1.TTLPolicyResource).Create(ctx, policy, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	for _, j := range jobs {
		got := waitJobFinished(t, c, j, 90*time.Second, p)
		want := ptr.Deref(j.Spec.Completions, 1)
		if !hasCondition(batchv1.JobComplete)(got) || got.Status.Succeeded != want || got.Status.Failed != 0 {
			t.Errorf("Job %s: succeeded=%d failed=%d conditions=%v, want %d succeeded, 0 failed, Complete",
				j.Name, got.Status.Succeeded, got.Status.Failed, conditionTypes(got), want)
		}
		if combo.job {
			pods, err := framework.JobPods(ctx, c, got)
			if err != nil {
				t.Fatal(err)
			}
			for _, pod := range pods {
				if slices.Contains(pod.Finalizers, batchv1.JobTrackingFinalizer) {
					t.Errorf("Job %s, pod %s still holds %s", j.Name, pod.Name, batchv1.JobTrackingFinalizer)
				}
			}
		}
		if combo.ttl {
			waitGone(t, fmt.Sprintf("Job %s to be deleted by its TTL", j.Name), p, func(ctx context.Context) error {
				_, err := c.BatchV1().Jobs(ns).Get(ctx, j.Name, metav1.GetOptions{})
				return err
			})
		}
	}
	if combo.ttl {
		waitGone(t, "Pod "+pod.Name+" to be deleted by its TTL annotation", p, func(ctx context.Context) error {
			_, err := c.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			return err
		})
		framework.WaitFor(t, "the TTLPolicy's Ready condition", func(ctx context.Context) (bool, error) {
			u, err := dyn.Resource(v1alpha1.TTLPolicyResource).Get(ctx, policy.GetName(), metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, c := range conds {
				if m, _ := c.(map[string]any); m["type"] == v1alpha1.PolicyReady && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
	}

	if combo.gates != "" {
		pgs, err := c.SchedulingV1alpha2().PodGroups(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(pgs.Items) != 1 {
			t.Errorf("PodGroups %v (%v), want the gang Job's one", pgs, err)
		}
	}
	p.stop(t)
	if checked := strings.Contains(p.output(), serverCheckPassed); checked != combo.job {
		t.Errorf("the controller logged %q: %v, want %v (the start-up check runs with the Job controller)", serverCheckPassed, checked, combo.job)
	}
	if combo.job {
		lost, reads := proxy.lostCreate()
		if lost == "" {
			t.Errorf("the proxy lost no pod create's answer; the test did not exercise the read-back")
		} else if !slices.Contains(reads, http.StatusOK) {
			t.Errorf("the controller did not read pod %s back after its create's answer was lost (answers to its reads: %v)", lost, reads)
		}
	}
	if bad := proxy.refused(); len(bad) > 0 {
		t.Errorf("the apiserver refused requests of the controller:\n%s", joinLines(bad))
	}
	if bad := forbiddenLines(p.output()); len(bad) > 0 {
		t.Errorf("the controller logged authorization failures:\n%s", joinLines(bad))
	}
	if strings.Contains(p.output(), "Warning:") {
		t.Errorf("the apiserver warned the controller:\n%s", p.output())
	}
}

// chartRender reads the chart as rendered for a controllers combination.
func chartRender(t *testing.T, combo string) []*unstructured.Unstructured {
	t.Helper()
	path := filepath.Join(chartRendersDir, "controllers-"+combo+".yaml")
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("%v (run deploy/generate.sh)", err)
	}
	defer f.Close()
	return decodeManifests(t, f)
}

// flagValue returns the value of --name=value in args.
func flagValue(t *testing.T, args []string, name string) string {
	t.Helper()
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	t.Fatalf("args %q have no %s=", args, name)
	return ""
}

// rbacResources maps the kinds applyRBACObjects applies to their resources.
var rbacResources = map[schema.GroupKind]schema.GroupVersionResource{
	{Kind: "Namespace"}:      {Version: "v1", Resource: "namespaces"},
	{Kind: "ServiceAccount"}: {Version: "v1", Resource: "serviceaccounts"},
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}:        {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}: {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
	{Group: "rbac.authorization.k8s.io", Kind: "Role"}:               {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
	{Group: "rbac.authorization.k8s.io", Kind: "RoleBinding"}:        {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
}

// applyRBACObjects server-side applies the Namespace, the ServiceAccount
// and the RBAC objects of a render, in order; the rest (Deployment,
// Service, PodDisruptionBudget) has nothing to run it under `up`.
func applyRBACObjects(t *testing.T, admin *rest.Config, objs []*unstructured.Unstructured) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	applied := 0
	for _, o := range objs {
		gvr, ok := rbacResources[o.GroupVersionKind().GroupKind()]
		if !ok {
			continue
		}
		body, err := o.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(gvr)
		if ns := o.GetNamespace(); ns != "" {
			ri = dyn.Resource(gvr).Namespace(ns)
		}
		if _, err := ri.Patch(context.Background(), o.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{
			FieldManager: applyManager, Force: ptr.To(true), FieldValidation: metav1.FieldValidationStrict,
		}); err != nil {
			t.Fatalf("applying %s %s: %v", o.GetKind(), o.GetName(), err)
		}
		applied++
	}
	if applied < 4 {
		t.Fatalf("the render has %d RBAC objects; want at least a Namespace, a ServiceAccount, a ClusterRole and its binding", applied)
	}
}

// saAccess is one API call, for a SubjectAccessReview.
type saAccess struct {
	group, resource, subresource, verb, namespace, name string
}

func (a saAccess) String() string {
	return a.verb + " " + strings.Trim(strings.Join([]string{a.group, a.resource, a.subresource, a.namespace, a.name}, "/"), "/")
}

// Who makes a call: the Job controller, the TTL controller, both, or the
// manager (leader election, for any combination).
const (
	byJob = 1 << iota
	byTTL
	// byGang is the Job controller with WorkloadWithJob on.
	byGang
	byAny = byJob | byTTL
)

// chartCalls are the calls the controllers make (docs/deploy.md, RBAC),
// each with who makes it; the chart must allow exactly those of the
// selected controllers. team-a stands for any namespace.
var chartCalls = []struct {
	access saAccess
	by     int
}{
	{saAccess{"batch", "jobs", "", "list", "", ""}, byAny},
	{saAccess{"batch", "jobs", "", "watch", "", ""}, byAny},
	{saAccess{"batch", "jobs", "", "get", "team-a", ""}, byAny},
	{saAccess{"batch", "jobs", "", "delete", "team-a", ""}, byTTL},
	{saAccess{"batch", "jobs", "status", "update", "team-a", ""}, byJob},
	{saAccess{"batch", "jobs", "finalizers", "update", "team-a", ""}, byJob},
	// The start-up check's dry-run create, in the release namespace only.
	{saAccess{"batch", "jobs", "", "create", chartNamespace, ""}, byJob},
	{saAccess{"", "pods", "", "list", "", ""}, byAny},
	{saAccess{"", "pods", "", "watch", "", ""}, byAny},
	{saAccess{"", "pods", "", "get", "team-a", ""}, byAny},
	{saAccess{"", "pods", "", "create", "team-a", ""}, byJob},
	{saAccess{"", "pods", "", "patch", "team-a", ""}, byJob},
	{saAccess{"", "pods", "", "delete", "team-a", ""}, byAny},
	{saAccess{"", "namespaces", "", "list", "", ""}, byTTL},
	{saAccess{"", "namespaces", "", "watch", "", ""}, byTTL},
	{saAccess{"jobkeeper.dev", "ttlpolicies", "", "list", "", ""}, byTTL},
	{saAccess{"jobkeeper.dev", "ttlpolicies", "", "watch", "", ""}, byTTL},
	{saAccess{"jobkeeper.dev", "ttlpolicies", "status", "update", "", ""}, byTTL},
	{saAccess{"apiextensions.k8s.io", "customresourcedefinitions", "", "get", "", ""}, byTTL},
	{saAccess{"", "events", "", "create", "team-a", ""}, byAny},
	{saAccess{"", "events", "", "patch", "team-a", ""}, byAny},
	{saAccess{"coordination.k8s.io", "leases", "", "create", chartNamespace, ""}, byAny},
	{saAccess{"coordination.k8s.io", "leases", "", "get", chartNamespace, chartLease}, byAny},
	{saAccess{"coordination.k8s.io", "leases", "", "update", chartNamespace, chartLease}, byAny},
	{saAccess{"scheduling.k8s.io", "workloads", "", "list", "", ""}, byGang},
	{saAccess{"scheduling.k8s.io", "workloads", "", "watch", "", ""}, byGang},
	{saAccess{"scheduling.k8s.io", "workloads", "", "create", "team-a", ""}, byGang},
	{saAccess{"scheduling.k8s.io", "podgroups", "", "list", "", ""}, byGang},
	{saAccess{"scheduling.k8s.io", "podgroups", "", "watch", "", ""}, byGang},
	{saAccess{"scheduling.k8s.io", "podgroups", "", "create", "team-a", ""}, byGang},
}

// neverCalled is a sample of what no controller does, denied to every
// combination.
var neverCalled = []saAccess{
	{"", "secrets", "", "get", "team-a", ""},
	{"", "pods", "", "update", "team-a", ""},
	{"", "pods", "status", "update", "team-a", ""},
	{"batch", "jobs", "", "create", "team-a", ""},
	{"batch", "jobs", "", "update", "team-a", ""},
	{"batch", "jobs", "", "patch", "team-a", ""},
	{"batch", "cronjobs", "", "list", "", ""},
	{"scheduling.k8s.io", "workloads", "", "delete", "team-a", ""},
	{"scheduling.k8s.io", "podgroups", "", "update", "team-a", ""},
	{"", "nodes", "", "list", "", ""},
	{"jobkeeper.dev", "ttlpolicies", "", "create", "", ""},
	{"jobkeeper.dev", "ttlpolicies", "", "delete", "", ""},
	{"apiextensions.k8s.io", "customresourcedefinitions", "", "list", "", ""},
	{"coordination.k8s.io", "leases", "", "update", chartNamespace, "someone-else"},
	{"coordination.k8s.io", "leases", "", "update", "kube-system", chartLease},
}

// checkChartAccess asks the apiserver (SubjectAccessReview) what the
// chart's ServiceAccount may do once the chart for the given controllers is
// applied: every call of those controllers is allowed, the calls only the
// other controller makes and a sample of calls no controller makes are
// denied. It first waits until the authorizer has seen the new roles.
func checkChartAccess(t *testing.T, c kubernetes.Interface, job, ttl, gang bool) {
	t.Helper()
	mask := 0
	if job {
		mask |= byJob
	}
	if gang {
		mask |= byGang
	}
	if ttl {
		mask |= byTTL
	}
	var allowed, denied []saAccess
	for _, call := range chartCalls {
		if call.by&mask != 0 {
			allowed = append(allowed, call.access)
		} else {
			denied = append(denied, call.access)
		}
	}
	denied = append(denied, neverCalled...)

	user := "system:serviceaccount:" + chartNamespace + ":" + chartServiceAccount
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + chartNamespace, "system:authenticated"}
	review := func(ctx context.Context, a saAccess) (*authorizationv1.SubjectAccessReview, error) {
		return c.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, Groups: groups,
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Group: a.group, Resource: a.resource, Subresource: a.subresource, Verb: a.verb, Namespace: a.namespace, Name: a.name,
				},
			},
		}, metav1.CreateOptions{})
	}
	// The RBAC authorizer reads roles from an informer: a rule just
	// applied is not in force at once. An allowed call that stays denied
	// fails the wait; the first one is reported.
	missing := allowed
	waitUntil(10*time.Second, func(ctx context.Context) (bool, error) {
		var still []saAccess
		for _, a := range missing {
			if sar, err := review(ctx, a); err != nil || !sar.Status.Allowed {
				still = append(still, a)
			}
		}
		missing = still
		return len(missing) == 0, nil
	})
	for _, a := range missing {
		t.Errorf("the chart's ServiceAccount may not %s (still denied after 10 s)", a)
	}
	for _, a := range denied {
		sar, err := review(context.Background(), a)
		if err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed {
			t.Errorf("the chart's ServiceAccount may %s, which the controllers never do (%s)", a, sar.Status.Reason)
		}
	}
}

// waitUntil polls cond every framework.Interval until it is true, it
// errs, or timeout passes.
func waitUntil(timeout time.Duration, cond func(ctx context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		ok, err := cond(ctx)
		if ok || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(framework.Interval):
		}
	}
}

// waitGone waits up to a minute for get to answer NotFound.
func waitGone(t *testing.T, what string, p *process, get func(ctx context.Context) error) {
	t.Helper()
	var last error
	err := waitUntil(time.Minute, func(ctx context.Context) (bool, error) {
		last = get(ctx)
		return apierrors.IsNotFound(last), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v (last read: %v)\ncontroller output:\n%s", what, err, last, p.output())
	}
}

// tokenKubeconfig writes a kubeconfig that authenticates as the chart's
// ServiceAccount with a bound TokenRequest token, as a pod's projected token
// would, and talks to server (whose certificate caData signs), and returns
// its path.
func tokenKubeconfig(t *testing.T, c kubernetes.Interface, server string, caData []byte) string {
	t.Helper()
	tr, err := c.CoreV1().ServiceAccounts(chartNamespace).CreateToken(context.Background(), chartServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token for %s/%s: %v", chartNamespace, chartServiceAccount, err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["up"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caData}
	kc.AuthInfos["sa"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["sa"] = &clientcmdapi.Context{Cluster: "up", AuthInfo: "sa"}
	kc.CurrentContext = "sa"
	path := filepath.Join(t.TempDir(), "sa.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	// The kubeconfig must authenticate as the ServiceAccount, not merely
	// be accepted.
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	sa, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	review, err := sa.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("who am I, with the ServiceAccount's token: %v", err)
	}
	if want := "system:serviceaccount:" + chartNamespace + ":" + chartServiceAccount; review.Status.UserInfo.Username != want {
		t.Fatalf("the token authenticates as %q, want %q", review.Status.UserInfo.Username, want)
	}
	return path
}

// serverCheckPassed is logged by the controller when the start-up check
// passes.
const serverCheckPassed = "The apiserver has what the Job controller needs"

// podsCollection and jobsCollection match the paths of pod and Job creates.
var (
	podsCollection = regexp.MustCompile(`^/api/v1/namespaces/[^/]+/pods$`)
	jobsCollection = regexp.MustCompile(`^/apis/batch/v1/namespaces/[^/]+/jobs$`)
)

// proxyFaults are the faults a faultProxy injects.
type proxyFaults struct {
	// loseCreate loses the answer to the first pod create that succeeded.
	loseCreate bool
	// dropManagedBy answers dry-run Job creates as an apiserver with the
	// JobManagedBy feature gate off would: without spec.managedBy.
	dropManagedBy bool
}

// faultProxy is a TLS reverse proxy in front of the apiserver for one
// client. It records the answer to every request and, when told to, loses
// the answer to the first pod create that succeeded: the client gets a 504
// Gateway Timeout for a pod that exists, as when a response is lost on the
// way back.
type faultProxy struct {
	// url is the proxy's address, and caData its certificate in PEM,
	// for the client's kubeconfig.
	url    string
	caData []byte
	// next carries requests to the apiserver.
	next http.RoundTripper
	// faults are the faults it injects.
	faults proxyFaults
	// mu guards the fields below.
	mu sync.Mutex
	// answers are "METHOD path -> code" for every request, in order.
	answers []string
	// lost is the name of the pod whose create's answer was lost.
	lost string
	// lostPath is the pod's path, to spot the client's reads of it.
	lostPath string
	// reads are the codes answered to GETs of the lost pod.
	reads []int
}

// startFaultProxy serves a faultProxy to the apiserver of admin on a free
// loopback port until the test ends. Credentials are the client's own: the
// proxy only forwards its Authorization header.
func startFaultProxy(t *testing.T, admin *rest.Config, faults proxyFaults) *faultProxy {
	t.Helper()
	target, err := url.Parse(admin.Host)
	if err != nil {
		t.Fatal(err)
	}
	next, err := rest.TransportFor(&rest.Config{Host: admin.Host, TLSClientConfig: rest.TLSClientConfig{
		CAData: admin.CAData, CAFile: admin.CAFile, ServerName: admin.ServerName,
	}})
	if err != nil {
		t.Fatal(err)
	}
	fp := &faultProxy{next: next, faults: faults}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = fp
	rp.FlushInterval = -1
	// TLS, since client-go sends no bearer token over plain HTTP.
	srv := httptest.NewTLSServer(rp)
	t.Cleanup(srv.Close)
	fp.url = srv.URL
	fp.caData = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	return fp
}

// RoundTrip forwards req, records the answer, and loses it if it is the
// armed pod create.
func (f *faultProxy) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := f.next.RoundTrip(req)
	code := 0
	if resp != nil {
		code = resp.StatusCode
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answers = append(f.answers, fmt.Sprintf("%s %s -> %d", req.Method, req.URL.RequestURI(), code))
	if req.Method == http.MethodGet && f.lostPath != "" && req.URL.Path == f.lostPath {
		f.reads = append(f.reads, code)
	}
	if err == nil && f.faults.dropManagedBy && req.Method == http.MethodPost && jobsCollection.MatchString(req.URL.Path) &&
		req.URL.Query().Get("dryRun") == metav1.DryRunAll && code == http.StatusCreated {
		return withoutManagedBy(resp)
	}
	if err != nil || !f.faults.loseCreate || f.lost != "" || req.Method != http.MethodPost ||
		!podsCollection.MatchString(req.URL.Path) || code != http.StatusCreated {
		return resp, err
	}
	// The Job controller asks for the created pod's metadata only.
	pod, err := decodeAnswer[*metav1.PartialObjectMetadata](resp)
	if err != nil {
		return nil, err
	}
	f.lost = pod.Name
	f.lostPath = req.URL.Path + "/" + pod.Name
	status := `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Timeout","code":504,` +
		`"message":"the e2e proxy lost the answer to this create (the pod was created)"}`
	return &http.Response{
		Status:        "504 Gateway Timeout",
		StatusCode:    http.StatusGatewayTimeout,
		Proto:         resp.Proto,
		ProtoMajor:    resp.ProtoMajor,
		ProtoMinor:    resp.ProtoMinor,
		Header:        http.Header{"Content-Type": []string{"application/json"}},
		Body:          io.NopCloser(strings.NewReader(status)),
		ContentLength: int64(len(status)),
		Request:       req,
	}, nil
}

// lostCreate returns the pod whose create's answer was lost ("" if none)
// and the codes answered to the client's reads of it.
func (f *faultProxy) lostCreate() (string, []int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lost, append([]int(nil), f.reads...)
}

// refused returns the requests answered 401 or 403.
func (f *faultProxy) refused() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, a := range f.answers {
		if strings.HasSuffix(a, " -> 401") || strings.HasSuffix(a, " -> 403") {
			out = append(out, a)
		}
	}
	return out
}

// answerCodecs decode the apiserver's answers: built-in objects, and the
// metadata-only answers (meta.k8s.io/v1 PartialObjectMetadata) a client
// asks for with Accept's as= parameter.
var answerCodecs = func() serializer.CodecFactory {
	s := runtime.NewScheme()
	utilruntime.Must(scheme.AddToScheme(s))
	utilruntime.Must(metav1.AddMetaToScheme(s))
	return serializer.NewCodecFactory(s)
}()

// decodeAnswer reads and closes the body of resp, the apiserver's answer
// to a create, and decodes it as a T.
func decodeAnswer[T runtime.Object](resp *http.Response) (T, error) {
	var zero T
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return zero, err
	}
	obj, _, err := answerCodecs.UniversalDeserializer().Decode(body, nil, nil)
	if err != nil {
		return zero, fmt.Errorf("decoding the answer to a create: %w", err)
	}
	t, ok := obj.(T)
	if !ok {
		return zero, fmt.Errorf("a create answered with a %T, want a %T", obj, zero)
	}
	return t, nil
}

// withoutManagedBy rewrites resp, the answer to a Job create, as JSON
// without the Job's spec.managedBy.
func withoutManagedBy(resp *http.Response) (*http.Response, error) {
	job, err := decodeAnswer[*batchv1.Job](resp)
	if err != nil {
		return nil, err
	}
	job.Spec.ManagedBy = nil
	job.TypeMeta = metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"}
	out, err := json.Marshal(job)
	if err != nil {
		return nil, err
	}
	resp.Header.Set("Content-Type", "application/json")
	resp.Header.Del("Content-Length")
	resp.Body = io.NopCloser(bytes.NewReader(out))
	resp.ContentLength = int64(len(out))
	return resp, nil
}
