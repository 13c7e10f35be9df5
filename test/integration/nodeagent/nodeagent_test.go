package nodeagent

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/process"
	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

// sharedNode is the node that binds every default-scheduler pod of the package.
const sharedNode = "it-node"

var (
	// startShared starts the shared node once.
	startShared sync.Once
	// sharedDataDir is the shared node's data directory.
	sharedDataDir string
)

// startAgent runs an agent until the test ends and waits for its Node.
func startAgent(t *testing.T, name, dataDir string, mods ...func(*nodeagent.Options)) (stop func()) {
	t.Helper()
	pki := framework.ControlPlane().PKI()
	opts := nodeagent.Options{
		NodeName:        name,
		MaxPods:         50,
		Runtime:         process.Name,
		Images:          nodeagent.ImagesHost,
		DataDir:         dataDir,
		ServingCertFile: pki.NodeServingCert(),
		ServingKeyFile:  pki.NodeServingKey(),
		ClientCAFile:    pki.CACert(),
	}
	for _, mod := range mods {
		mod(&opts)
	}
	a, err := nodeagent.New(framework.Client(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	waitNodeReady(t, framework.Client(t), name)
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent %s: %v", name, err)
		}
	}
}

// startSharedAgent starts the package's binding node once; it runs until
// the test binary exits.
func startSharedAgent(t *testing.T) {
	startShared.Do(func() {
		// Under the control plane's data dir, which the framework removes.
		dir := filepath.Join(framework.ControlPlane().DataDir(), "it-node")
		sharedDataDir = dir
		pki := framework.ControlPlane().PKI()
		// No cgroups: this agent is never stopped (it ends with the
		// test binary), so it could not remove them.
		a, err := nodeagent.New(framework.Client(t), nodeagent.Options{
			NodeName: sharedNode, MaxPods: 50, Runtime: process.Name, Images: nodeagent.ImagesHost, DataDir: dir, Cgroups: nodeagent.CgroupsOff,
			ServingCertFile: pki.NodeServingCert(), ServingKeyFile: pki.NodeServingKey(), ClientCAFile: pki.CACert(),
		})
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = a.Run(context.Background()) }()
	})
	waitNodeReady(t, framework.Client(t), sharedNode)
}

func waitNodeReady(t *testing.T, c kubernetes.Interface, name string) {
	t.Helper()
	framework.WaitFor(t, "node "+name+" ready", func(ctx context.Context) (bool, error) {
		n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

// TestNodeIsNotLeftTainted: the apiserver's TaintNodesByCondition admission
// taints the new Node not-ready; with no node lifecycle controller in up,
// the agent must lift it once Ready, or every tool that reads taints sees a
// node that refuses pods.
func TestNodeIsNotLeftTainted(t *testing.T) {
	startSharedAgent(t)
	var taints []corev1.Taint
	err := wait.PollUntilContextTimeout(context.Background(), framework.Interval, framework.Timeout, true, func(ctx context.Context) (bool, error) {
		n, err := framework.Client(t).CoreV1().Nodes().Get(ctx, sharedNode, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		taints = n.Spec.Taints
		return len(taints) == 0, nil
	})
	if err != nil {
		t.Fatalf("node %s keeps taints %+v: %v", sharedNode, taints, err)
	}
}

// childPod is a pod whose container re-runs this test binary in mode.
func childPod(name, ns, mode string) *builder.PodWrapper {
	return builder.MakePod(name, ns).Command(os.Args[0]).Env(childEnv, mode)
}

func waitPod(t *testing.T, c kubernetes.Interface, ns, name, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	framework.WaitFor(t, fmt.Sprintf("pod %s/%s %s", ns, name, what), func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = p
		return cond(p), nil
	})
	return last
}

func phase(p corev1.PodPhase) func(*corev1.Pod) bool {
	return func(pod *corev1.Pod) bool { return pod.Status.Phase == p }
}

func logsOf(t *testing.T, c kubernetes.Interface, ns, name string, opts *corev1.PodLogOptions) string {
	t.Helper()
	b, err := c.CoreV1().Pods(ns).GetLogs(name, opts).DoRaw(context.Background())
	if err != nil {
		t.Fatalf("logs of %s/%s: %v", ns, name, err)
	}
	return string(b)
}

func TestPodRunsAndLogsThroughTheAPI(t *testing.T) {
	startSharedAgent(t)
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	pod := childPod("hello", ns, "hello").
		Annotation("batch.kubernetes.io/job-completion-index", "2").
		EnvFieldRef("JOB_COMPLETION_INDEX", "metadata.annotations['batch.kubernetes.io/job-completion-index']").Obj()
	if _, err := c.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := waitPod(t, c, ns, "hello", "succeeded", phase(corev1.PodSucceeded))
	if got.Spec.NodeName != sharedNode {
		t.Errorf("nodeName = %q, want %q", got.Spec.NodeName, sharedNode)
	}
	term := got.Status.ContainerStatuses[0].State.Terminated
	if term == nil || term.ExitCode != 0 || term.Reason != "Completed" || term.StartedAt.IsZero() || term.FinishedAt.IsZero() {
		t.Errorf("container state = %+v", got.Status.ContainerStatuses[0].State)
	}
	for _, ct := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		found := false
		for _, cond := range got.Status.Conditions {
			found = found || cond.Type == ct
		}
		if !found {
			t.Errorf("condition %s missing", ct)
		}
	}
	if logs := logsOf(t, c, ns, "hello", &corev1.PodLogOptions{}); logs != "hello from 2\n" {
		t.Errorf("logs = %q, want %q", logs, "hello from 2\n")
	}
	logs := logsOf(t, c, ns, "hello", &corev1.PodLogOptions{Timestamps: true})
	if ts, rest, _ := strings.Cut(logs, " "); rest != "hello from 2\n" {
		t.Errorf("logs with timestamps = %q", logs)
	} else if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
		t.Errorf("timestamp %q: %v", ts, err)
	}
}

func TestFailingPodNeverRestarts(t *testing.T) {
	startSharedAgent(t)
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	if _, err := c.CoreV1().Pods(ns).Create(context.Background(), childPod("fail", ns, "fail").Obj(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := waitPod(t, c, ns, "fail", "failed", phase(corev1.PodFailed))
	cs := got.Status.ContainerStatuses[0]
	if cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 1 || cs.State.Terminated.Reason != "Error" || cs.RestartCount != 0 {
		t.Errorf("container status = %+v", cs)
	}
	if logs := logsOf(t, c, ns, "fail", &corev1.PodLogOptions{}); logs != "failing on purpose\n" {
		t.Errorf("logs = %q", logs)
	}
}

func TestNoCommandFailsClearly(t *testing.T) {
	startSharedAgent(t)
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	pod := builder.MakePod("nocmd", ns).Command().Obj()
	if _, err := c.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := waitPod(t, c, ns, "nocmd", "failed", phase(corev1.PodFailed))
	if term := got.Status.ContainerStatuses[0].State.Terminated; term == nil || term.Reason != process.ReasonNoCommand {
		t.Errorf("container state = %+v, want terminated %s", got.Status.ContainerStatuses[0].State, process.ReasonNoCommand)
	}
}

// pidOf reads the process id from a process runtime container ID.
func pidOf(t *testing.T, cs corev1.ContainerStatus) int {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimPrefix(cs.ContainerID, "process://"))
	if err != nil {
		t.Fatalf("container ID %q: %v", cs.ContainerID, err)
	}
	return pid
}

// processGone reports whether pid no longer runs (missing or zombie).
func processGone(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(data))
	return len(f) > 2 && f[2] == "Z"
}

func TestGracefulDeletionSendsSIGTERM(t *testing.T) {
	startSharedAgent(t)
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	if _, err := c.CoreV1().Pods(ns).Create(context.Background(), childPod("term", ns, "sleep-until-term").Obj(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	running := waitPod(t, c, ns, "term", "running", phase(corev1.PodRunning))
	pid := pidOf(t, running.Status.ContainerStatuses[0])
	framework.WaitFor(t, "the container to print", func(ctx context.Context) (bool, error) {
		b, err := c.CoreV1().Pods(ns).GetLogs("term", &corev1.PodLogOptions{}).DoRaw(ctx)
		return strings.Contains(string(b), "waiting for SIGTERM"), err
	})
	if err := c.CoreV1().Pods(ns).Delete(context.Background(), "term", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.WaitFor(t, "the pod to be deleted", func(ctx context.Context) (bool, error) {
		_, err := c.CoreV1().Pods(ns).Get(ctx, "term", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	framework.WaitFor(t, "the process to be gone", func(context.Context) (bool, error) { return processGone(pid), nil })
}

func TestFollowLogsEndsWhenTheContainerStops(t *testing.T) {
	startSharedAgent(t)
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	if _, err := c.CoreV1().Pods(ns).Create(context.Background(), childPod("follow", ns, "sleep-until-term").Obj(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, c, ns, "follow", "running", phase(corev1.PodRunning))
	ctx, cancel := context.WithTimeout(context.Background(), framework.Timeout)
	defer cancel()
	stream, err := c.CoreV1().Pods(ns).GetLogs("follow", &corev1.PodLogOptions{Follow: true}).Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stream.Close() }()
	r := bufio.NewReader(stream)
	line, err := r.ReadString('\n')
	if err != nil || line != "waiting for SIGTERM\n" {
		t.Fatalf("first followed line = %q, %v", line, err)
	}
	if err := c.CoreV1().Pods(ns).Delete(context.Background(), "follow", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("follow did not end cleanly: %v", err)
	}
	if string(rest) != "got SIGTERM\n" {
		t.Errorf("rest of the followed log = %q, want %q", rest, "got SIGTERM\n")
	}
}

func TestDeletedPodProcessIsGone(t *testing.T) {
	startSharedAgent(t)
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	pod := childPod("sleeper", ns, "sleep").TerminationGracePeriodSeconds(1).Obj()
	if _, err := c.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	running := waitPod(t, c, ns, "sleeper", "running", phase(corev1.PodRunning))
	pid := pidOf(t, running.Status.ContainerStatuses[0])
	if err := c.CoreV1().Pods(ns).Delete(context.Background(), "sleeper", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.WaitFor(t, "the pod to be deleted", func(ctx context.Context) (bool, error) {
		_, err := c.CoreV1().Pods(ns).Get(ctx, "sleeper", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if !processGone(pid) {
		t.Errorf("process %d still runs after its pod was deleted", pid)
	}
}

func TestAgentRestartHandlesLostContainers(t *testing.T) {
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	node := "it-restart"
	dataDir := t.TempDir()
	// The agent stops leaving its containers running (as after a crash),
	// then the machine "reboots": every sandbox and container dies
	// without a word, so the next agent finds them lost.
	stop := startAgent(t, node, dataDir, func(o *nodeagent.Options) { o.KeepRunningOnStop = true })
	never := childPod("never", ns, "sleep").NodeName(node).Obj()
	onFailure := childPod("onfailure", ns, "sleep").NodeName(node).RestartPolicy(corev1.RestartPolicyOnFailure).Obj()
	for _, p := range []*corev1.Pod{never, onFailure} {
		if _, err := c.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var pids []int
	for _, name := range []string{"never", "onfailure"} {
		p := waitPod(t, c, ns, name, "running", phase(corev1.PodRunning))
		pids = append(pids, pidOf(t, p.Status.ContainerStatuses[0]))
		framework.WaitFor(t, name+" to print", func(ctx context.Context) (bool, error) {
			b, err := c.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
			return string(b) == "sleeping\n", err
		})
	}
	stop()
	for _, pid := range pids {
		if processGone(pid) {
			t.Fatalf("process %d did not outlive the agent stopped with KeepRunningOnStop", pid)
		}
	}
	if n := process.KillRecorded(process.ReadRecorded(filepath.Join(dataDir, "process-state"))); n == 0 {
		t.Fatal("no recorded sandbox was killed")
	}
	for _, pid := range pids {
		framework.WaitFor(t, fmt.Sprintf("process %d gone", pid), func(context.Context) (bool, error) { return processGone(pid), nil })
	}
	defer startAgent(t, node, dataDir)()

	got := waitPod(t, c, ns, "never", "failed", phase(corev1.PodFailed))
	if term := got.Status.ContainerStatuses[0].State.Terminated; term == nil || term.Reason != nodeagent.ReasonContainerStatusUnknown || term.ExitCode != 137 {
		t.Errorf("never: container state = %+v", got.Status.ContainerStatuses[0].State)
	}
	got = waitPod(t, c, ns, "onfailure", "restarted", func(p *corev1.Pod) bool {
		cs := p.Status.ContainerStatuses
		return len(cs) == 1 && cs[0].RestartCount == 1 && cs[0].State.Running != nil
	})
	if last := got.Status.ContainerStatuses[0].LastTerminationState.Terminated; last == nil || last.Reason != nodeagent.ReasonContainerStatusUnknown {
		t.Errorf("onfailure: last state = %+v", got.Status.ContainerStatuses[0].LastTerminationState)
	}
	// The lost attempt's log is the previous container's log.
	if logs := logsOf(t, c, ns, "onfailure", &corev1.PodLogOptions{Previous: true}); logs != "sleeping\n" {
		t.Errorf("previous logs = %q, want %q", logs, "sleeping\n")
	}
	// Clean up: the restarted process must not outlive the test.
	if err := c.CoreV1().Pods(ns).Delete(context.Background(), "onfailure", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
}

func TestUnschedulablePod(t *testing.T) {
	startSharedAgent(t)
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	pod := childPod("huge", ns, "hello").RequestCPU("100000").Obj()
	if _, err := c.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := waitPod(t, c, ns, "huge", "unschedulable", func(p *corev1.Pod) bool {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse {
				return true
			}
		}
		return false
	})
	for _, cond := range got.Status.Conditions {
		if cond.Type == corev1.PodScheduled && (cond.Reason != corev1.PodReasonUnschedulable || !strings.Contains(cond.Message, "Insufficient cpu")) {
			t.Errorf("PodScheduled = %+v", cond)
		}
	}
	if got.Spec.NodeName != "" {
		t.Errorf("bound to %q", got.Spec.NodeName)
	}
}
