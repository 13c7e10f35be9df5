package e2e

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/internal/testimages"
)

// TestUpHostUsersFalse runs pods with hostUsers: false on up as root, in
// both image modes, as upstream's user namespace e2e specs check them:
// each pod's containers see a mapping of 65536 ids onto a range of the
// host's of their own, at a multiple of 65536 (two pods, two ranges), run
// as root inside it, write to an emptyDir and read their service account
// token (idmapped volumes), a command exec'd into one runs in the same
// mapping, and the containers of a pod sharing its process namespace share
// one user namespace.
func TestUpHostUsersFalse(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("as another user every sandbox already has a user namespace mapping that user; this is root's")
	}
	reg := testimages.NewRegistry()
	defer reg.Close()
	for _, mode := range []string{"oci", "host"} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			up, c, kc := startUp(t, dir, "--images="+mode)
			defer up.stop(t)
			image := shellImageIn(t, reg, mode)
			waitDefaultServiceAccount(t, c, "default")
			script := `cat /proc/self/uid_map; id -u; echo x > /data/f && stat -c '%u' /data/f; test -s /var/run/secrets/kubernetes.io/serviceaccount/token && echo token; exec sleep 3600`
			for _, name := range []string{"userns-a", "userns-b"} {
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
					Spec: corev1.PodSpec{
						HostUsers:                     ptr.To(false),
						TerminationGracePeriodSeconds: ptr.To[int64](1),
						Volumes:                       []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
						Containers: []corev1.Container{{Name: "main", Image: image, Command: []string{"sh", "-c", script},
							VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
					},
				}
				if _, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			ranges := map[string]bool{}
			for _, name := range []string{"userns-a", "userns-b"} {
				waitPod(t, c, "default", name, "running", 2*time.Minute, phaseIs(corev1.PodRunning))
				var logs []byte
				deadline := time.Now().Add(30 * time.Second)
				for time.Now().Before(deadline) {
					var err error
					logs, err = c.CoreV1().Pods("default").GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
					if err == nil && bytes.HasSuffix(logs, []byte("token\n")) {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				lines := strings.Split(strings.TrimSuffix(string(logs), "\n"), "\n")
				if len(lines) != 4 || lines[1] != "0" || lines[2] != "0" || lines[3] != "token" {
					t.Fatalf("%s logs %q: want the mapping, uid 0, a file stored as 0, and the token", name, logs)
				}
				f := strings.Fields(lines[0])
				host, _ := strconv.ParseUint(f[1], 10, 32)
				if len(f) != 3 || f[0] != "0" || f[2] != "65536" || host == 0 || host%65536 != 0 {
					t.Errorf("%s uid_map %q: want 0, a multiple of 65536, 65536", name, lines[0])
				}
				ranges[f[1]] = true
			}
			if len(ranges) != 2 {
				t.Errorf("the two pods share a range: %v", ranges)
			}

			// A pod sharing its process namespace: its containers share
			// its one user namespace, as with the kubelet's runtimes.
			shared := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "userns-shared", Namespace: "default"},
				Spec: corev1.PodSpec{
					HostUsers: ptr.To(false), ShareProcessNamespace: ptr.To(true), TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers: []corev1.Container{
						{Name: "a", Image: image, Command: []string{"sh", "-c", "readlink /proc/self/ns/user; exec sleep 3600"}},
						{Name: "b", Image: image, Command: []string{"sh", "-c", "readlink /proc/self/ns/user; exec sleep 3600"}},
					},
				},
			}
			if _, err := c.CoreV1().Pods("default").Create(ctx, shared, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			waitPod(t, c, "default", shared.Name, "running", 2*time.Minute, phaseIs(corev1.PodRunning))
			nsOf := func(container string) string {
				deadline := time.Now().Add(30 * time.Second)
				for time.Now().Before(deadline) {
					logs, err := c.CoreV1().Pods("default").GetLogs(shared.Name, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
					if err == nil && len(logs) > 0 {
						return strings.TrimSpace(string(logs))
					}
					time.Sleep(100 * time.Millisecond)
				}
				return ""
			}
			if a, b := nsOf("a"), nsOf("b"); a == "" || a != b {
				t.Errorf("the containers of a pod sharing its process namespace are in user namespaces %q and %q, want one", a, b)
			}

			req := c.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name("userns-a").SubResource("exec").
				VersionedParams(&corev1.PodExecOptions{Container: "main", Command: []string{"sh", "-c", "cat /proc/self/uid_map; id -u; cat /data/f"}, Stdout: true, Stderr: true}, clientscheme.ParameterCodec)
			ex, err := remotecommand.NewWebSocketExecutor(restConfig(t, kc), "GET", req.URL().String())
			if err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
				t.Fatalf("exec: %v (%s)", err, stderr.String())
			}
			if lines := strings.Split(stdout.String(), "\n"); len(lines) != 4 || !ranges[strings.Fields(lines[0])[1]] || lines[1] != "0" || lines[2] != "x" {
				t.Errorf("exec'd output %q", stdout.String())
			}
		})
	}
}
