package e2e

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clientscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/utils/ptr"
)

// lockedBuffer is an output buffer read while a stream writes it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// fixedTerminal is a client's terminal of one size (kubectl sends the size
// at once, then each change).
type fixedTerminal struct {
	sent bool
	done <-chan struct{}
}

func (f *fixedTerminal) Next() *remotecommand.TerminalSize {
	if !f.sent {
		f.sent = true
		return &remotecommand.TerminalSize{Width: 100, Height: 30}
	}
	<-f.done
	return nil
}

// typeInTerminal streams ex with a terminal (fixedTerminal's size), types
// input, which must end the shell, and returns the output once the stream
// has ended; it fails t if the stream fails or lasts over a minute.
func typeInTerminal(ctx context.Context, t *testing.T, ex remotecommand.Executor, input string) string {
	t.Helper()
	inR, inW := io.Pipe()
	defer func() { _ = inW.Close() }()
	var out lockedBuffer
	streamDone := make(chan struct{})
	defer close(streamDone)
	streamErr := make(chan error, 1)
	go func() {
		streamErr <- ex.StreamWithContext(ctx, remotecommand.StreamOptions{
			Stdin: inR, Stdout: &out, Tty: true, TerminalSizeQueue: &fixedTerminal{done: streamDone},
		})
	}()
	if _, err := io.WriteString(inW, input); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-streamErr:
		if err != nil {
			t.Fatalf("attach: %v (output %q)", err, out.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("attach did not end when the shell exited; output %q", out.String())
	}
	return out.String()
}

// attachExecutor returns an executor of pods/attach as kubectl attach
// builds it: WebSocket, or SPDY.
func attachExecutor(t *testing.T, c kubernetes.Interface, cfg *rest.Config, pod, container string, tty, websocket bool) remotecommand.Executor {
	t.Helper()
	req := c.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name(pod).SubResource("attach").
		VersionedParams(&corev1.PodAttachOptions{Container: container, Stdin: true, Stdout: true, Stderr: !tty, TTY: tty}, clientscheme.ParameterCodec)
	var ex remotecommand.Executor
	var err error
	if websocket {
		ex, err = remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
	} else {
		ex, err = remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	}
	if err != nil {
		t.Fatal(err)
	}
	return ex
}

// TestUpRunInteractive is `kubectl run -it --rm x --image=busybox
// --restart=Never -- sh`: a pod with stdin, stdinOnce and a terminal waits
// for its client, the client attaches with a terminal and types, the shell
// answers and exits, the pod succeeds and is deleted.
func TestUpRunInteractive(t *testing.T) {
	ctx := context.Background()
	up, c, kc := startUp(t, t.TempDir())
	defer up.stop(t)
	cfg := restConfig(t, kc)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "x", Labels: map[string]string{"run": "x"}},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "x", Image: "busybox", Args: []string{"sh"},
				Stdin: true, StdinOnce: true, TTY: true,
			}},
		},
	}
	if _, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, c, "default", pod.Name, "running", time.Minute, phaseIs(corev1.PodRunning))

	ex := attachExecutor(t, c, cfg, pod.Name, "x", true, true)
	got := typeInTerminal(ctx, t, ex, "[ -t 0 ] && stty size; echo h''i; exit\n")
	// The echo of the typed line has h''i; only the command's output has
	// hi alone on a line.
	if !strings.Contains(got, "\r\nhi\r\n") || !strings.Contains(got, "30 100\r\n") {
		t.Errorf("attached output %q, want the terminal's size 30 100 and hi", got)
	}
	p := waitPod(t, c, "default", pod.Name, "succeeded", time.Minute, phaseIs(corev1.PodSucceeded))
	if term := p.Status.ContainerStatuses[0].State.Terminated; term == nil || term.ExitCode != 0 {
		t.Errorf("container state %+v", p.Status.ContainerStatuses[0].State)
	}
	logs, err := c.CoreV1().Pods("default").GetLogs(pod.Name, &corev1.PodLogOptions{Container: "x"}).DoRaw(ctx)
	if err != nil || !strings.Contains(string(logs), "hi\r\n") {
		t.Errorf("logs %q, %v: the terminal's output belongs in the log", logs, err)
	}
	// --rm.
	if err := c.CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("pod not deleted: %v", err)
	}
}

// TestUpAttachStdin is `kubectl attach -i` without a terminal, over SPDY: a
// container with stdin and stdinOnce reads the client's input until the
// client's stdin ends, then end of file; the client gets stdout and stderr
// until the container ends.
func TestUpAttachStdin(t *testing.T) {
	ctx := context.Background()
	up, c, kc := startUp(t, t.TempDir())
	defer up.stop(t)
	cfg := restConfig(t, kc)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "reader"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "r", Image: "busybox", Command: []string{"sh", "-c", "read first; echo got:$first; cat; echo done >&2"},
				Stdin: true, StdinOnce: true,
			}},
		},
	}
	if _, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, c, "default", pod.Name, "running", time.Minute, phaseIs(corev1.PodRunning))
	ex := attachExecutor(t, c, cfg, pod.Name, "r", false, false)
	var out, errOut lockedBuffer
	err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: strings.NewReader("one\ntwo\n"), Stdout: &out, Stderr: &errOut})
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	if out.String() != "got:one\ntwo\n" || errOut.String() != "done\n" {
		t.Errorf("attached stdout %q, stderr %q", out.String(), errOut.String())
	}
	waitPod(t, c, "default", pod.Name, "succeeded", time.Minute, phaseIs(corev1.PodSucceeded))
}

// TestUpDebugEphemeralContainer is `kubectl debug -it POD --image=busybox
// --target=main`: an ephemeral container added through the
// pods/ephemeralcontainers subresource runs in the pod's context (its
// volumes, its hostname, the target's processes in sight), is attached to
// with a terminal, reports its status apart and is not restarted; the pod
// keeps running.
func TestUpDebugEphemeralContainer(t *testing.T) {
	ctx := context.Background()
	up, c, kc := startUp(t, t.TempDir())
	defer up.stop(t)
	cfg := restConfig(t, kc)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "target"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "main", Image: "busybox", Command: []string{"sh", "-c", "echo from-main > /work/f; exec sleep 3601"},
				VolumeMounts: []corev1.VolumeMount{{Name: "work", MountPath: "/work"}},
			}},
			Volumes: []corev1.Volume{{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
	if _, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, c, "default", pod.Name, "running", time.Minute, phaseIs(corev1.PodRunning))
	p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{
		EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debugger", Image: "busybox", Args: []string{"sh"},
			Stdin: true, TTY: true, TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			VolumeMounts: []corev1.VolumeMount{{Name: "work", MountPath: "/shared"}},
		},
		TargetContainerName: "main",
	})
	if _, err := c.CoreV1().Pods("default").UpdateEphemeralContainers(ctx, pod.Name, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ephemeralIs := func(cond func(corev1.ContainerStatus) bool) func(*corev1.Pod) bool {
		return func(p *corev1.Pod) bool {
			for _, s := range p.Status.EphemeralContainerStatuses {
				if s.Name == "debugger" {
					return cond(s)
				}
			}
			return false
		}
	}
	waitPod(t, c, "default", pod.Name, "debugging", time.Minute, ephemeralIs(func(s corev1.ContainerStatus) bool { return s.State.Running != nil }))

	ex := attachExecutor(t, c, cfg, pod.Name, "debugger", true, false)
	got := typeInTerminal(ctx, t, ex, "cat /shared/f; ps -eo args | grep -c '^sleep 360[1]'; echo \"host:$(hostname)\"; echo \"init:$(tr '\\0' ' ' < /proc/1/cmdline)\"; exit 3\n")
	wants := []string{"from-main\r\n", "\r\n1\r\n", "host:target\r\n"}
	if !strings.Contains(up.output(), "containers see every process of this host") {
		// In the target's PID namespace, whose PID 1 is its main process.
		wants = append(wants, "init:sleep 3601 \r\n")
	}
	for _, want := range wants {
		if !strings.Contains(got, want) {
			t.Errorf("debug shell output %q lacks %q (the pod's volume, the target's process, the pod's hostname)", got, want)
		}
	}
	p = waitPod(t, c, "default", pod.Name, "debugged", time.Minute, ephemeralIs(func(s corev1.ContainerStatus) bool { return s.State.Terminated != nil }))
	for _, s := range p.Status.EphemeralContainerStatuses {
		if s.State.Terminated.ExitCode != 3 || s.RestartCount != 0 {
			t.Errorf("ephemeral container status %+v", s)
		}
	}
	if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Running == nil {
		t.Errorf("pod phase %s, containers %+v: the target must keep running", p.Status.Phase, p.Status.ContainerStatuses)
	}
	evs, err := c.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=target"})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range evs.Items {
		if e.InvolvedObject.FieldPath == "spec.ephemeralContainers{debugger}" {
			seen[e.Reason] = true
		}
	}
	for _, reason := range []string{"Pulled", "Created", "Started"} {
		if !seen[reason] {
			t.Errorf("no %s event for spec.ephemeralContainers{debugger}; seen %v", reason, seen)
		}
	}
}

// TestUpPIDNamespaces: where the machine allows PID namespaces, a
// container's main process is PID 1 of its own and sees no other pod's
// processes; the containers of a pod with shareProcessNamespace see each
// other's, under a pause process.
func TestUpPIDNamespaces(t *testing.T) {
	ctx := context.Background()
	up, c, kc := startUp(t, t.TempDir())
	defer up.stop(t)
	if strings.Contains(up.output(), "containers see every process of this host") {
		t.Skip("this machine gives containers no PID namespaces")
	}
	// The kubelet turns $$ into $ in commands.
	const seen = `for i in $(seq 300); do cat /proc/[0-9]*/cmdline | tr '\0' ' ' | grep -q "sleep $1" && { echo "pid:$$$$ seen"; exit 0; }; sleep 0.1; done; echo "pid:$$$$ not seen"; exit 1`
	own := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "own"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{
				{Name: "sleeper", Image: "busybox", Command: []string{"sleep", "3607"}},
				{Name: "looker", Image: "busybox", Command: []string{"sh", "-c", `echo "pid:$$$$"; cat /proc/[0-9]*/cmdline | tr '\0' ' ' | grep -c "sleep 36[0]7"; true`}},
			},
		},
	}
	shared := own.DeepCopy()
	shared.Name = "shared"
	shared.Spec.ShareProcessNamespace = ptr.To(true)
	shared.Spec.Containers[0].Command = []string{"sleep", "3608"}
	shared.Spec.Containers[1].Command = []string{"sh", "-c", seen, "sh", "36[0]8"}
	for _, p := range []*corev1.Pod{own, shared} {
		if _, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	looked := func(p *corev1.Pod) bool {
		for _, s := range p.Status.ContainerStatuses {
			if s.Name == "looker" {
				return s.State.Terminated != nil
			}
		}
		return false
	}
	for name, want := range map[string]string{"own": "pid:1\n0\n", "shared": " seen\n"} {
		p := waitPod(t, c, "default", name, "looked", time.Minute, looked)
		logs, err := c.CoreV1().Pods("default").GetLogs(name, &corev1.PodLogOptions{Container: "looker"}).DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if name == "own" && string(logs) != want || name == "shared" && (!strings.HasSuffix(string(logs), want) || strings.HasPrefix(string(logs), "pid:1 ")) {
			t.Errorf("pod %s: looker's log %q, want %q (status %+v)", name, logs, want, p.Status.ContainerStatuses)
		}
	}
	// kubectl exec joins the container's namespace: PID 1 is the main
	// process, or the pod's pause process.
	cfg := restConfig(t, kc)
	for name, want := range map[string]string{"own": "sleep 3607 ", "shared": "jobkeeper-sandbox-init "} {
		req := c.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name(name).SubResource("exec").
			VersionedParams(&corev1.PodExecOptions{Container: "sleeper", Command: []string{"sh", "-c", `tr '\0' ' ' < /proc/1/cmdline`}, Stdout: true, Stderr: true}, clientscheme.ParameterCodec)
		ex, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
		if err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut}); err != nil || out.String() != want {
			t.Errorf("exec in pod %s: PID 1 is %q (%v, %q), want %q", name, out.String(), err, errOut.String(), want)
		}
	}
}
