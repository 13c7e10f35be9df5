package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clientscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent"
	"jobkeeper.dev/jobkeeper/test/builder"
)

// podModeEnv makes the test binary, run as a pod's command, act as a small
// server (see TestMain).
const podModeEnv = "JOBKEEPER_E2E_POD"

// servePodMode runs the test binary as a pod: "http" answers every request
// on 127.0.0.1:$PORT with a greeting.
func servePodMode(mode string) {
	if mode != "http" {
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+os.Getenv("PORT"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("serving")
	_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello from the pod\n") }))
	os.Exit(1)
}

// waitPod waits until cond holds for the pod and returns it.
func waitPod(t *testing.T, c kubernetes.Interface, ns, name, what string, timeout time.Duration, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var got *corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		got = p
		return cond(p), nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s not %s: %+v", ns, name, what, got.Status)
	}
	return got
}

// phaseIs returns a condition on the pod's phase.
func phaseIs(phase corev1.PodPhase) func(*corev1.Pod) bool {
	return func(p *corev1.Pod) bool { return p.Status.Phase == phase }
}

// volumePod is a pod whose containers use every kind of volume the node
// agent provides, and also try to write to hostDir, which no volume covers.
func volumePod(name, hostDir, hostPathDir string) *corev1.Pod {
	script := strings.Join([]string{
		"set -e",
		"cat /work/init",
		"cat /etc/cfg/greeting; echo",
		"cat /etc/sec/token; echo",
		"cat /etc/podinfo/labels; echo",
		"cat /etc/projected/name; echo",
		"echo private > " + hostDir + "/escaped",
		"cat " + hostDir + "/escaped",
		"echo shared > /host/from-pod",
		"echo sub > /sub/file && ls /work/sub",
		"if (echo x > /etc/cfg/greeting) 2>/dev/null; then echo CONFIGMAP-WRITABLE; fi",
	}, "\n")
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "volumes"}},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			InitContainers: []corev1.Container{{
				Name: "prepare", Image: "busybox", Command: []string{"sh", "-c", "echo from-init > /work/init"},
				VolumeMounts: []corev1.VolumeMount{{Name: "work", MountPath: "/work"}},
			}},
			Containers: []corev1.Container{{
				Name: "main", Image: "busybox", Command: []string{"sh", "-c", script},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "work", MountPath: "/work"},
					{Name: "work", MountPath: "/sub", SubPath: "sub"},
					{Name: "cfg", MountPath: "/etc/cfg"},
					{Name: "sec", MountPath: "/etc/sec"},
					{Name: "podinfo", MountPath: "/etc/podinfo"},
					{Name: "projected", MountPath: "/etc/projected"},
					{Name: "host", MountPath: "/host"},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}},
				{Name: "sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "sec"}}},
				{Name: "podinfo", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
					{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
				}}}},
				{Name: "projected", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}},
				}}}},
				{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: hostPathDir, Type: ptr.To(corev1.HostPathDirectoryOrCreate)}}},
			},
		},
	}
}

// TestUpPodVolumesStayPrivate runs a pod with emptyDir, configMap, secret,
// downwardAPI, projected and hostPath volumes: it reads them at their mount
// paths, and its write to a host path outside its volumes stays in the
// container.
func TestUpPodVolumesStayPrivate(t *testing.T) {
	ctx := context.Background()
	dataDir := t.TempDir()
	up, c, _ := startUp(t, dataDir)
	defer up.stop(t)
	if out := up.output(); !strings.Contains(out, "the host is the image") {
		t.Errorf("the start-up banner does not say how pods see the host:\n%s", out)
	}
	ns := "default"
	if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"}, Data: map[string]string{"greeting": "hello"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sec"}, Data: map[string][]byte{"token": []byte("s3cret")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hostDir := t.TempDir()
	hostPathDir := filepath.Join(t.TempDir(), "shared")
	pod, err := c.CoreV1().Pods(ns).Create(ctx, volumePod("volumes", hostDir, hostPathDir), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := waitPod(t, c, ns, pod.Name, "finished", time.Minute, func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	})
	logs, err := c.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "main"}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("pod %s: %+v\nlogs:\n%s", got.Status.Phase, got.Status.ContainerStatuses, logs)
	}
	want := "from-init\nhello\ns3cret\napp=\"volumes\"\nvolumes\nprivate\nfile\n"
	if string(logs) != want {
		t.Errorf("logs:\n%s\nwant:\n%s", logs, want)
	}
	if _, err := os.Stat(filepath.Join(hostDir, "escaped")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the pod's write outside its volumes reached the host (stat: %v)", err)
	}
	if b, err := os.ReadFile(filepath.Join(hostPathDir, "from-pod")); err != nil || string(b) != "shared\n" {
		t.Errorf("hostPath write: %q, %v", b, err)
	}
	// The pod's directory, and its emptyDir with it, goes with the pod.
	podDir := filepath.Join(dataDir, "node", "pods", string(pod.UID))
	if _, err := os.Stat(filepath.Join(podDir, "volumes", "work", "init")); err != nil {
		t.Errorf("emptyDir content not on the host while the pod exists: %v", err)
	}
	if err := c.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	pollGone(t, func(ctx context.Context) error {
		if _, err := os.Stat(podDir); err == nil {
			return nil
		}
		return apierrors.NewNotFound(corev1.Resource("pods"), pod.Name)
	})
}

// TestUpRefusesVolumesWithoutIsolation: where containers cannot get a
// private filesystem view (simulated with --pod-isolation=off), a pod with
// volumes fails at once with a reason and an event, and runs nothing.
func TestUpRefusesVolumesWithoutIsolation(t *testing.T) {
	ctx := context.Background()
	up, c, _ := startUp(t, t.TempDir(), "--pod-isolation=off")
	defer up.stop(t)
	if out := up.output(); !strings.Contains(out, "WARNING: containers cannot get a private filesystem view") {
		t.Errorf("the start-up banner does not warn that pods get no private view:\n%s", out)
	}
	hostDir := t.TempDir()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "refused"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "main", Image: "busybox", Command: []string{"sh", "-c", "echo x > /work/x; echo y > " + hostDir + "/ran"},
				VolumeMounts: []corev1.VolumeMount{{Name: "work", MountPath: "/work"}},
			}},
			Volumes: []corev1.Volume{{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
	if _, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := waitPod(t, c, "default", pod.Name, "failed", time.Minute, phaseIs(corev1.PodFailed))
	if got.Status.Reason != nodeagent.ReasonNoPrivateFilesystem || !strings.Contains(got.Status.Message, "work") {
		t.Errorf("status reason %q message %q", got.Status.Reason, got.Status.Message)
	}
	var events *corev1.EventList
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		events, err = c.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod.Name + ",reason=" + nodeagent.ReasonNoPrivateFilesystem})
		return err == nil && len(events.Items) > 0, nil
	})
	if err != nil {
		t.Errorf("no %s event", nodeagent.ReasonNoPrivateFilesystem)
	} else if e := events.Items[0]; e.Type != corev1.EventTypeWarning || "Pod was rejected: "+e.Message != got.Status.Message {
		t.Errorf("event %s %q, want Warning with the status message after its \"Pod was rejected: \" (the kubelet's rejectPod)", e.Type, e.Message)
	}
	if _, err := os.Stat("/work/x"); err == nil {
		t.Errorf("/work/x exists on the host")
	}
	if _, err := os.Stat(filepath.Join(hostDir, "ran")); err == nil {
		t.Errorf("the refused pod ran")
	}
}

// restConfig loads the kubeconfig `up` printed.
func restConfig(t *testing.T, kubeconfig string) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestUpExecAndPortForward runs commands in a running container (kubectl
// exec, over WebSocket through the apiserver) and reaches its port (kubectl
// port-forward, over SPDY).
func TestUpExecAndPortForward(t *testing.T) {
	ctx := context.Background()
	up, c, kc := startUp(t, t.TempDir())
	defer up.stop(t)
	cfg := restConfig(t, kc)
	port := freePort(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "server"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "main", Image: "busybox", Command: []string{os.Args[0]},
				Env:          []corev1.EnvVar{{Name: podModeEnv, Value: "http"}, {Name: "PORT", Value: strconv.Itoa(port)}},
				WorkingDir:   "/srv/app",
				VolumeMounts: []corev1.VolumeMount{{Name: "work", MountPath: "/work"}},
			}},
			Volumes: []corev1.Volume{{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
	if _, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, c, "default", pod.Name, "running", time.Minute, phaseIs(corev1.PodRunning))
	// Running means the process started, not that it listens yet: wait for
	// the line it prints once its socket is open, or port-forward finds
	// nothing to connect to.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		logs, err := c.CoreV1().Pods("default").GetLogs(pod.Name, &corev1.PodLogOptions{Container: "main"}).DoRaw(ctx)
		return err == nil && bytes.Contains(logs, []byte("serving\n")), nil
	}); err != nil {
		t.Fatalf("the pod's server never said it was serving: %v", err)
	}

	exec := func(command ...string) (string, string, error) {
		req := c.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name(pod.Name).SubResource("exec").
			VersionedParams(&corev1.PodExecOptions{Container: "main", Command: command, Stdout: true, Stderr: true}, clientscheme.ParameterCodec)
		ex, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
		if err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
		return stdout.String(), stderr.String(), err
	}
	out, errOut, err := exec("sh", "-c", "echo $PORT; pwd; echo in-view > /work/e; cat /work/e; echo oops >&2; exit 3")
	if want := strconv.Itoa(port) + "\n/srv/app\nin-view\n"; out != want || errOut != "oops\n" {
		t.Errorf("exec stdout %q stderr %q, want %q and %q", out, errOut, want, "oops\n")
	}
	var exitErr interface{ ExitStatus() int }
	if !errors.As(err, &exitErr) || exitErr.ExitStatus() != 3 {
		t.Errorf("exec error %v, want exit status 3", err)
	}
	if _, err := os.Stat("/work/e"); err == nil {
		t.Errorf("exec's write to /work reached the host's /work")
	}
	if _, _, err := exec("no-such-command-here"); err == nil {
		t.Errorf("exec of a missing command succeeded")
	}

	// Port-forward, as kubectl port-forward does it with SPDY.
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	u := c.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name(pod.Name).SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, "POST", u)
	stop, ready := make(chan struct{}), make(chan struct{})
	defer close(stop)
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(port)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	fwErr := make(chan error, 1)
	go func() { fwErr <- fw.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-fwErr:
		t.Fatalf("port-forward: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("port-forward not ready")
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		t.Fatalf("forwarded ports %v, %v", ports, err)
	}
	resp, err := http.Get((&url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ports[0].Local)))}).String())
	if err != nil {
		t.Fatalf("GET through port-forward: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if string(body) != "hello from the pod\n" {
		t.Errorf("through port-forward: %q", body)
	}
}

// freePort returns a TCP port free on 127.0.0.1 now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestUpKilledPodRunsOnAndIsTakenOver kills `jobkeeper up` with SIGKILL
// while a pod runs processes that left its process group or lost their
// parent: as after a kubelet restart they run on under the container's
// sandbox, which keeps writing the container's log; the restarted `up`
// takes the container over (same container ID, start time, restart count),
// exec and `logs -f` work on it, and deleting the pod leaves no process.
func TestUpKilledPodRunsOnAndIsTakenOver(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tag := strconv.FormatInt(time.Now().UnixNano()%1000000, 10)
	up, c, _ := startUp(t, dir)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "leaky"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "main", Image: "busybox",
				Command: []string{"sh", "-c", "setsid sleep 3011" + tag + " & (set -m; sleep 3012" + tag + " &); i=0; while :; do echo tick $i; i=$((i+1)); sleep 0.1; done"},
			}},
		},
	}
	pod, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := waitPod(t, c, "default", pod.Name, "running", time.Minute, phaseIs(corev1.PodRunning)).Status.ContainerStatuses[0]
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return len(sleepsLeft(tag)) == 2, nil
	})
	if err != nil {
		t.Fatalf("pod processes: %v, want 2 sleeps", sleepsLeft(tag))
	}
	_ = syscall.Kill(-up.cmd.Process.Pid, syscall.SIGKILL)
	<-up.exited
	logPath := filepath.Join(dir, "node", "pods", string(pod.UID), "logs", "main", "0.log")
	ticks := func() int {
		b, _ := os.ReadFile(logPath)
		return bytes.Count(b, []byte(" tick "))
	}
	n := ticks()
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return ticks() > n+5, nil
	}); err != nil {
		t.Errorf("the container's log did not grow while up was down (%d ticks)", ticks())
	}
	if left := sleepsLeft(tag); len(left) != 2 {
		t.Errorf("processes of the pod after kill -9 of up: %v, want both sleeps running on", left)
	}

	up, c, kc := startUp(t, dir)
	defer up.stop(t)
	after := waitPod(t, c, "default", pod.Name, "taken over", time.Minute, func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].Ready
	}).Status.ContainerStatuses[0]
	if after.State.Running == nil || after.ContainerID != before.ContainerID || after.RestartCount != 0 ||
		!after.State.Running.StartedAt.Equal(&before.State.Running.StartedAt) {
		t.Errorf("container after the restart: %+v, want the same running attempt as %+v", after, before)
	}
	cfg := restConfig(t, kc)
	req := c.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name(pod.Name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: "main", Command: []string{"sh", "-c", "echo taken over"}, Stdout: true, Stderr: true}, clientscheme.ParameterCodec)
	ex, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
	if err != nil {
		t.Fatal(err)
	}
	// The API showed the pod ready before the restart: until the new agent
	// has read its pods it answers "not found", as a starting kubelet does.
	var stdout, stderr bytes.Buffer
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		stdout.Reset()
		stderr.Reset()
		err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
		return err == nil, nil
	})
	if err != nil || stdout.String() != "taken over\n" {
		t.Errorf("exec into the taken-over container: %q %q %v", stdout.String(), stderr.String(), err)
	}
	// logs -f goes on with lines written after the restart.
	followCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	stream, err := c.CoreV1().Pods("default").GetLogs(pod.Name, &corev1.PodLogOptions{Follow: true, TailLines: ptr.To[int64](1)}).Stream(followCtx)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 0, 4096)
	for lines := 0; lines < 5; {
		chunk := make([]byte, 1024)
		m, err := stream.Read(chunk)
		if err != nil {
			t.Fatalf("logs -f after the restart ended: %v (read %q)", err, buf)
		}
		buf = append(buf, chunk[:m]...)
		lines = bytes.Count(buf, []byte("\n"))
	}
	_ = stream.Close()

	if err := c.CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](2)}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return len(sleepsLeft(tag)) == 0, nil
	})
	if err != nil {
		t.Errorf("processes left after the pod's deletion: %v", sleepsLeft(tag))
	}
}

// sleepsLeft lists the live `sleep 301N<tag>` processes of
// TestUpKilledPodRunsOnAndIsTakenOver (the tag keeps those of an earlier run
// apart).
func sleepsLeft(tag string) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) == 2 && args[0] == "sleep" && strings.HasPrefix(args[1], "301") && strings.HasSuffix(args[1], tag) && len(args[1]) == 4+len(tag) && alivePID(e.Name()) {
			out = append(out, e.Name()+":"+args[1])
		}
	}
	return out
}

// alivePID reports whether the process is not a zombie.
func alivePID(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] != "Z"
}

// TestUpUnrunnablePodReported checks what a user sees of a Job whose pod can
// never run here (an NFS volume): the pod fails at once with the kubelet's
// rejection (reason UnsupportedVolume, message "Pod was rejected: ..." and a
// Warning event); the Job fails with BackoffLimitExceeded (condition and
// event), as upstream's Job controller reports it, without copying pod
// reasons; `jobkeeper follow` prints the pod's reason beside the Job's.
func TestUpUnrunnablePodReported(t *testing.T) {
	ctx := context.Background()
	up, c, kc := startUp(t, t.TempDir())
	defer up.stop(t)
	ns := "default"
	job := builder.MakeJob("nfs", ns).BackoffLimit(0).Command("true").Obj()
	job.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
		NFS: &corev1.NFSVolumeSource{Server: "nfs.example", Path: "/export"},
	}}}
	if _, err := c.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	failed := waitJob(t, c, ns, job.Name, "failed", hasCondition(batchv1.JobFailed))
	for _, cond := range failed.Status.Conditions {
		if cond.Type == batchv1.JobFailed && cond.Reason != batchv1.JobReasonBackoffLimitExceeded {
			t.Errorf("Failed condition %+v, want reason BackoffLimitExceeded", cond)
		}
	}
	pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job.Name})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("the Job's pods: %v, %d; want one", err, len(pods.Items))
	}
	pod := pods.Items[0]
	const why = `volume "data": only emptyDir, configMap, secret, downwardAPI, projected, hostPath, persistentVolumeClaim and image volumes are supported by the local node agent`
	if pod.Status.Phase != corev1.PodFailed || pod.Status.Reason != nodeagent.ReasonUnsupportedVolume || pod.Status.Message != "Pod was rejected: "+why {
		t.Errorf("pod status %s %q %q; want Failed, %s, the rejection", pod.Status.Phase, pod.Status.Reason, pod.Status.Message, nodeagent.ReasonUnsupportedVolume)
	}
	waitEvent(t, c, ns, nodeagent.ReasonUnsupportedVolume, why)
	waitEvent(t, c, ns, "BackoffLimitExceeded", "Job has reached the specified backoff limit")

	out, err := exec.Command(binary, "follow", "--kubeconfig", kc, "--plain", job.Name).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("follow of a failed Job: %v, want exit code 1", err)
	}
	for _, want := range []string{"warning pod/" + pod.Name + " UnsupportedVolume: " + why, "failed pod/" + pod.Name + ": UnsupportedVolume: Pod was rejected:", "BackoffLimitExceeded"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("follow does not print %q:\n%s", want, out)
		}
	}
}
