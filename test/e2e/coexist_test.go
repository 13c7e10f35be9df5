package e2e

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	upstreamjob "k8s.io/kubernetes/pkg/controller/job"

	"jobkeeper.dev/jobkeeper/pkg/apis/jobkeeper/v1alpha1"
	"jobkeeper.dev/jobkeeper/pkg/controller/job"
	"jobkeeper.dev/jobkeeper/pkg/manager"
	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

// upstreamManager is the field manager of upstream's Job controller here: the
// user agent of its client, as in kube-controller-manager.
const upstreamManager = "kube-controller-manager"

// jobTimeout bounds the wait for the Jobs of the coexistence test.
const jobTimeout = 2 * time.Minute

// startUpstreamJobController runs k8s.io/kubernetes/pkg/controller/job with
// admin credentials in the test process, as kube-controller-manager would,
// until the test ends.
func startUpstreamJobController(t *testing.T, c kubernetes.Interface) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	factory := informers.NewSharedInformerFactory(c, 0)
	jc, err := upstreamjob.NewController(ctx, c, factory.Core().V1().Pods(), factory.Batch().V1().Jobs(), nil, nil)
	if err != nil {
		t.Fatalf("creating upstream's Job controller: %v", err)
	}
	factory.Start(ctx.Done())
	done := make(chan struct{})
	go func() {
		defer close(done)
		jc.Run(ctx, 5)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		factory.Shutdown()
	})
}

// TestCoexistWithUpstreamJobController runs upstream's Job controller
// (playing kube-controller-manager) and the jobkeeper binary side by side on
// one apiserver with RBAC authorization. jobkeeper runs with the chart's
// Deployment arguments, as the chart's ServiceAccount (a TokenRequest token)
// with the chart's RBAC applied. A mix of Jobs, half of them with
// spec.managedBy: jobkeeper.dev/job-controller, must all complete, each
// handled only by its own controller: the Job's status writers and the pods'
// writers (managedFields) name one controller, no finalizer is left, and
// jobkeeper never hits an authorization error.
func TestCoexistWithUpstreamJobController(t *testing.T) {
	cp := inProcessControlPlane(t)
	args := installChart(t, cp)
	kubeconfig := serviceAccountKubeconfig(t, cp)
	kcm := adminClient(t, cp, upstreamManager)
	c := adminClient(t, cp, "jobkeeper-e2e")
	ns := createTestNamespace(t, c, "coexist")
	runTestKubelet(t, c, ns)
	startUpstreamJobController(t, kcm)
	p := startChartReplica(t, args, kubeconfig)
	p.waitForOutput(t, healthAddr, 30*time.Second)

	// A TTLPolicy that selects nothing: jobkeeper's TTL controller must
	// still read it and write its status as the ServiceAccount.
	dyn, err := dynamic.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	policy := builder.MakeTTLPolicy("coexist-"+ns).Target("batch/v1", "Job").
		NamespaceSelector("jobkeeper.dev/e2e", "no-such-namespace").TTLAfterSuccess(3600).Unstructured()
	if _, err := dyn.Resource(v1alpha1.TTLPolicyResource).Create(context.Background(), policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	type want struct {
		// manager is the only writer of the Job's status and its pods.
		manager string
		// completions is the expected succeeded count.
		completions int32
	}
	jobs := map[string]want{}
	var created []*batchv1.Job
	for _, owner := range []struct {
		prefix, managedBy, manager string
	}{
		{"kcm", "", upstreamManager},
		{"kcm-explicit", batchv1.JobControllerName, upstreamManager},
		{"jk", manager.DefaultManagedBy, job.FieldManager},
	} {
		for _, shape := range []struct {
			suffix                   string
			parallelism, completions int32
			indexed                  bool
		}{
			{"nonindexed", 2, 4, false},
			{"indexed", 3, 3, true},
		} {
			b := builder.MakeJob(owner.prefix+"-"+shape.suffix, ns).Parallelism(shape.parallelism).Completions(shape.completions)
			if shape.indexed {
				b = b.Indexed()
			}
			if owner.managedBy != "" {
				b = b.ManagedBy(owner.managedBy)
			}
			j, err := c.BatchV1().Jobs(ns).Create(context.Background(), b.Obj(), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			created = append(created, j)
			jobs[j.Name] = want{manager: owner.manager, completions: shape.completions}
		}
	}

	for _, j := range created {
		got := waitJobFinished(t, c, j, jobTimeout, p)
		w := jobs[j.Name]
		if got.Status.Succeeded != w.completions || got.Status.Failed != 0 || !hasCondition(batchv1.JobComplete)(got) {
			t.Errorf("Job %s: succeeded=%d failed=%d conditions=%v, want %d succeeded, 0 failed, Complete",
				j.Name, got.Status.Succeeded, got.Status.Failed, conditionTypes(got), w.completions)
		}
		if diff := cmp.Diff([]string{w.manager}, statusManagers(got)); diff != "" {
			t.Errorf("Job %s: status writers (-want +got):\n%s", j.Name, diff)
		}
		pods, err := framework.JobPods(context.Background(), c, got)
		if err != nil {
			t.Fatal(err)
		}
		if len(pods) < int(w.completions) {
			t.Errorf("Job %s has %d pods, want at least %d", j.Name, len(pods), w.completions)
		}
		for _, pod := range pods {
			if diff := cmp.Diff([]string{w.manager}, podWriters(&pod)); diff != "" {
				t.Errorf("Job %s, pod %s: writers other than the kubelet (-want +got):\n%s", j.Name, pod.Name, diff)
			}
			if slices.Contains(pod.Finalizers, batchv1.JobTrackingFinalizer) {
				t.Errorf("Job %s, pod %s still holds %s", j.Name, pod.Name, batchv1.JobTrackingFinalizer)
			}
		}
	}

	framework.WaitFor(t, "jobkeeper to write the TTLPolicy's status", func(ctx context.Context) (bool, error) {
		u, err := dyn.Resource(v1alpha1.TTLPolicyResource).Get(ctx, policy.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == v1alpha1.PolicyReady && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})

	p.stop(t)
	if bad := forbiddenLines(p.output()); len(bad) > 0 {
		t.Errorf("jobkeeper logged authorization failures:\n%s", joinLines(bad))
	}
}

// waitJobFinished polls the Job until it has a Complete or Failed condition.
func waitJobFinished(t *testing.T, c kubernetes.Interface, j *batchv1.Job, timeout time.Duration, p *process) *batchv1.Job {
	t.Helper()
	var got *batchv1.Job
	deadline := time.Now().Add(timeout)
	for {
		cur, err := c.BatchV1().Jobs(j.Namespace).Get(context.Background(), j.Name, metav1.GetOptions{})
		if err == nil {
			got = cur
			if hasCondition(batchv1.JobComplete)(cur) || hasCondition(batchv1.JobFailed)(cur) {
				return cur
			}
		}
		if time.Now().After(deadline) {
			status := "never read"
			if got != nil {
				status = fmt.Sprintf("%+v", got.Status)
			}
			t.Fatalf("Job %s did not finish within %s; last status %s\njobkeeper output:\n%s", j.Name, timeout, status, p.output())
		}
		time.Sleep(framework.Interval * 4)
	}
}

func conditionTypes(j *batchv1.Job) []string {
	var out []string
	for _, c := range j.Status.Conditions {
		out = append(out, string(c.Type)+"="+string(c.Status))
	}
	return out
}

// statusManagers returns the sorted field managers of the Job's status subresource.
func statusManagers(j *batchv1.Job) []string {
	set := map[string]bool{}
	for _, mf := range j.ManagedFields {
		if mf.Subresource == "status" {
			set[mf.Manager] = true
		}
	}
	return sortedKeys(set)
}

// podWriters returns the sorted field managers of the pod, except the test
// kubelet's status writes.
func podWriters(p *corev1.Pod) []string {
	set := map[string]bool{}
	for _, mf := range p.ManagedFields {
		if mf.Manager == framework.FieldManager {
			continue
		}
		set[mf.Manager] = true
	}
	return sortedKeys(set)
}

func sortedKeys(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func joinLines(lines []string) string {
	out := ""
	for _, l := range lines {
		out += l + "\n"
	}
	return out
}
