package prober

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/internal/runtimetest"
)

func TestPostStartHookFailureMessage(t *testing.T) {
	run := func(_ context.Context, cmd []string, out *strings.Builder) (int32, error) {
		out.WriteString("no luck\n")
		return 3, nil
	}
	r := HookRun{
		Handler:   &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "exit 3"}}},
		Container: &corev1.Container{Name: "c"}, PodRef: "p_ns(u)", Handle: runtimetest.ExecHandle{Execer: &runtimetest.FakeExecer{Run: run}},
	}
	msg, err := r.Run(context.Background())
	want := `Exec lifecycle hook ([sh -c exit 3]) for Container "c" in Pod "p_ns(u)" failed - error: command 'sh -c exit 3' exited with 3: no luck
, message: "no luck\n"`
	if err == nil || msg != want {
		t.Errorf("run = %q, %v; want %q", msg, err, want)
	}
	r.Handler = &corev1.LifecycleHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(80)}}
	if msg, err := r.Run(context.Background()); err == nil || !strings.HasPrefix(msg, "Cannot run handler: invalid handler: ") {
		t.Errorf("tcpSocket hook = %q, %v; want it to fail as the kubelet's", msg, err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) }))
	defer srv.Close()
	r.Handler = &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/x", Port: intstr.FromInt32(serverPort(t, srv))}}
	if msg, err := r.Run(context.Background()); err != nil {
		t.Errorf("httpGet answered 500 = %q, %v; the kubelet does not look at the status", msg, err)
	}
	srv.Close()
	if msg, err := r.Run(context.Background()); err == nil || !strings.HasPrefix(msg, `HTTP lifecycle hook (/x) for Container "c" in Pod "p_ns(u)" failed - error: Get "http://127.0.0.1:`) {
		t.Errorf("httpGet to a closed port = %q, %v", msg, err)
	}
}
