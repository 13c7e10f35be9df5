package nodeagent

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/lifecycle"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/prober"
	"jobkeeper.dev/jobkeeper/test/builder"
)

// scriptedCheck returns outcomes in order, then cancels the probe.
type scriptedCheck struct {
	// outcomes are returned in order.
	outcomes []prober.Outcome
	// cancel ends the probe once the script is over.
	cancel context.CancelFunc

	// mu guards calls and times.
	mu sync.Mutex
	// calls counts the checks.
	calls int
	// times are when each check ran.
	times []time.Time
	// clock stamps times.
	clock *testingclock.FakeClock
}

// check implements prober.Check.
func (s *scriptedCheck) check(context.Context, time.Duration) (prober.Outcome, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.times = append(s.times, s.clock.Now())
	if s.calls >= len(s.outcomes) {
		s.cancel()
		return prober.Failure, "script over"
	}
	o := s.outcomes[s.calls]
	s.calls++
	return o, fmt.Sprintf("out%d", s.calls)
}

func TestProbeRun(t *testing.T) {
	const (
		ok   = prober.Success
		bad  = prober.Failure
		warn = prober.Warning
		oops = prober.Error
	)
	cases := map[string]struct {
		// setup
		kind     lifecycle.ProbeKind
		probe    corev1.Probe
		outcomes []prober.Outcome
		// want
		wantReports []bool
		wantEvents  []string
		wantChecks  int
	}{
		"startup reports its first success": {
			kind: lifecycle.ProbeStartup, probe: corev1.Probe{FailureThreshold: 3}, outcomes: []prober.Outcome{bad, bad, ok},
			wantReports: []bool{true}, wantChecks: 3,
			wantEvents: []string{"Warning Unhealthy Startup probe failed: out1", "Warning Unhealthy Startup probe failed: out2"},
		},
		"startup reports failure at the threshold and stops": {
			kind: lifecycle.ProbeStartup, probe: corev1.Probe{FailureThreshold: 2}, outcomes: []prober.Outcome{bad, bad, ok},
			wantReports: []bool{false}, wantChecks: 2,
			wantEvents: []string{"Warning Unhealthy Startup probe failed: out1", "Warning Unhealthy Startup probe failed: out2"},
		},
		"liveness failures must be in a row": {
			kind: lifecycle.ProbeLiveness, probe: corev1.Probe{FailureThreshold: 2}, outcomes: []prober.Outcome{bad, ok, bad, ok, bad, bad},
			wantReports: []bool{false}, wantChecks: 6,
			wantEvents: []string{"Warning Unhealthy Liveness probe failed: out1", "Warning Unhealthy Liveness probe failed: out3", "Warning Unhealthy Liveness probe failed: out5", "Warning Unhealthy Liveness probe failed: out6"},
		},
		"liveness errors are thrown away": {
			kind: lifecycle.ProbeLiveness, probe: corev1.Probe{FailureThreshold: 1}, outcomes: []prober.Outcome{oops, oops, oops, ok},
			wantChecks: 4 + 1,
			wantEvents: []string{"Warning Unhealthy Liveness probe errored and resulted in unknown state: out3"},
		},
		"readiness reports every change, after successThreshold": {
			kind: lifecycle.ProbeReadiness, probe: corev1.Probe{SuccessThreshold: 2, FailureThreshold: 1}, outcomes: []prober.Outcome{ok, ok, ok, bad, bad, ok, warn},
			wantReports: []bool{true, false, true}, wantChecks: 7 + 1,
			wantEvents: []string{"Warning Unhealthy Readiness probe failed: out4", "Warning Unhealthy Readiness probe failed: out5", "Warning ProbeWarning Readiness probe warning: out7"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			clk := testingclock.NewFakeClock(t0)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			sc := &scriptedCheck{outcomes: tc.outcomes, cancel: cancel, clock: clk}
			var (
				mu      sync.Mutex
				reports []bool
				events  []string
			)
			tc.probe.PeriodSeconds, tc.probe.InitialDelaySeconds = 5, 7
			r := probeRun{
				kind: tc.kind, timing: timingOf(&tc.probe), startedAt: t0, check: sc.check,
				record: func(eventType, reason, message string) {
					mu.Lock()
					defer mu.Unlock()
					events = append(events, eventType+" "+reason+" "+message)
				},
				report: func(ok bool) { mu.Lock(); defer mu.Unlock(); reports = append(reports, ok) },
			}
			done := make(chan struct{})
			go func() { defer close(done); r.run(ctx, clk) }()
			stepClockUntilDone(t, clk, time.Second, done)
			if diff := cmp.Diff(tc.wantReports, reports); diff != "" {
				t.Errorf("reports (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantEvents, events); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			// Errors are retried at once: count the distinct probe times.
			if n := len(sc.times); n < tc.wantChecks {
				t.Errorf("%d checks, want %d", n, tc.wantChecks)
			}
			if first := sc.times[0]; !first.Equal(t0.Add(7 * time.Second)) {
				t.Errorf("first probe at %v, want initialDelaySeconds after the start", first.Sub(t0))
			}
			if len(sc.times) > 1 {
				var second time.Time
				for _, at := range sc.times {
					if at.After(sc.times[0]) {
						second = at
						break
					}
				}
				if got := second.Sub(sc.times[0]); got != 5*time.Second {
					t.Errorf("period %v, want 5s", got)
				}
			}
		})
	}
}

// stepClockUntilDone steps clk by d whenever something waits on it, until
// done is closed.
func stepClockUntilDone(t *testing.T, clk *testingclock.FakeClock, d time.Duration, done <-chan struct{}) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		select {
		case <-done:
			return true, nil
		default:
		}
		if clk.HasWaiters() {
			clk.Step(d)
		}
		return false, nil
	}); err != nil {
		t.Fatal("the probe never ended")
	}
}

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
	if ev := ta.waitEvent(t, ReasonUnhealthy); ev.Message != "Liveness probe failed: HTTP probe failed with statuscode: 500" || ev.Type != corev1.EventTypeWarning {
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
	if ev := ta.waitEvent(t, ReasonUnhealthy); ev.Message != "Readiness probe failed: HTTP probe failed with statuscode: 503" {
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
