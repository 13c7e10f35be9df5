package nodeagent

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/prober"
	"jobkeeper.dev/jobkeeper/test/builder"
)

// statusServer answers with the status code in code (200 when 0) and counts
// requests.
type statusServer struct {
	*httptest.Server
	// code is the status to answer.
	code atomic.Int32
	// hits counts requests.
	hits atomic.Int32
}

// newStatusServer starts a statusServer answering code.
func newStatusServer(t *testing.T, code int32) *statusServer {
	s := &statusServer{}
	s.code.Store(code)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.hits.Add(1)
		w.WriteHeader(int(s.code.Load()))
	}))
	t.Cleanup(s.Close)
	return s
}

// httpProbe is an httpGet probe of srv every second.
func httpProbe(t *testing.T, srv *statusServer, failures int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(serverPort(t, srv.Server))}},
		PeriodSeconds: 1, FailureThreshold: failures,
	}
}

// eventMessages returns the messages of the events with reason, in order.
func (ta *testAgent) eventMessages(t *testing.T, reason string) []string {
	t.Helper()
	evs, err := ta.client.CoreV1().Events("ns").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs.Items {
		if e.Reason == reason {
			out = append(out, e.Message)
		}
	}
	return out
}

func TestLivenessFailureRestartsTheContainer(t *testing.T) {
	srv := newStatusServer(t, http.StatusInternalServerError)
	pod := builder.MakePod("p", "ns").UID("u1").RestartPolicy(corev1.RestartPolicyAlways).Obj()
	pod.Spec.Containers[0].LivenessProbe = httpProbe(t, srv, 2)
	ta, rt := startAgentWithFake(t, pod)
	rt.attempt(t, "main", 0)
	ta.stepUntil(t, time.Second, func() bool { return rt.count("main") > 1 })
	if ev := ta.waitEvent(t, "Killing"); ev.Message != "Container main failed liveness probe, will be restarted" {
		t.Errorf("Killing event %q", ev.Message)
	}
	if ev := ta.waitEvent(t, prober.ReasonUnhealthy); ev.Message != "Liveness probe failed: HTTP probe failed with statuscode: 500" || ev.Type != corev1.EventTypeWarning {
		t.Errorf("Unhealthy event %s %q", ev.Type, ev.Message)
	}
	got := ta.waitPod(t, "p", func(p *corev1.Pod) bool { return mainStatus(p).RestartCount == 1 && mainStatus(p).State.Running != nil })
	if last := mainStatus(got).LastTerminationState.Terminated; last == nil || last.ExitCode != 143 {
		t.Errorf("lastState = %+v, want the killed attempt", mainStatus(got).LastTerminationState)
	}
}

func TestLivenessFailureUnderNeverFailsThePod(t *testing.T) {
	srv := newStatusServer(t, http.StatusInternalServerError)
	pod := builder.MakePod("p", "ns").UID("u1").Obj()
	pod.Spec.Containers[0].LivenessProbe = httpProbe(t, srv, 1)
	pod.Spec.Containers[0].LivenessProbe.TerminationGracePeriodSeconds = ptr.To[int64](3)
	ta, rt := startAgentWithFake(t, pod)
	rt.attempt(t, "main", 0)
	ta.stepUntil(t, time.Second, func() bool { return len(rt.stopOrder()) > 0 })
	ta.waitPod(t, "p", phaseIs(corev1.PodFailed))
	ta.waitEvent(t, "Killing")
	if msgs := ta.eventMessages(t, "Killing"); fmt.Sprint(msgs) != "[Container main failed liveness probe]" {
		t.Errorf("Killing events %q", msgs)
	}
	if n := rt.count("main"); n != 1 {
		t.Errorf("%d attempts under restartPolicy Never", n)
	}
}

func TestReadinessProbeGatesReady(t *testing.T) {
	srv := newStatusServer(t, http.StatusServiceUnavailable)
	pod := builder.MakePod("p", "ns").UID("u1").Obj()
	pod.Spec.Containers[0].ReadinessProbe = httpProbe(t, srv, 1)
	ta, rt := startAgentWithFake(t, pod)
	rt.attempt(t, "main", 0)
	got := ta.waitPod(t, "p", phaseIs(corev1.PodRunning))
	cs := mainStatus(got)
	if cs.Ready || !*cs.Started {
		t.Errorf("ready=%v started=%v before the readiness probe passed, want not ready but started", cs.Ready, *cs.Started)
	}
	if c := getCondition(got, corev1.PodReady); len(c) != 1 || c[0].Status != corev1.ConditionFalse || c[0].Reason != "ContainersNotReady" {
		t.Errorf("Ready condition %+v", c)
	}
	if ev := ta.waitEvent(t, prober.ReasonUnhealthy); ev.Message != "Readiness probe failed: HTTP probe failed with statuscode: 503" {
		t.Errorf("Unhealthy event %q", ev.Message)
	}
	srv.code.Store(http.StatusOK)
	ready := func(want bool) func(*corev1.Pod) bool {
		return func(p *corev1.Pod) bool {
			c := getCondition(p, corev1.ContainersReady)
			return mainStatus(p).Ready == want && len(c) == 1 && (c[0].Status == corev1.ConditionTrue) == want
		}
	}
	ta.stepUntil(t, time.Second, func() bool { p, _ := ta.getPod("p"); return p != nil && ready(true)(p) })
	srv.code.Store(http.StatusServiceUnavailable)
	ta.stepUntil(t, time.Second, func() bool { p, _ := ta.getPod("p"); return p != nil && ready(false)(p) })
	if n := rt.count("main"); n != 1 {
		t.Errorf("a failing readiness probe restarted the container (%d attempts)", n)
	}
}

func TestProbesWaitForTheStartupProbe(t *testing.T) {
	startup := newStatusServer(t, http.StatusServiceUnavailable)
	live := newStatusServer(t, http.StatusOK)
	pod := builder.MakePod("p", "ns").UID("u1").Obj()
	pod.Spec.Containers[0].StartupProbe = httpProbe(t, startup, 100)
	pod.Spec.Containers[0].LivenessProbe = httpProbe(t, live, 1)
	pod.Spec.Containers[0].ReadinessProbe = httpProbe(t, live, 1)
	ta, rt := startAgentWithFake(t, pod)
	rt.attempt(t, "main", 0)
	ta.stepUntil(t, time.Second, func() bool { return startup.hits.Load() >= 3 })
	if n := live.hits.Load(); n != 0 {
		t.Fatalf("liveness or readiness probed %d times before the startup probe passed", n)
	}
	startup.code.Store(http.StatusOK)
	ta.stepUntil(t, time.Second, func() bool { p, _ := ta.getPod("p"); return p != nil && mainStatus(p).Ready })
	if live.hits.Load() == 0 {
		t.Error("ready without a readiness probe")
	}
}

// getPod reads a pod of "ns".
func (ta *testAgent) getPod(name string) (*corev1.Pod, error) {
	return ta.client.CoreV1().Pods("ns").Get(context.Background(), name, metav1.GetOptions{})
}

func TestProbeGrace(t *testing.T) {
	pod := builder.MakePod("p", "ns").TerminationGracePeriodSeconds(20).Obj()
	if got := probeGrace(pod, &corev1.Probe{TerminationGracePeriodSeconds: ptr.To[int64](3)}); got != 3*time.Second {
		t.Errorf("grace %v, want the probe's 3s", got)
	}
	if got := probeGrace(pod, &corev1.Probe{}); got != 20*time.Second {
		t.Errorf("grace %v, want the pod's 20s", got)
	}
	if got := probeGrace(builder.MakePod("p", "ns").Obj(), nil); got != 30*time.Second {
		t.Errorf("grace %v, want the default 30s", got)
	}
}
