package nodeagent

import "time"

// podPlan is what the worker does next with a pod's containers: which to
// start, which to stop, and when to look again.
type podPlan struct {
	// start are the containers whose turn has come (indexes into the
	// pod's containers, init containers first).
	start []int
	// stop are the containers to hand an evStop.
	stop []int
	// next is when the plan may change without an event (a back-off or the
	// end of the grace period); zero when only an event can change it.
	next time.Time
}

// planInput is what planPod looks at.
type planInput struct {
	// kinds and states describe the pod's containers, init containers
	// first, in spec order.
	kinds []containerKind
	// states are the containers' lifecycle states.
	states []containerState
	// finishing is podFinishing's answer.
	finishing bool
	// stopDeadline is when the grace period of a finishing pod runs out.
	stopDeadline time.Time
	// now is the current time.
	now time.Time
}

// podFinishing reports whether the pod is winding down, after which no
// container starts again: the pod is being deleted or ran past its
// deadline (stopping), a regular init container failed for good, or every
// main container exited for good (sidecars do not keep a pod alive).
func podFinishing(kinds []containerKind, states []containerState, stopping bool) bool {
	if stopping {
		return true
	}
	mains, mainsExited := 0, 0
	for i, k := range kinds {
		s := states[i]
		switch k {
		case kindInit:
			if s.phase == phaseExited && s.last != nil && s.last.ExitCode != 0 {
				return true
			}
		case kindMain:
			mains++
			if s.phase == phaseExited {
				mainsExited++
			}
		}
	}
	return mains > 0 && mains == mainsExited
}

// planPod decides, as the kubelet does, which containers start or stop.
//
// While the pod runs: init containers start one at a time in spec order; a
// regular init container must exit successfully before the next one starts,
// a sidecar must have started (passed its startup probe, if it has one).
// Once every init container is through, all main containers start. A sidecar
// that started once is restarted on its own whenever its back-off allows.
// An ephemeral container starts as soon as it is there (it never restarts:
// its restart policy says so).
//
// Once the pod is finishing: main, ephemeral and regular init containers
// are stopped at once, sidecars in reverse spec order, each when no main container and
// no later sidecar runs any more, or when the grace period is over.
func planPod(in planInput) podPlan {
	var p podPlan
	wake := func(t time.Time) {
		if !t.IsZero() && (p.next.IsZero() || t.Before(p.next)) {
			p.next = t
		}
	}
	if in.finishing {
		mainsActive := false
		for i, k := range in.kinds {
			s := in.states[i]
			if k == kindMain && s.active() {
				mainsActive = true
			}
			if k == kindSidecar {
				continue
			}
			if s.phase == phaseRunning || s.phase == phaseStarting || s.phase == phaseWaiting || s.phase == phaseBackOff || (s.phase == phaseStopping && s.policyDecides) {
				p.stop = append(p.stop, i)
			}
		}
		graceOver := !in.now.Before(in.stopDeadline)
		laterActive := false
		for i := len(in.kinds) - 1; i >= 0; i-- {
			if in.kinds[i] != kindSidecar {
				continue
			}
			s := in.states[i]
			switch {
			case s.phase == phaseWaiting || s.phase == phaseBackOff:
				p.stop = append(p.stop, i)
			case s.phase == phaseRunning || s.phase == phaseStarting || (s.phase == phaseStopping && s.policyDecides):
				if graceOver || (!mainsActive && !laterActive) {
					p.stop = append(p.stop, i)
				} else {
					wake(in.stopDeadline)
				}
			}
			laterActive = laterActive || s.active()
		}
		return p
	}

	consider := func(i int) {
		if s := in.states[i]; s.due(in.now) {
			p.start = append(p.start, i)
		} else if s.phase == phaseWaiting || s.phase == phaseBackOff {
			wake(s.notBefore)
		}
	}
	initsDone := true
	for i, k := range in.kinds {
		s := in.states[i]
		if k == kindMain || k == kindEphemeral {
			continue
		}
		if k == kindInit && s.phase == phaseExited {
			continue
		}
		if k == kindSidecar && (s.initialized || s.phase == phaseExited) {
			continue
		}
		initsDone = false
		consider(i)
		break
	}
	for i, k := range in.kinds {
		switch {
		case k == kindMain && initsDone:
			consider(i)
		case k == kindSidecar && in.states[i].initialized:
			consider(i)
		case k == kindEphemeral:
			// Whether or not initialization is through, as the kubelet.
			consider(i)
		}
	}
	return p
}
