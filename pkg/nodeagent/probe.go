package nodeagent

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/lifecycle"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/prober"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// ReasonProbeNotSupported is the reason of the Warning event recorded when a
// container's probe cannot run here (an exec probe on a runtime that cannot
// run commands in containers, a probe without a handler): the probe is then
// treated as absent.
const ReasonProbeNotSupported = "ProbeNotSupported"

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
		r := prober.ProbeRun{
			Kind:      k,
			Timing:    prober.TimingOf(p),
			StartedAt: c.state.StartedAt,
			Check:     prober.CheckFor(p, c.spec, c.handle, w.knownPodIP(w.currentPod())),
			Record: func(eventType, reason, message string) {
				w.agent.containerEvent(w.currentPod(), info, eventType, reason, message)
			},
			Report: func(ok bool) {
				w.mu.Lock()
				w.probeResults[probeKey{name: name, kind: k}] = probeResult{attempt: attempt, ok: ok}
				w.mu.Unlock()
				w.poke()
			},
		}
		go r.Run(ctx, w.agent.clock)
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
