package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/test/builder"
)

// chartManagedBy is the managedBy value the chart's controller manages.
const chartManagedBy = "jobkeeper.dev/job-controller"

// finishedJobLine is the series of the Job controller's metrics that counts
// one Job finished with success.
var finishedJobLine = regexp.MustCompile(`(?m)^job_controller_jobs_finished_total\{completion_mode="NonIndexed",reason="CompletionsReached",result="succeeded"\} 1$`)

// pathTimeout bounds each wait of TestChartControllerPath: pods start from
// an image, and a failover waits for the Lease to expire (15s).
const pathTimeout = 90 * time.Second

// TestChartControllerPath is the deployment path a user takes, on `up`
// instead of a cluster: build the controller image with deploy/image (no
// Docker), start `up --controllers=` (none of jobkeeper's own controllers),
// load the image, apply the chart's rendered manifests, run the chart's
// controller, from that image, as two replicas with leader election, and
// check that Jobs opting in (spec.managedBy) run to Complete and are deleted
// by the TTL controller, that the leader serves /metrics, and that killing
// the leader hands the Lease to the other replica, which runs the Job
// created meanwhile and the next one; a replica given a controllers value
// the binary refuses says why in one log line.
//
// up runs no Deployments yet (it refuses them, docs/deploy.md), so each
// replica is the Deployment's pod template as a bare pod. Pods may share
// this host's network on up (--network=host), so each replica gets free
// ports of its own for metrics and probes instead of the chart's 8080 and
// 8081, and the metrics are read at the pod's address and port. The chart is applied as deploy/manifests renders it with its
// default values (CI checks the two agree), not with helm install.
func TestChartControllerPath(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the chart's pods run as uid 65532, which up's node gives a container only when it runs as root (docs/node-agent.md)")
	}
	ctx := context.Background()
	archive := buildControllerImage(t)
	dataDir := t.TempDir()
	up, c, kc := startUp(t, dataDir, "--controllers=", "--images=oci")
	defer up.stop(t)
	imageLoad(t, dataDir, archive)
	admin, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}

	var template *corev1.PodTemplateSpec
	var others []*unstructured.Unstructured
	for _, o := range manifestObjects(t) {
		if o.GetKind() != "Deployment" {
			others = append(others, o)
			continue
		}
		var d struct {
			Spec struct {
				Template corev1.PodTemplateSpec `json:"template"`
			} `json:"spec"`
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
			t.Fatalf("decoding the Deployment: %v", err)
		}
		template = &d.Spec.Template
	}
	if template == nil {
		t.Fatal("the manifests have no Deployment")
	}
	applyManifests(t, admin, others)

	metricsPorts := map[string]int{}
	for _, name := range []string{"jobkeeper-a", "jobkeeper-b"} {
		pod, metricsPort := replicaPod(t, template, name)
		metricsPorts[name] = metricsPort
		if _, err := c.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating replica %s: %v", name, err)
		}
	}
	ns := template.Namespace
	if ns == "" {
		ns = chartNamespace
	}
	for name := range metricsPorts {
		waitReplica(t, c, ns, name, "Ready", func(p *corev1.Pod) bool { return podReady(p) })
	}
	leader := waitLeader(t, c, ns, "")
	t.Logf("leader: %s", leader)

	runPathJob(t, c, "before-failover")
	leaderPod, err := c.CoreV1().Pods(ns).Get(ctx, leader, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	metrics := readMetrics(t, leaderPod.Status.PodIP, metricsPorts[leader])
	if !finishedJobLine.MatchString(metrics) {
		t.Errorf("the leader's /metrics count no finished Job; its job_controller_ lines:\n%s", controllerLines(metrics))
	}

	// Kill the leader, as a node or a crash would: no graceful release.
	if err := c.CoreV1().Pods(ns).Delete(ctx, leader, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	// A Job created while no replica leads is not lost: the next leader
	// runs it.
	createPathJob(t, c, "during-failover")
	next := waitLeader(t, c, ns, leader)
	t.Logf("new leader: %s", next)
	waitPathJob(t, c, "during-failover")
	runPathJob(t, c, "after-failover")

	// A controllers value the binary refuses (helm install --set
	// controllers={bogus}): the pod's log says why, in one line.
	bad, _ := replicaPod(t, template, "jobkeeper-bad")
	for i, a := range bad.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--controllers=") {
			bad.Spec.Containers[0].Args[i] = "--controllers=bogus"
		}
	}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, bad, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReplica(t, c, ns, bad.Name, "terminated", func(p *corev1.Pod) bool {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Terminated != nil || cs.LastTerminationState.Terminated != nil {
				return true
			}
		}
		return false
	})
	// The pod restarts the container (restartPolicy Always), so the line
	// is in the current container's log or, once a new instance started
	// and has not written yet, in the previous one's.
	want := `jobkeeper-controller: --controllers: unknown controller "bogus" (known: job, ttl-after-finished)` + "\n"
	var seen []string
	err = waitUntil(pathTimeout, func(ctx context.Context) (bool, error) {
		seen = seen[:0]
		for _, previous := range []bool{false, true} {
			logs, err := c.CoreV1().Pods(ns).GetLogs(bad.Name, &corev1.PodLogOptions{Previous: previous}).DoRaw(ctx)
			if err == nil && string(logs) == want {
				return true, nil
			}
			seen = append(seen, fmt.Sprintf("previous=%t: %q, %v", previous, logs, err))
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("log of a replica with a refused controllers value: %s; want %q", strings.Join(seen, "; "), want)
	}
}

// buildControllerImage builds the controller image as docs/deploy.md says,
// with `go run ./deploy/image -o`, and returns the tarball.
func buildControllerImage(t *testing.T) string {
	t.Helper()
	archive := filepath.Join(t.TempDir(), "jobkeeper-controller.tar")
	cmd := exec.Command("go", "run", "./deploy/image", "-o", archive)
	cmd.Dir = "../.."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run ./deploy/image: %v\n%s", err, out)
	}
	return archive
}

// replicaPod is the Deployment's pod template as the bare pod name, with
// free ports of this host for its metrics and probes (pods share the host's
// network on up). It returns the pod and its metrics port.
func replicaPod(t *testing.T, template *corev1.PodTemplateSpec, name string) (*corev1.Pod, int) {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: *template.ObjectMeta.DeepCopy(), Spec: *template.Spec.DeepCopy()}
	pod.Name = name
	if pod.Namespace == "" {
		pod.Namespace = chartNamespace
	}
	metricsPort, healthPort := freePort(t), freePort(t)
	ctr := &pod.Spec.Containers[0]
	for i, a := range ctr.Args {
		switch {
		case strings.HasPrefix(a, "--metrics-bind-address="):
			ctr.Args[i] = "--metrics-bind-address=:" + strconv.Itoa(metricsPort)
		case strings.HasPrefix(a, "--health-probe-bind-address="):
			ctr.Args[i] = "--health-probe-bind-address=:" + strconv.Itoa(healthPort)
		}
	}
	for i, p := range ctr.Ports {
		switch p.Name {
		case "metrics":
			ctr.Ports[i].ContainerPort = int32(metricsPort)
		case "health":
			ctr.Ports[i].ContainerPort = int32(healthPort)
		}
	}
	return pod, metricsPort
}

// podReady says whether the pod's Ready condition is true.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitReplica waits until ok holds for the pod, failing with its status.
func waitReplica(t *testing.T, c kubernetes.Interface, ns, name, what string, ok func(*corev1.Pod) bool) {
	t.Helper()
	var last *corev1.Pod
	err := waitUntil(pathTimeout, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		return ok(p), nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s not %s: %v; status %+v", ns, name, what, err, podStatus(last))
	}
}

// podStatus summarizes a pod's status for a failure message.
func podStatus(p *corev1.Pod) string {
	if p == nil {
		return "<none>"
	}
	s := string(p.Status.Phase)
	for _, cs := range p.Status.ContainerStatuses {
		s += fmt.Sprintf(" %s(ready=%t restarts=%d state=%+v last=%+v)", cs.Name, cs.Ready, cs.RestartCount, cs.State, cs.LastTerminationState)
	}
	return s
}

// waitLeader waits for the chart's Lease to be held by a replica other than
// not, and returns that replica's pod name (the holder identity is the
// pod's host name, which is its name, and a suffix).
func waitLeader(t *testing.T, c kubernetes.Interface, ns, not string) string {
	t.Helper()
	var holder string
	err := waitUntil(pathTimeout, func(ctx context.Context) (bool, error) {
		l, err := c.CoordinationV1().Leases(ns).Get(ctx, "jobkeeper", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false, nil
		}
		holder, _, _ = strings.Cut(*l.Spec.HolderIdentity, "_")
		return holder != "" && holder != not, nil
	})
	if err != nil {
		t.Fatalf("no leader other than %q: last holder %q: %v", not, holder, err)
	}
	return holder
}

// runPathJob runs a Job opting in to the chart's controller, whose pod runs
// the controller image's own binary (`version`: nothing else is in the
// image), waits for Complete with its counts, then for the TTL controller
// to delete it.
func runPathJob(t *testing.T, c kubernetes.Interface, name string) {
	t.Helper()
	createPathJob(t, c, name)
	waitPathJob(t, c, name)
}

// createPathJob creates runPathJob's Job.
func createPathJob(t *testing.T, c kubernetes.Interface, name string) {
	t.Helper()
	job := builder.MakeJob(name, "default").ManagedBy(chartManagedBy).Completions(2).Parallelism(2).
		TTLSecondsAfterFinished(5).Command("/jobkeeper-controller", "version").Obj()
	job.Spec.Template.Spec.Containers[0].Image = chartImage(t)
	if _, err := c.BatchV1().Jobs("default").Create(context.Background(), job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitPathJob waits for runPathJob's Job to complete, with its counts, and
// to be deleted after its TTL.
func waitPathJob(t *testing.T, c kubernetes.Interface, name string) {
	t.Helper()
	var last batchv1.JobStatus
	err := waitUntil(pathTimeout, func(ctx context.Context) (bool, error) {
		j, err := c.BatchV1().Jobs("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = j.Status
		return slices.ContainsFunc(j.Status.Conditions, func(cond batchv1.JobCondition) bool {
			return cond.Type == batchv1.JobComplete && cond.Status == corev1.ConditionTrue
		}), nil
	})
	if err != nil {
		t.Fatalf("Job %s not Complete: %v; status %+v", name, err, last)
	}
	if last.Succeeded != 2 || last.Failed != 0 {
		t.Errorf("Job %s: succeeded %d, failed %d; want 2, 0", name, last.Succeeded, last.Failed)
	}
	err = waitUntil(pathTimeout, func(ctx context.Context) (bool, error) {
		_, err := c.BatchV1().Jobs("default").Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("Job %s not deleted after its TTL: %v", name, err)
	}
}

// chartImage is the image the chart's Deployment runs.
func chartImage(t *testing.T) string {
	t.Helper()
	for _, o := range manifestObjects(t) {
		if o.GetKind() != "Deployment" {
			continue
		}
		ctrs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		if len(ctrs) > 0 {
			if img, ok := ctrs[0].(map[string]any)["image"].(string); ok {
				return img
			}
		}
	}
	t.Fatal("no image in the chart's Deployment")
	return ""
}

// readMetrics reads /metrics in plain HTTP at port on this host, as the
// chart's Service would reach it.
func readMetrics(t *testing.T, podIP string, port int) string {
	t.Helper()
	resp, err := http.Get("http://" + net.JoinHostPort(podIP, strconv.Itoa(port)) + "/metrics")
	if err != nil {
		t.Fatalf("reading the leader's metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("reading the leader's metrics: %s, %v", resp.Status, err)
	}
	return string(body)
}

// controllerLines are the job_controller_ series of a /metrics answer.
func controllerLines(metrics string) string {
	var out []string
	for _, l := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(l, "job_controller_") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
