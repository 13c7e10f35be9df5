package prober

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/internal/runtimetest"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

func TestHTTPCheck(t *testing.T) {
	var (
		mu   sync.Mutex
		seen *http.Request
	)
	other := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer other.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = r
		mu.Unlock()
		switch r.URL.Path {
		case "/ok":
			_, _ = fmt.Fprint(w, "fine")
		case "/moved":
			http.Redirect(w, r, "/ok", http.StatusFound)
		case "/elsewhere":
			// Another host name for the same machine: not followed.
			http.Redirect(w, r, strings.Replace(other.URL, "127.0.0.1", "localhost", 1)+"/x", http.StatusFound)
		case "/slow":
			time.Sleep(2 * time.Second)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	port := serverPort(t, srv)
	ctr := &corev1.Container{Name: "c", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: port}}}
	cases := map[string]struct {
		// setup
		get corev1.HTTPGetAction
		// want
		want       Outcome
		wantOutput string
	}{
		"success":             {get: corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromInt32(port)}, want: Success, wantOutput: "fine"},
		"port by name":        {get: corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromString("http")}, want: Success, wantOutput: "fine"},
		"port name a number":  {get: corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromString(fmt.Sprint(port))}, want: Success, wantOutput: "fine"},
		"unknown port name":   {get: corev1.HTTPGetAction{Port: intstr.FromString("nope")}, want: Error, wantOutput: `strconv.Atoi: parsing "nope": invalid syntax`},
		"failure status":      {get: corev1.HTTPGetAction{Path: "/bad", Port: intstr.FromInt32(port)}, want: Failure, wantOutput: "HTTP probe failed with statuscode: 503"},
		"same-host redirect":  {get: corev1.HTTPGetAction{Path: "/moved", Port: intstr.FromInt32(port)}, want: Success, wantOutput: "fine"},
		"other-host redirect": {get: corev1.HTTPGetAction{Path: "/elsewhere", Port: intstr.FromInt32(port)}, want: Warning, wantOutput: "Probe terminated redirects, Response body: <a href=\"" + strings.Replace(other.URL, "127.0.0.1", "localhost", 1) + "/x\">Found</a>.\n\n"},
		"scheme is lower-cased and https is not verified": {
			get: corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromInt32(port), Scheme: corev1.URISchemeHTTPS}, want: Failure,
			wantOutput: `Get "https://127.0.0.1:` + fmt.Sprint(port) + `/ok": http: server gave HTTP response to HTTPS client`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, out := httpCheck(&tc.get, ctr, "")(context.Background(), time.Second)
			if got != tc.want || out != tc.wantOutput {
				t.Errorf("check = %v %q, want %v %q", got, out, tc.want, tc.wantOutput)
			}
		})
	}

	t.Run("timeout", func(t *testing.T) {
		got, out := httpCheck(&corev1.HTTPGetAction{Path: "/slow", Port: intstr.FromInt32(port)}, ctr, "")(context.Background(), 100*time.Millisecond)
		if got != Failure || !strings.Contains(out, "Client.Timeout exceeded") {
			t.Errorf("check = %v %q, want a failure on the client's timeout", got, out)
		}
	})

	t.Run("headers", func(t *testing.T) {
		get := &corev1.HTTPGetAction{Path: "/ok?x=1", Port: intstr.FromInt32(port), HTTPHeaders: []corev1.HTTPHeader{
			{Name: "Host", Value: "example.test"}, {Name: "X-Custom", Value: "a"}, {Name: "X-Custom", Value: "b"},
		}}
		if got, _ := httpCheck(get, ctr, "")(context.Background(), time.Second); got != Success {
			t.Fatalf("check = %v", got)
		}
		mu.Lock()
		defer mu.Unlock()
		if seen.Host != "example.test" || seen.URL.RawQuery != "x=1" || fmt.Sprint(seen.Header["X-Custom"]) != "[a b]" ||
			seen.UserAgent() != probeUserAgent || seen.Header.Get("Accept") != "*/*" {
			t.Errorf("request host %q query %q headers %v", seen.Host, seen.URL.RawQuery, seen.Header)
		}
	})
}

func TestTCPCheck(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	ctr := &corev1.Container{Name: "c"}
	if got, out := tcpCheck(&corev1.TCPSocketAction{Port: intstr.FromInt(port)}, ctr, "")(context.Background(), time.Second); got != Success {
		t.Errorf("open port: %v %q", got, out)
	}
	_ = l.Close()
	got, out := tcpCheck(&corev1.TCPSocketAction{Port: intstr.FromInt(port)}, ctr, "")(context.Background(), time.Second)
	if want := fmt.Sprintf("dial tcp 127.0.0.1:%d: connect: connection refused", port); got != Failure || out != want {
		t.Errorf("closed port: %v %q, want failure %q", got, out, want)
	}
	if got, out := tcpCheck(&corev1.TCPSocketAction{Port: intstr.FromInt(0)}, ctr, "")(context.Background(), time.Second); got != Error || out != "invalid port number: 0" {
		t.Errorf("port 0: %v %q", got, out)
	}
}

func TestGRPCCheck(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	hs.SetServingStatus("down", healthpb.HealthCheckResponse_NOT_SERVING)
	go func() { _ = srv.Serve(l) }()
	defer srv.Stop()
	port := int32(l.Addr().(*net.TCPAddr).Port)

	bare, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	plain := grpc.NewServer()
	go func() { _ = plain.Serve(bare) }()
	defer plain.Stop()
	barePort := int32(bare.Addr().(*net.TCPAddr).Port)

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := int32(closed.Addr().(*net.TCPAddr).Port)
	_ = closed.Close()

	cases := map[string]struct {
		// setup
		action corev1.GRPCAction
		// want
		want       Outcome
		wantOutput string
	}{
		"serving":         {action: corev1.GRPCAction{Port: port}, want: Success, wantOutput: "service healthy"},
		"not serving":     {action: corev1.GRPCAction{Port: port, Service: ptr.To("down")}, want: Failure, wantOutput: `service unhealthy (responded with "NOT_SERVING")`},
		"unknown service": {action: corev1.GRPCAction{Port: port, Service: ptr.To("nope")}, want: Failure, wantOutput: "error: health rpc probe failed: rpc error: code = NotFound desc = unknown service"},
		"no health service": {action: corev1.GRPCAction{Port: barePort}, want: Failure,
			wantOutput: "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): unknown service grpc.health.v1.Health"},
		"nothing listens": {action: corev1.GRPCAction{Port: closedPort}, want: Failure,
			wantOutput: fmt.Sprintf(`timeout: failed to connect service "127.0.0.1:%d" within 200ms: context deadline exceeded`, closedPort)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, out := grpcCheck(&tc.action, "")(context.Background(), 200*time.Millisecond)
			if got != tc.want || out != tc.wantOutput {
				t.Errorf("check = %v %q, want %v %q", got, out, tc.want, tc.wantOutput)
			}
		})
	}
}

func TestExecCheck(t *testing.T) {
	ex := &runtimetest.FakeExecer{Run: func(ctx context.Context, cmd []string, out *strings.Builder) (int32, error) {
		switch cmd[0] {
		case "ok":
			out.WriteString("all good\n")
			return 0, nil
		case "fail":
			out.WriteString("not good\n")
			return 3, nil
		case "hang":
			<-ctx.Done()
			return 0, ctx.Err()
		default:
			return 0, &runtime.StartError{Reason: "StartError", Message: "no such command"}
		}
	}}
	cases := map[string]struct {
		// setup
		command []string
		// want
		want       Outcome
		wantOutput string
	}{
		"exit 0":         {command: []string{"ok"}, want: Success, wantOutput: "all good\n"},
		"exit 3":         {command: []string{"fail"}, want: Failure, wantOutput: "not good\n"},
		"timeout":        {command: []string{"hang", "1"}, want: Failure, wantOutput: `command timed out: "hang 1" timed out after 50ms`},
		"cannot be run":  {command: []string{"nope"}, want: Error, wantOutput: "StartError: no such command"},
		"static env var": {command: []string{"ok", "$(A)", "$(B)"}, want: Success, wantOutput: "all good\n"},
	}
	ctr := &corev1.Container{Env: []corev1.EnvVar{{Name: "A", Value: "a"}, {Name: "B", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: tc.command}}}
			got, out := CheckFor(p, ctr, runtimetest.ExecHandle{Execer: ex}, "")(context.Background(), 50*time.Millisecond)
			if got != tc.want || out != tc.wantOutput {
				t.Errorf("check = %v %q, want %v %q", got, out, tc.want, tc.wantOutput)
			}
		})
	}
	found := false
	for _, c := range ex.Commands() {
		found = found || fmt.Sprint(c) == "[ok a $(B)]"
	}
	if !found {
		t.Errorf("commands run %v, none is [ok a $(B)]: only static env values are expanded", ex.Commands())
	}
}

// serverPort is the port of a test server.
func serverPort(t *testing.T, srv *httptest.Server) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return int32(port)
}
