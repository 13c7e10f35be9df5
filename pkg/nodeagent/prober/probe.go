package prober

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/lifecycle"
)

// Event reasons of probes, as the kubelet's (pkg/kubelet/events).
const (
	// ReasonUnhealthy is the reason of a failed or errored probe.
	ReasonUnhealthy = "Unhealthy"
	// ReasonProbeWarning is the reason of a probe that succeeded with a
	// warning (an HTTP redirect to another host, not followed).
	ReasonProbeWarning = "ProbeWarning"
)

// Probe defaults, as the API defaults them.
const (
	// defaultProbePeriod is periodSeconds when unset.
	defaultProbePeriod = 10 * time.Second
	// defaultProbeTimeout is timeoutSeconds when unset.
	defaultProbeTimeout = time.Second
	// defaultFailureThreshold is failureThreshold when unset.
	defaultFailureThreshold = 3
	// defaultSuccessThreshold is successThreshold when unset.
	defaultSuccessThreshold = 1
	// maxProbeRetries is how often a probe that errored (it could not be
	// run, e.g. a named port that does not exist) is tried again at once,
	// as the kubelet's.
	maxProbeRetries = 3
)

// Timing are a probe's timing parameters with the API's defaults.
type Timing struct {
	// delay is initialDelaySeconds, counted from the attempt's start.
	delay time.Duration
	// period is periodSeconds.
	period time.Duration
	// timeout is timeoutSeconds.
	timeout time.Duration
	// successes and failures are the thresholds.
	successes, failures int32
}

// TimingOf reads p's timing parameters.
func TimingOf(p *corev1.Probe) Timing {
	t := Timing{
		delay: time.Duration(p.InitialDelaySeconds) * time.Second, period: defaultProbePeriod, timeout: defaultProbeTimeout,
		successes: defaultSuccessThreshold, failures: defaultFailureThreshold,
	}
	if p.PeriodSeconds > 0 {
		t.period = time.Duration(p.PeriodSeconds) * time.Second
	}
	if p.TimeoutSeconds > 0 {
		t.timeout = time.Duration(p.TimeoutSeconds) * time.Second
	}
	if p.SuccessThreshold > 0 {
		t.successes = p.SuccessThreshold
	}
	if p.FailureThreshold > 0 {
		t.failures = p.FailureThreshold
	}
	return t
}

// ProbeRun is one probe loop: what it probes and where it reports.
type ProbeRun struct {
	// Kind is the probe's kind.
	Kind lifecycle.ProbeKind
	// Timing are its parameters.
	Timing Timing
	// StartedAt is when the attempt started (initialDelaySeconds counts
	// from there).
	StartedAt time.Time
	// Check runs the handler once.
	Check Check
	// Record records an event on the pod.
	Record func(eventType, reason, message string)
	// Report hands a threshold crossing to the worker.
	Report func(ok bool)
}

// Run probes as the kubelet's probe worker does, until ctx ends or the
// probe has nothing more to say. The first probe runs once
// initialDelaySeconds have passed since the attempt started, the next ones
// every periodSeconds. Every failure is an Unhealthy event ("Liveness probe
// failed: ..."); an error ("... probe errored and resulted in unknown
// state: ...") is one too, but does not count; a warning counts as a
// success. Crossing a threshold (successThreshold successes or
// failureThreshold failures in a row) is reported:
//   - startup: the first crossing, either way, then the loop ends;
//   - liveness: the first failure crossing, then the loop ends (the
//     container is killed; a new attempt gets a new loop);
//   - readiness: every change between ready and not ready; it never ends
//     on its own.
func (r ProbeRun) Run(ctx context.Context, clk clock.WithTicker) {
	sleep := func(d time.Duration) bool {
		if d <= 0 {
			return ctx.Err() == nil
		}
		t := clk.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C():
			return true
		}
	}
	if !sleep(r.StartedAt.Add(r.Timing.delay).Sub(clk.Now())) {
		return
	}
	var (
		last     Outcome
		run      int32
		reported = -1 // nothing reported yet; else 0 (failed) or 1 (succeeded)
	)
	for {
		outcome, _ := r.once(ctx)
		if ctx.Err() != nil {
			return
		}
		if outcome == Warning {
			outcome = Success
		}
		if outcome != Error {
			if outcome == last && run > 0 {
				run++
			} else {
				last, run = outcome, 1
			}
			crossed := (outcome == Success && run >= r.Timing.successes) || (outcome == Failure && run >= r.Timing.failures)
			if crossed {
				ok := outcome == Success
				switch {
				case r.Kind == lifecycle.ProbeStartup:
					r.Report(ok)
					return
				case r.Kind == lifecycle.ProbeLiveness && !ok:
					r.Report(false)
					return
				case r.Kind == lifecycle.ProbeReadiness && reported != btoi(ok):
					reported = btoi(ok)
					r.Report(ok)
				}
			}
		}
		if !sleep(r.Timing.period) {
			return
		}
	}
}

// once runs the check, again at once up to maxProbeRetries times while it
// errors, and records the kubelet's events for what it found.
func (r ProbeRun) once(ctx context.Context) (Outcome, string) {
	var (
		outcome Outcome
		output  string
	)
	for i := 0; i < maxProbeRetries; i++ {
		if outcome, output = r.Check(ctx, r.Timing.timeout); outcome != Error {
			break
		}
	}
	if ctx.Err() != nil {
		return outcome, output
	}
	switch outcome {
	case Warning:
		r.Record(corev1.EventTypeWarning, ReasonProbeWarning, fmt.Sprintf("%s probe warning: %s", r.Kind, output))
	case Failure:
		r.Record(corev1.EventTypeWarning, ReasonUnhealthy, fmt.Sprintf("%s probe failed: %s", r.Kind, output))
	case Error:
		r.Record(corev1.EventTypeWarning, ReasonUnhealthy, fmt.Sprintf("%s probe errored and resulted in unknown state: %s", r.Kind, output))
	}
	return outcome, output
}

// btoi is 1 for true, 0 for false.
func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
