package nodeagent

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/lifecycle"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/prober"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// ReasonProbeNotSupported is the reason of the Warning event recorded when a
// container's probe cannot run here (an exec probe on a runtime that cannot
// run commands in containers, a probe without a handler): the probe is then
// treated as absent.
const ReasonProbeNotSupported = "ProbeNotSupported"

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

// probeResult is what a probe reports to the worker for one attempt.
type probeResult struct {
	// attempt is the attempt the probe ran against.
	attempt int32
	// ok is true when the probe reached its success threshold, false when
	// it reached its failure threshold.
	ok bool
}

// probeKey names one probe of one container in the worker's results.
type probeKey struct {
	// name is the container's name.
	name string
	// kind is which probe.
	kind lifecycle.ProbeKind
}

// probeTiming are a probe's timing parameters with the API's defaults.
type probeTiming struct {
	// delay is initialDelaySeconds, counted from the attempt's start.
	delay time.Duration
	// period is periodSeconds.
	period time.Duration
	// timeout is timeoutSeconds.
	timeout time.Duration
	// successes and failures are the thresholds.
	successes, failures int32
}

// timingOf reads p's timing parameters.
func timingOf(p *corev1.Probe) probeTiming {
	t := probeTiming{
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

// probeRun is one probe loop: what it probes and where it reports.
type probeRun struct {
	// kind is the probe's kind.
	kind lifecycle.ProbeKind
	// timing are its parameters.
	timing probeTiming
	// startedAt is when the attempt started (initialDelaySeconds counts
	// from there).
	startedAt time.Time
	// check runs the handler once.
	check prober.Check
	// record records an event on the pod.
	record func(eventType, reason, message string)
	// report hands a threshold crossing to the worker.
	report func(ok bool)
}

// run probes as the kubelet's probe worker does, until ctx ends or the
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
func (r probeRun) run(ctx context.Context, clk clock.WithTicker) {
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
	if !sleep(r.startedAt.Add(r.timing.delay).Sub(clk.Now())) {
		return
	}
	var (
		last     prober.Outcome
		run      int32
		reported = -1 // nothing reported yet; else 0 (failed) or 1 (succeeded)
	)
	for {
		outcome, _ := r.once(ctx)
		if ctx.Err() != nil {
			return
		}
		if outcome == prober.Warning {
			outcome = prober.Success
		}
		if outcome != prober.Error {
			if outcome == last && run > 0 {
				run++
			} else {
				last, run = outcome, 1
			}
			crossed := (outcome == prober.Success && run >= r.timing.successes) || (outcome == prober.Failure && run >= r.timing.failures)
			if crossed {
				ok := outcome == prober.Success
				switch {
				case r.kind == lifecycle.ProbeStartup:
					r.report(ok)
					return
				case r.kind == lifecycle.ProbeLiveness && !ok:
					r.report(false)
					return
				case r.kind == lifecycle.ProbeReadiness && reported != btoi(ok):
					reported = btoi(ok)
					r.report(ok)
				}
			}
		}
		if !sleep(r.timing.period) {
			return
		}
	}
}

// once runs the check, again at once up to maxProbeRetries times while it
// errors, and records the kubelet's events for what it found.
func (r probeRun) once(ctx context.Context) (prober.Outcome, string) {
	var (
		outcome prober.Outcome
		output  string
	)
	for i := 0; i < maxProbeRetries; i++ {
		if outcome, output = r.check(ctx, r.timing.timeout); outcome != prober.Error {
			break
		}
	}
	if ctx.Err() != nil {
		return outcome, output
	}
	switch outcome {
	case prober.Warning:
		r.record(corev1.EventTypeWarning, ReasonProbeWarning, fmt.Sprintf("%s probe warning: %s", r.kind, output))
	case prober.Failure:
		r.record(corev1.EventTypeWarning, ReasonUnhealthy, fmt.Sprintf("%s probe failed: %s", r.kind, output))
	case prober.Error:
		r.record(corev1.EventTypeWarning, ReasonUnhealthy, fmt.Sprintf("%s probe errored and resulted in unknown state: %s", r.kind, output))
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

// probesOf returns the probes that run against the attempt h of c. A probe
// that cannot run here is treated as absent, with a ProbeNotSupported event.
func (w *worker) probesOf(pod *corev1.Pod, c *container, h runtime.Handle) lifecycle.AttemptProbes {
	var out lifecycle.AttemptProbes
	for _, k := range []lifecycle.ProbeKind{lifecycle.ProbeStartup, lifecycle.ProbeLiveness, lifecycle.ProbeReadiness} {
		p := k.Of(c.spec)
		if p == nil {
			continue
		}
		if why := prober.UnsupportedProbe(p, h); why != "" {
			w.agent.containerEvent(pod, c.info, corev1.EventTypeWarning, ReasonProbeNotSupported, fmt.Sprintf("%s probe of container %s not run: %s", k, c.spec.Name, why))
			continue
		}
		switch k {
		case lifecycle.ProbeStartup:
			out.Startup = true
		case lifecycle.ProbeLiveness:
			out.Liveness = true
		case lifecycle.ProbeReadiness:
			out.Readiness = true
		}
	}
	return out
}

// startProbes starts the probes of c's running attempt that are due: its
// startup probe until it started, then its liveness and readiness probes.
// Results reach the worker through probeResults and a poke.
func (w *worker) startProbes(ctx context.Context, c *container) {
	w.endProbe(c)
	kinds := []lifecycle.ProbeKind{lifecycle.ProbeStartup}
	if c.state.Started {
		kinds = []lifecycle.ProbeKind{lifecycle.ProbeLiveness, lifecycle.ProbeReadiness}
	}
	ctx, cancel := context.WithCancel(ctx)
	c.stopProbe = cancel
	name, attempt := c.spec.Name, c.state.Attempt
	for _, k := range kinds {
		if !c.state.Probes.Has(k) {
			continue
		}
		p := k.Of(c.spec)
		info := c.info
		r := probeRun{
			kind:      k,
			timing:    timingOf(p),
			startedAt: c.state.StartedAt,
			check:     prober.CheckFor(p, c.spec, c.handle),
			record: func(eventType, reason, message string) {
				w.agent.containerEvent(w.currentPod(), info, eventType, reason, message)
			},
			report: func(ok bool) {
				w.mu.Lock()
				w.probeResults[probeKey{name: name, kind: k}] = probeResult{attempt: attempt, ok: ok}
				w.mu.Unlock()
				w.poke()
			},
		}
		go r.run(ctx, w.agent.clock)
	}
}

// endProbe stops c's probes, if any run.
func (w *worker) endProbe(c *container) {
	if c.stopProbe != nil {
		c.stopProbe()
		c.stopProbe = nil
	}
}

// stopProbes stops every probe (the worker is returning).
func (w *worker) stopProbes() {
	for _, c := range w.all() {
		w.endProbe(c)
	}
}

// collectProbes delivers the probe results that arrived, each to the
// attempt it probed; a result for an attempt that ended is dropped.
func (w *worker) collectProbes(ctx context.Context) bool {
	w.mu.Lock()
	results := w.probeResults
	w.probeResults = map[probeKey]probeResult{}
	w.mu.Unlock()
	if len(results) == 0 {
		return false
	}
	pod := w.currentPod()
	now := w.agent.clock.Now()
	for _, c := range w.all() {
		for _, k := range []lifecycle.ProbeKind{lifecycle.ProbeStartup, lifecycle.ProbeLiveness, lifecycle.ProbeReadiness} {
			r, ok := results[probeKey{name: c.spec.Name, kind: k}]
			if !ok || r.attempt != c.state.Attempt || c.state.Phase != lifecycle.PhaseRunning {
				continue
			}
			ev := lifecycle.Event{Kind: lifecycle.EvReadiness, At: now, OK: r.ok}
			switch {
			case k == lifecycle.ProbeStartup && r.ok:
				ev.Kind = lifecycle.EvProbeSucceeded
			case k != lifecycle.ProbeReadiness:
				ev.Kind, ev.Probe, ev.Grace = lifecycle.EvProbeFailed, k, probeGrace(pod, k.Of(c.spec))
			}
			w.apply(ctx, pod, c, ev)
		}
	}
	return true
}

// probeGrace is the grace period of a container killed on a failed startup
// or liveness probe: the probe's terminationGracePeriodSeconds, else the
// pod's.
func probeGrace(pod *corev1.Pod, p *corev1.Probe) time.Duration {
	if p != nil && p.TerminationGracePeriodSeconds != nil {
		return time.Duration(*p.TerminationGracePeriodSeconds) * time.Second
	}
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		return time.Duration(*g) * time.Second
	}
	return time.Duration(corev1.DefaultTerminationGracePeriodSeconds) * time.Second
}
