package lifecycle

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// ContainerKind says which part a container plays in its pod's lifecycle.
type ContainerKind int

const (
	// KindInit is a regular init container: it runs to completion, in order,
	// before the next init container starts.
	KindInit ContainerKind = iota
	// KindSidecar is an init container with restartPolicy Always (a native
	// sidecar): started in order with the init containers, kept running,
	// restarted whatever the pod's restartPolicy, stopped after the main
	// containers.
	KindSidecar
	// KindMain is a regular container.
	KindMain
	// KindEphemeral is an ephemeral container (kubectl debug): started
	// once it appears in the spec, even while the pod initializes, never
	// restarted, left out of the pod's phase and readiness, stopped with
	// the main containers when the pod finishes.
	KindEphemeral
)

// KindOf returns the kind of a container of the pod.
func KindOf(c *corev1.Container, isInit bool) ContainerKind {
	switch {
	case !isInit:
		return KindMain
	case c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways:
		return KindSidecar
	default:
		return KindInit
	}
}

// Phase is where a container is in its lifecycle. The diagram is in doc.go.
type Phase int

const (
	// PhaseWaiting: no attempt runs yet, or the next one could not be
	// configured (retried at notBefore).
	PhaseWaiting Phase = iota
	// PhaseStarting: an attempt's process runs and its postStart hook has
	// not returned yet; the API still shows the container as before the
	// start, as the kubelet's (its sync blocks on the hook).
	PhaseStarting
	// PhaseRunning: an attempt runs.
	PhaseRunning
	// PhaseBackOff: the last attempt ended and the container starts again
	// at notBefore.
	PhaseBackOff
	// phaseStopping: the running attempt was asked to stop.
	phaseStopping
	// PhaseExited: the container will not run again.
	PhaseExited
)

// String names the phase for logs and test failures.
func (p Phase) String() string {
	return [...]string{"waiting", "starting", "running", "back-off", "stopping", "exited"}[p]
}

// AttemptResult is how one attempt ended, with the ID it ran under.
type AttemptResult struct {
	// Result is the runtime's outcome.
	runtime.Result
	// ContainerID is the attempt's container ID; empty when it never started.
	ContainerID string
}

// ContainerState is the lifecycle state of one container. It is a value:
// transition returns a new one.
type ContainerState struct {
	// Phase is the lifecycle phase.
	Phase Phase
	// Attempt is the number of the current or last attempt (its restart
	// count); meaningful once ran.
	Attempt int32
	// Ran is true once an attempt was made.
	Ran bool
	// StartedAt is when the running attempt started.
	StartedAt time.Time
	// ContainerID identifies the running or last attempt.
	ContainerID string
	// Started is true while the running attempt has passed its startup
	// probe (at once when it has none).
	Started bool
	// Probes are the probes that run against the running attempt.
	Probes AttemptProbes
	// Ready is true while the running attempt is started and has passed
	// its readiness probe (at once when it has none).
	Ready bool
	// Initialized is true once a sidecar has started for the first time:
	// from then on it no longer holds up the init containers after it.
	Initialized bool
	// Last is the last finished attempt, prev the one before; nil if none.
	Last, Prev *AttemptResult
	// NotBefore is when a waiting or backing-off container may start.
	NotBefore time.Time
	// backoff is the crash-loop back-off.
	backoff RestartBackoff
	// policyDecides is set while stopping a container the agent killed on
	// its own (a failed startup or liveness probe): the restart policy then decides on
	// the exit, as after a crash, and restartsAfterKill may restart it
	// whatever its exit code.
	policyDecides bool
	// resizeRestart is set while stopping a container killed because a
	// resize of its resources requires a restart (its resizePolicy): it
	// starts again at once, with no back-off, whatever its restart policy.
	resizeRestart bool
	// RestartAll is set when the attempt that ended last asks for its
	// whole pod to restart in place (TriggersRestartAll): the worker then
	// hands every container of the pod an EvRestartAll, which clears it.
	RestartAll bool
	// resetting is set while stopping an attempt because its pod restarts
	// in place: its exit resets the container instead of ending it.
	resetting bool
	// restarted is set from such a reset until the next start: the
	// container counts the restart already, as the kubelet shows it.
	restarted bool
	// WaitReason and waitMessage say why the container is waiting.
	WaitReason, WaitMessage string
	// hooks are the lifecycle hooks of the running attempt.
	hooks AttemptHooks
	// Hook is the hook that runs now: postStart while starting, preStop
	// while stopping before the stop signal; hookNone otherwise.
	Hook HookKind
	// stopAt and stopGrace are when a stop that runs the preStop hook
	// began and its grace period: the hook's time is deducted from it.
	stopAt    time.Time
	stopGrace time.Duration
	// postStartFailed is set while stopping a container whose postStart
	// hook failed: its exit code then decides on a restart, as the
	// kubelet's next sync finds an exited container. postStartMessage is
	// the hook's failure message.
	postStartFailed  bool
	postStartMessage string
}

// NextAttempt is the number the next attempt will have.
func (s ContainerState) NextAttempt() int32 {
	if s.Ran {
		return s.Attempt + 1
	}
	return 0
}

// RestartCount is the restart count the status shows: the number of the
// current or last attempt, one more once the pod restarted it in place
// (the kubelet counts the restart when it removes the container).
func (s ContainerState) RestartCount() int32 {
	if s.restarted {
		return s.NextAttempt()
	}
	return s.Attempt
}

// due reports whether a waiting or backing-off container may start at now.
func (s ContainerState) due(now time.Time) bool {
	return (s.Phase == PhaseWaiting || s.Phase == PhaseBackOff) && !s.NotBefore.After(now)
}

// Active reports whether an attempt runs (starting, running or stopping).
func (s ContainerState) Active() bool {
	return s.Phase == PhaseStarting || s.Phase == PhaseRunning || s.Phase == phaseStopping
}

// EventKind is what happened to a container.
type EventKind int

const (
	// EvStarted: the runtime started an attempt.
	EvStarted EventKind = iota
	// EvStartFailed: the runtime could not start the attempt; it counts as
	// an attempt that ended with result.
	EvStartFailed
	// EvConfigFailed: the attempt could not be configured (env, working
	// directory); nothing ran.
	EvConfigFailed
	// EvExited: the running attempt ended with result.
	EvExited
	// EvProbeSucceeded: the startup probe passed.
	EvProbeSucceeded
	// EvProbeFailed: the startup or liveness probe (event.probe) reached
	// its failure threshold.
	EvProbeFailed
	// EvReadiness: the readiness probe crossed a threshold (event.ok).
	EvReadiness
	// EvStop: the pod is finishing; the container must not run again.
	EvStop
	// EvImageWait: the container's image is not ready (being pulled, a
	// pull failed, backing off); it waits with reason until retry.
	EvImageWait
	// EvHookDone: the running hook (event.hook) returned: ok, or failed
	// with message, or was abandoned at the end of the grace period
	// (preStop only).
	EvHookDone
	// EvEndedAway: attempt event.attempt (event.containerID) ended with
	// result while no agent watched it (the agent restarted), or was lost.
	EvEndedAway
	// EvAdopted: attempt event.attempt, started at event.at, runs on from
	// a previous run of the agent, which this one took over; event.ok and
	// event.ready are whether it had started and was ready.
	EvAdopted
	// EvResizeRestart: an in-place resize changed a resource whose
	// resizePolicy is RestartContainer: the running attempt is stopped
	// with event.grace and the container started again at once, as the
	// kubelet restarts it with its new resources.
	EvResizeRestart
	// EvRestartAll: a container of the pod exited with a
	// RestartAllContainers rule; every init and regular container is
	// stopped at once (no preStop hook, MinStopGrace) and reset, to start
	// again from the first init container, as the kubelet removes and
	// recreates them in the same sandbox.
	EvRestartAll
)

// Event is one input of transition.
type Event struct {
	// Kind is what happened.
	Kind EventKind
	// At is when it happened.
	At time.Time
	// ContainerID is the started attempt's ID (evStarted).
	ContainerID string
	// Probes are the probes that run against the started attempt
	// (evStarted).
	Probes AttemptProbes
	// Hooks are the lifecycle hooks of the started attempt (evStarted).
	Hooks AttemptHooks
	// Hook is the hook that returned (evHookDone).
	Hook HookKind
	// Abandoned is set when the preStop hook was still running at the end
	// of the grace period (evHookDone).
	Abandoned bool
	// Probe is the probe that failed (evProbeFailed).
	Probe ProbeKind
	// OK is the readiness probe's verdict (evReadiness), or whether the
	// hook succeeded (evHookDone).
	OK bool
	// Result is how the attempt ended (evStartFailed, evExited).
	Result runtime.Result
	// Message explains evConfigFailed, or a hook's failure (evHookDone).
	Message string
	// Grace is the grace period of a stop (evStop, evProbeFailed, and
	// evHookDone of a failed postStart hook: the container is killed).
	Grace time.Duration
	// Attempt is the attempt's number (evEndedAway, evAdopted).
	Attempt int32
	// Ready is whether an adopted attempt was ready (evAdopted).
	Ready bool
	// Reason and retry are the waiting reason and the next look
	// (evImageWait; message is the waiting message); reason also
	// replaces CreateContainerConfigError for evConfigFailed.
	Reason string
	Retry  time.Time
}

// ActionKind is what the worker must do after a transition.
type ActionKind int

const (
	// ActStop: stop the running attempt with grace.
	ActStop ActionKind = iota
	// ActRecord: record an event on the pod.
	ActRecord
	// ActProbe: start the probes now due for the running attempt: the
	// startup probe, or once started the liveness and readiness probes.
	ActProbe
	// ActPostStart: run the attempt's postStart hook.
	ActPostStart
	// ActPreStop: run the attempt's preStop hook, for grace at most;
	// the stop signal follows once it returns (evHookDone).
	ActPreStop
)

// Action is one output of transition.
type Action struct {
	// Kind is what to do.
	Kind ActionKind
	// Grace is the stop's grace period (actStop), or how long the preStop
	// hook may run (actPreStop).
	Grace time.Duration
	// EventType, reason and message describe the event (actRecord).
	EventType, Reason, Message string
}

// recordEvent is an actRecord action.
func recordEvent(eventType, reason, message string) Action {
	return Action{Kind: ActRecord, EventType: eventType, Reason: reason, Message: message}
}

// ContainerInfo is what transition needs to know about the container and
// its pod; it does not change during the pod's life.
type ContainerInfo struct {
	// Name is the container's name.
	Name string
	// Kind is the container's kind.
	Kind ContainerKind
	// Restart is the restart policy (the pod's and the container's).
	Restart RestartPolicy
	// PodRef names the pod in messages: "name_namespace(uid)".
	PodRef string
}

// failedStartedAt is the startedAt of an attempt that never started: the
// Unix epoch, what the kubelet reports for a container the runtime created
// but could not start (its runtime start time is 0).
var failedStartedAt = time.Unix(0, 0).UTC()

// RetryConfigError is how long a container whose attempt cannot be
// configured waits before the next try.
var RetryConfigError = 10 * time.Second

// Transition is the container lifecycle: given the state, what happened and
// the container's fixed facts, it returns the next state and what the worker
// must do. It is pure: the worker starts attempts, delivers their exits and
// probe results, and carries out the actions. Events that make no sense in
// the current phase (a late probe result, a stop of an exited container)
// leave the state unchanged.
func Transition(s ContainerState, c ContainerInfo, ev Event) (ContainerState, []Action) {
	switch ev.Kind {
	case EvStarted:
		if s.Phase != PhaseWaiting && s.Phase != PhaseBackOff {
			return s, nil
		}
		s.Attempt, s.Ran, s.restarted = s.NextAttempt(), true, false
		s.StartedAt, s.ContainerID, s.Probes, s.hooks = ev.At, ev.ContainerID, ev.Probes, ev.Hooks
		s.policyDecides = false
		created := recordEvent(corev1.EventTypeNormal, "Created", "Container created")
		started := recordEvent(corev1.EventTypeNormal, "Started", "Container started")
		if s.hooks.PostStart {
			// Until the hook returns the container shows as before: the
			// waiting reason stays.
			s.Phase, s.Hook = PhaseStarting, HookPostStart
			return s, []Action{created, started, {Kind: ActPostStart}}
		}
		s, out := running(s, c)
		return s, append([]Action{created, started}, out...)
	case EvStartFailed:
		if s.Phase != PhaseWaiting && s.Phase != PhaseBackOff {
			return s, nil
		}
		s.Attempt, s.Ran, s.restarted = s.NextAttempt(), true, false
		s.ContainerID = ""
		res := ev.Result
		if res.StartedAt.IsZero() {
			res.StartedAt = failedStartedAt
		}
		s, out := ended(s, c, res)
		failed := recordEvent(corev1.EventTypeWarning, "Failed", fmt.Sprintf("Error: %s: %s", res.Reason, res.Message))
		return s, append([]Action{failed}, out...)
	case EvConfigFailed:
		if s.Phase != PhaseWaiting && s.Phase != PhaseBackOff {
			return s, nil
		}
		s.Phase = PhaseWaiting
		s.WaitReason, s.WaitMessage = ReasonCreateContainerConfigError, ev.Message
		if ev.Reason != "" {
			s.WaitReason = ev.Reason
		}
		s.NotBefore = ev.At.Add(RetryConfigError)
		return s, []Action{recordEvent(corev1.EventTypeWarning, "Failed", "Error: "+ev.Message)}
	case EvImageWait:
		if s.Phase != PhaseWaiting && s.Phase != PhaseBackOff {
			return s, nil
		}
		s.WaitReason, s.WaitMessage, s.NotBefore = ev.Reason, ev.Message, ev.Retry
		return s, nil
	case EvExited:
		if !s.Active() {
			return s, nil
		}
		if s.resetting {
			return reset(finished(s, ev.Result)), nil
		}
		if s.Phase == phaseStopping && !s.policyDecides {
			s = finished(s, ev.Result)
			s.Phase = PhaseExited
			return s, nil
		}
		return ended(s, c, ev.Result)
	case EvEndedAway:
		if s.Active() {
			return s, nil
		}
		s.Attempt, s.Ran, s.ContainerID = ev.Attempt, true, ev.ContainerID
		return ended(s, c, ev.Result)
	case EvAdopted:
		if s.Active() {
			return s, nil
		}
		s.Attempt, s.Ran = ev.Attempt, true
		s.StartedAt, s.ContainerID, s.Probes, s.hooks = ev.At, ev.ContainerID, ev.Probes, ev.Hooks
		s.policyDecides = false
		s, out := running(s, c)
		if ev.OK && !s.Started {
			// Its startup probe passed before the restart: the liveness
			// and readiness probes resume.
			s.Started, s.Ready = true, ev.Ready
			s.Initialized = s.Initialized || c.Kind == KindSidecar
		} else if s.Started && s.Probes.Readiness {
			s.Ready = ev.Ready
		}
		return s, out
	case EvProbeSucceeded:
		if s.Phase != PhaseRunning {
			return s, nil
		}
		s.Started, s.Ready = true, !s.Probes.Readiness
		s.Initialized = s.Initialized || c.Kind == KindSidecar
		if s.Probes.afterStart() {
			return s, []Action{{Kind: ActProbe}}
		}
		return s, nil
	case EvReadiness:
		if s.Phase != PhaseRunning || !s.Started {
			return s, nil
		}
		s.Ready = ev.OK
		return s, nil
	case EvHookDone:
		switch {
		case ev.Hook == HookPostStart && s.Phase == PhaseStarting && s.Hook == HookPostStart:
			if ev.OK {
				return running(s, c)
			}
			// As the kubelet's startContainer: the event does not carry
			// the hook's message (it may hold secrets); the container is
			// killed, preStop hook included, and its exit code decides.
			s.policyDecides, s.postStartFailed, s.postStartMessage = true, true, ev.Message
			s, stop := stopping(s, ev.At, ev.Grace)
			return s, []Action{
				recordEvent(corev1.EventTypeWarning, ReasonFailedPostStartHook, "PostStartHook failed"),
				recordEvent(corev1.EventTypeNormal, "Killing", ReasonFailedPostStartHook),
				stop,
			}
		case ev.Hook == HookPreStop && s.Phase == phaseStopping && s.Hook == HookPreStop:
			// As the kubelet's killContainer: the hook's whole seconds are
			// deducted from the grace period, and the container gets at
			// least minStopGrace after it.
			s.Hook = HookNone
			grace := max(s.stopGrace-ev.At.Sub(s.stopAt).Truncate(time.Second), MinStopGrace)
			var out []Action
			if !ev.OK && !ev.Abandoned {
				out = append(out, recordEvent(corev1.EventTypeWarning, ReasonFailedPreStopHook, "PreStopHook failed"))
			}
			return s, append(out, Action{Kind: ActStop, Grace: grace})
		}
		return s, nil
	case EvProbeFailed:
		if s.Phase != PhaseRunning {
			return s, nil
		}
		s.policyDecides = true
		probe := strings.ToLower(ev.Probe.String())
		msg := fmt.Sprintf("Container %s failed %s probe", c.Name, probe)
		switch {
		case c.Kind == KindSidecar:
			msg = fmt.Sprintf("Init container %s failed %s probe", c.Name, probe)
		case c.Restart.RestartsAfterKill(c.Kind):
			msg += ", will be restarted"
		}
		s, stop := stopping(s, ev.At, ev.Grace)
		return s, []Action{recordEvent(corev1.EventTypeNormal, "Killing", msg), stop}
	case EvResizeRestart:
		if s.Phase != PhaseRunning && s.Phase != PhaseStarting {
			return s, nil
		}
		s.policyDecides, s.resizeRestart = true, true
		s, stop := stopping(s, ev.At, ev.Grace)
		return s, []Action{recordEvent(corev1.EventTypeNormal, "Killing", fmt.Sprintf("Container %s resize requires restart", c.Name)), stop}
	case EvRestartAll:
		switch s.Phase {
		case PhaseRunning, PhaseStarting:
			// As the kubelet's reset: killed with a zero grace period,
			// so no preStop hook, the runtime given its minimum.
			s.resetting, s.Phase, s.Hook = true, phaseStopping, HookNone
			return s, []Action{recordEvent(corev1.EventTypeNormal, "Killing", MessageKillingRestartAll), {Kind: ActStop, Grace: MinStopGrace}}
		case phaseStopping:
			s.resetting = true
			if s.Hook == HookPreStop {
				// Killed now, as the kubelet's reset does, the hook
				// abandoned.
				s.Hook = HookNone
				return s, []Action{{Kind: ActStop, Grace: MinStopGrace}}
			}
			return s, nil
		}
		return reset(s), nil
	case EvStop:
		switch s.Phase {
		case PhaseRunning, PhaseStarting:
			s, stop := stopping(s, ev.At, ev.Grace)
			return s, []Action{recordEvent(corev1.EventTypeNormal, "Killing", fmt.Sprintf("Stopping container %s", c.Name)), stop}
		case phaseStopping:
			s.policyDecides, s.resizeRestart, s.resetting = false, false, false
		case PhaseWaiting, PhaseBackOff:
			s.Phase, s.RestartAll = PhaseExited, false
			s.WaitReason, s.WaitMessage = "", ""
		}
		return s, nil
	}
	return s, nil
}

// running is the attempt's start once its postStart hook (if any)
// returned: it is started at once without a startup probe, ready at once
// without a readiness probe, and its probes begin.
func running(s ContainerState, c ContainerInfo) (ContainerState, []Action) {
	s.Phase, s.Hook = PhaseRunning, HookNone
	s.Started = !s.Probes.Startup
	s.Ready = s.Started && !s.Probes.Readiness
	s.Initialized = s.Initialized || (c.Kind == KindSidecar && s.Started)
	s.WaitReason, s.WaitMessage = "", ""
	if s.Probes.Startup || s.Probes.afterStart() {
		return s, []Action{{Kind: ActProbe}}
	}
	return s, nil
}

// stopping begins to stop the running attempt with grace: with its preStop
// hook first when it has one and grace is not zero (as the kubelet's
// killContainer), else with the stop signal at once.
func stopping(s ContainerState, at time.Time, grace time.Duration) (ContainerState, Action) {
	s.Phase = phaseStopping
	if s.hooks.PreStop && grace > 0 {
		s.Hook, s.stopAt, s.stopGrace = HookPreStop, at, grace
		return s, Action{Kind: ActPreStop, Grace: grace}
	}
	s.Hook = HookNone
	return s, Action{Kind: ActStop, Grace: grace}
}

// finished records a finished attempt.
func finished(s ContainerState, res runtime.Result) ContainerState {
	s.Prev, s.Last = s.Last, &AttemptResult{Result: res, ContainerID: s.ContainerID}
	s.Started, s.Ready, s.Probes, s.policyDecides, s.resizeRestart = false, false, AttemptProbes{}, false, false
	s.hooks, s.Hook, s.postStartFailed, s.postStartMessage = AttemptHooks{}, HookNone, false, ""
	return s
}

// ended records a finished attempt and lets the restart policy decide: the
// container exits for good, or backs off until its next start. A container
// the agent killed on its own restarts, whatever its exit code, when its
// policy said it "will be restarted"; else its exit code decides, as after
// a crash.
//
// A container killed because its postStart hook failed is decided by its
// exit code: the kubelet kills it inside the start and its next sync finds
// an exited container. When it restarts at once it waits meanwhile with
// reason PostStartHookError and the hook's message, as the kubelet's
// reason cache shows it.
func ended(s ContainerState, c ContainerInfo, res runtime.Result) (ContainerState, []Action) {
	killed := s.policyDecides && !s.postStartFailed
	hookFailed, hookMessage := s.postStartFailed, s.postStartMessage
	resized := s.resizeRestart
	s = finished(s, res)
	if resized {
		// Started again at once, by itself.
		s.Phase, s.NotBefore = PhaseBackOff, res.FinishedAt
		s.WaitReason, s.WaitMessage = "", ""
		return s, nil
	}
	if TriggersRestartAll(c.Restart, c.Kind, res.ExitCode) {
		// Started again with the whole pod (the worker's EvRestartAll),
		// not before its crash-loop back-off allows: the kubelet has
		// none here, but its sync loop paces a container that keeps
		// exiting at once; the agent's would spin.
		s.Phase, s.NotBefore, s.RestartAll = PhaseBackOff, res.FinishedAt.Add(s.backoff.next(res.FinishedAt)), true
		s.WaitReason, s.WaitMessage = "", ""
		return s, nil
	}
	if !(killed && c.Restart.RestartsAfterKill(c.Kind)) && !ShouldRestart(c.Restart, c.Kind, res.ExitCode) {
		s.Phase = PhaseExited
		s.WaitReason, s.WaitMessage = "", ""
		return s, nil
	}
	delay := s.backoff.next(res.FinishedAt)
	s.Phase, s.NotBefore = PhaseBackOff, res.FinishedAt.Add(delay)
	s.WaitReason, s.WaitMessage = "", ""
	if delay == 0 {
		if hookFailed {
			s.WaitReason, s.WaitMessage = ReasonPostStartHookError, hookMessage
		}
		return s, nil
	}
	s.WaitReason = ReasonCrashLoopBackOff
	s.WaitMessage = fmt.Sprintf("back-off %s restarting failed container=%s pod=%s", delay, c.Name, c.PodRef)
	return s, []Action{recordEvent(corev1.EventTypeWarning, "BackOff", fmt.Sprintf("Back-off restarting failed container %s in pod %s", c.Name, c.PodRef))}
}

// reset is a container its pod restarts in place, once no attempt of it
// runs: it waits to start again as soon as its turn comes (the container
// that asked for the restart not before its back-off allows),
// from the first init container on, so a sidecar must start again before
// the containers after it. One that ran shows, as the kubelet's, a last
// termination of ReasonRestartingAllContainers with exit code 137 in place
// of its real one, and counts the restart at once; one that never ran is
// left as it was.
func reset(s ContainerState) ContainerState {
	notBefore := time.Time{}
	if s.RestartAll {
		// The container that asked: its back-off holds.
		notBefore = s.NotBefore
	}
	s.RestartAll, s.resetting, s.Initialized = false, false, false
	s.Phase, s.NotBefore = PhaseWaiting, notBefore
	if !s.Ran {
		return s
	}
	s.restarted = true
	s.WaitReason, s.WaitMessage = ReasonRestartingAllContainers, MessageRestartingAllContainers
	s.Last = &AttemptResult{Result: runtime.Result{ExitCode: ExitCodeRestartingAllContainers, Reason: ReasonRestartingAllContainers, Message: MessageRestartingAllContainers}}
	return s
}

// RestoreReset rebuilds the state of a container the API shows waiting
// after its pod restarted it in place, from its restart count (which
// counts that restart already).
func RestoreReset(s ContainerState, restartCount int32) ContainerState {
	s.Attempt, s.Ran, s.restarted = restartCount-1, true, true
	s.Phase, s.NotBefore = PhaseWaiting, time.Time{}
	s.WaitReason, s.WaitMessage = ReasonRestartingAllContainers, MessageRestartingAllContainers
	return s
}

// MinStopGrace is the shortest grace period a sidecar stopped in its turn
// gets, as the kubelet's minimum shutdown window.
const MinStopGrace = 2 * time.Second
