package prober

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	testingclock "k8s.io/utils/clock/testing"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/lifecycle"
)

// scriptedCheck returns outcomes in order, then cancels the probe.
type scriptedCheck struct {
	// outcomes are returned in order.
	outcomes []Outcome
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

// check implements Check.
func (s *scriptedCheck) check(context.Context, time.Duration) (Outcome, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.times = append(s.times, s.clock.Now())
	if s.calls >= len(s.outcomes) {
		s.cancel()
		return Failure, "script over"
	}
	o := s.outcomes[s.calls]
	s.calls++
	return o, fmt.Sprintf("out%d", s.calls)
}

func TestProbeRun(t *testing.T) {
	const (
		ok   = Success
		bad  = Failure
		warn = Warning
		oops = Error
	)
	cases := map[string]struct {
		// setup
		kind     lifecycle.ProbeKind
		probe    corev1.Probe
		outcomes []Outcome
		// want
		wantReports []bool
		wantEvents  []string
		wantChecks  int
	}{
		"startup reports its first success": {
			kind: lifecycle.ProbeStartup, probe: corev1.Probe{FailureThreshold: 3}, outcomes: []Outcome{bad, bad, ok},
			wantReports: []bool{true}, wantChecks: 3,
			wantEvents: []string{"Warning Unhealthy Startup probe failed: out1", "Warning Unhealthy Startup probe failed: out2"},
		},
		"startup reports failure at the threshold and stops": {
			kind: lifecycle.ProbeStartup, probe: corev1.Probe{FailureThreshold: 2}, outcomes: []Outcome{bad, bad, ok},
			wantReports: []bool{false}, wantChecks: 2,
			wantEvents: []string{"Warning Unhealthy Startup probe failed: out1", "Warning Unhealthy Startup probe failed: out2"},
		},
		"liveness failures must be in a row": {
			kind: lifecycle.ProbeLiveness, probe: corev1.Probe{FailureThreshold: 2}, outcomes: []Outcome{bad, ok, bad, ok, bad, bad},
			wantReports: []bool{false}, wantChecks: 6,
			wantEvents: []string{"Warning Unhealthy Liveness probe failed: out1", "Warning Unhealthy Liveness probe failed: out3", "Warning Unhealthy Liveness probe failed: out5", "Warning Unhealthy Liveness probe failed: out6"},
		},
		"liveness errors are thrown away": {
			kind: lifecycle.ProbeLiveness, probe: corev1.Probe{FailureThreshold: 1}, outcomes: []Outcome{oops, oops, oops, ok},
			wantChecks: 4 + 1,
			wantEvents: []string{"Warning Unhealthy Liveness probe errored and resulted in unknown state: out3"},
		},
		"readiness reports every change, after successThreshold": {
			kind: lifecycle.ProbeReadiness, probe: corev1.Probe{SuccessThreshold: 2, FailureThreshold: 1}, outcomes: []Outcome{ok, ok, ok, bad, bad, ok, warn},
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
			r := ProbeRun{
				Kind: tc.kind, Timing: TimingOf(&tc.probe), StartedAt: t0, Check: sc.check,
				Record: func(eventType, reason, message string) {
					mu.Lock()
					defer mu.Unlock()
					events = append(events, eventType+" "+reason+" "+message)
				},
				Report: func(ok bool) { mu.Lock(); defer mu.Unlock(); reports = append(reports, ok) },
			}
			done := make(chan struct{})
			go func() { defer close(done); r.Run(ctx, clk) }()
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

// t0 is the tests' fake now.
var t0 = time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
