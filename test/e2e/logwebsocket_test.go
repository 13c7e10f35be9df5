package e2e

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/websocket"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// TestUpLogsOverWebSocket reads a running container's log over a
// WebSocket through the apiserver, as upstream's conformance spec "Pods
// should support retrieving logs from the container over websockets" does
// (binary.k8s.io, neither following nor waiting): the whole log must come,
// not only the apiserver's first empty frame. The apiserver drops the last
// bytes of a response it reads together with its end, so the node's answer
// must be streamed as the kubelet's is.
func TestUpLogsOverWebSocket(t *testing.T) {
	ctx := context.Background()
	up, c, kc := startUp(t, t.TempDir())
	defer up.stop(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "logs-ws"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "main", Image: "busybox", Command: []string{"/bin/sh", "-c", "echo container is alive; sleep 10000"},
		}}},
	}
	if _, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, c, "default", pod.Name, "running", time.Minute, phaseIs(corev1.PodRunning))

	cfg := restConfig(t, kc)
	u := c.CoreV1().RESTClient().Get().Namespace("default").Resource("pods").Name(pod.Name).
		Suffix("log").Param("container", "main").URL()
	u.Scheme = "wss"
	wcfg, err := websocket.NewConfig(u.String(), "http://localhost")
	if err != nil {
		t.Fatal(err)
	}
	wcfg.Protocol = []string{"binary.k8s.io"}
	if wcfg.TlsConfig, err = rest.TLSConfigFor(cfg); err != nil {
		t.Fatal(err)
	}
	wcfg.Header = http.Header{}
	if cfg.BearerToken != "" {
		wcfg.Header.Set("Authorization", "Bearer "+cfg.BearerToken)
	}
	// Once the log holds the line (read plainly), one read over the
	// WebSocket must give it too.
	if err := waitUntil(30*time.Second, func(ctx context.Context) (bool, error) {
		b, err := c.CoreV1().Pods("default").GetLogs(pod.Name, &corev1.PodLogOptions{Container: "main"}).DoRaw(ctx)
		return err == nil && string(b) == "container is alive\n", nil
	}); err != nil {
		t.Fatalf("the log never held the line: %v", err)
	}
	ws, err := websocket.DialConfig(wcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	var got string
	for {
		var msg []byte
		if err := websocket.Message.Receive(ws, &msg); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("reading the log over the WebSocket: %v", err)
			}
			break
		}
		got += string(msg)
	}
	if got != "container is alive\n" {
		t.Errorf("log over the WebSocket = %q, want %q", got, "container is alive\n")
	}
}
