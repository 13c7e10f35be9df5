package lifecycle

import "time"

// PodPlan is what the worker does next with a pod's containers: which to
// start, which to stop, and when to look again.
type PodPlan struct {
	// Start are the containers whose turn has come (indexes into the
	// pod's containers, init containers first).
	Start []int
	// Stop are the containers to hand an evStop.
	Stop []int
	// Next is when the plan may change without an event (a back-off or the
	// end of the grace period); zero when only an event can change it.
	Next time.Time
}

// PlanInput is what planPod looks at.
type PlanInput struct {
	// Kinds and states describe the pod's containers, init containers
	// first, in spec order.
	Kinds []ContainerKind
	// States are the containers' lifecycle states.
	States []ContainerState
	// Finishing is podFinishing's answer.
	Finishing bool
	// StopDeadline is when the grace period of a finishing pod runs out.
	StopDeadline time.Time
	// Now is the current time.
	Now time.Time
}

// PodFinishing reports whether the pod is winding down, after which no
// container starts again: the pod is being deleted or ran past its
// deadline (stopping), a regular init container failed for good, or every
// main container exited for good (sidecars do not keep a pod alive).
func PodFinishing(kinds []ContainerKind, states []ContainerState, stopping bool) bool {
	if stopping {
		return true
	}
	mains, mainsExited := 0, 0
	for i, k := range kinds {
		s := states[i]
		switch k {
		case KindInit:
			if s.Phase == PhaseExited && s.Last != nil && s.Last.ExitCode != 0 {
				return true
			}
		case KindMain:
			mains++
			if s.Phase == PhaseExited {
				mainsExited++
			}
		}
	}
	return mains > 0 && mains == mainsExited
}

// PlanPod decides, as the kubelet does, which containers start or stop.
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
func PlanPod(in PlanInput) PodPlan {
	var p PodPlan
	wake := func(t time.Time) {
		if !t.IsZero() && (p.Next.IsZero() || t.Before(p.Next)) {
			p.Next = t
		}
	}
	if in.Finishing {
		mainsActive := false
		for i, k := range in.Kinds {
			s := in.States[i]
			if k == KindMain && s.Active() {
				mainsActive = true
			}
			if k == KindSidecar {
				continue
			}
			if s.Phase == PhaseRunning || s.Phase == PhaseStarting || s.Phase == PhaseWaiting || s.Phase == PhaseBackOff || (s.Phase == phaseStopping && (s.policyDecides || s.resetting)) {
				p.Stop = append(p.Stop, i)
			}
		}
		graceOver := !in.Now.Before(in.StopDeadline)
		laterActive := false
		for i := len(in.Kinds) - 1; i >= 0; i-- {
			if in.Kinds[i] != KindSidecar {
				continue
			}
			s := in.States[i]
			switch {
			case s.Phase == PhaseWaiting || s.Phase == PhaseBackOff:
				p.Stop = append(p.Stop, i)
			case s.Phase == PhaseRunning || s.Phase == PhaseStarting || (s.Phase == phaseStopping && (s.policyDecides || s.resetting)):
				if graceOver || (!mainsActive && !laterActive) {
					p.Stop = append(p.Stop, i)
				} else {
					wake(in.StopDeadline)
				}
			}
			laterActive = laterActive || s.Active()
		}
		return p
	}

	consider := func(i int) {
		if s := in.States[i]; s.due(in.Now) {
			p.Start = append(p.Start, i)
		} else if s.Phase == PhaseWaiting || s.Phase == PhaseBackOff {
			wake(s.NotBefore)
		}
	}
	initsDone := true
	for i, k := range in.Kinds {
		s := in.States[i]
		if k == KindMain || k == KindEphemeral {
			continue
		}
		if k == KindInit && s.Phase == PhaseExited {
			continue
		}
		if k == KindSidecar && (s.Initialized || s.Phase == PhaseExited) {
			continue
		}
		initsDone = false
		consider(i)
		break
	}
	for i, k := range in.Kinds {
		switch {
		case k == KindMain && initsDone:
			consider(i)
		case k == KindSidecar && in.States[i].Initialized:
			consider(i)
		case k == KindEphemeral:
			// Whether or not initialization is through, as the kubelet.
			consider(i)
		}
	}
	return p
}
