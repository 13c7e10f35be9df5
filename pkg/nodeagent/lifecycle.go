package nodeagent

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// containerKind says which part a container plays in its pod's lifecycle.
type containerKind int

const (
	// kindInit is a regular init container: it runs to completion, in order,
	// before the next init container starts.
	kindInit containerKind = iota
	// kindSidecar is an init container with restartPolicy Always (a native
	// sidecar): started in order with the init containers, kept running,
	// restarted whatever the pod's restartPolicy, stopped after the main
	// containers.
	kindSidecar
	// kindMain is a regular container.
	kindMain
	// kindEphemeral is an ephemeral container (kubectl debug): started
	// once it appears in the spec, even while the pod initializes, never
	// restarted, left out of the pod's phase and readiness, stopped with
	// the main containers when the pod finishes.
	kindEphemeral
)

// kindOf returns the kind of a container of the pod.
func kindOf(c *corev1.Container, isInit bool) containerKind {
	switch {
	case !isInit:
		return kindMain
	case c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways:
		return kindSidecar
	default:
		return kindInit
	}
}

// phase is where a container is in its lifecycle. The diagram is in doc.go.
type phase int

const (
	// phaseWaiting: no attempt runs yet, or the next one could not be
	// configured (retried at notBefore).
	phaseWaiting phase = iota
	// phaseStarting: an attempt's process runs and its postStart hook has
	// not returned yet; the API still shows the container as before the
	// start, as the kubelet's (its sync blocks on the hook).
	phaseStarting
	// phaseRunning: an attempt runs.
	phaseRunning
	// phaseBackOff: the last attempt ended and the container starts again
	// at notBefore.
	phaseBackOff
	// phaseStopping: the running attempt was asked to stop.
	phaseStopping
	// phaseExited: the container will not run again.
	phaseExited
)

// String names the phase for logs and test failures.
func (p phase) String() string {
	return [...]string{"waiting", "starting", "running", "back-off", "stopping", "exited"}[p]
}

// attemptResult is how one attempt ended, with the ID it ran under.
type attemptResult struct {
	// Result is the runtime's outcome.
	runtime.Result
	// containerID is the attempt's container ID; empty when it never started.
	containerID string
}

// containerState is the lifecycle state of one container. It is a value:
// transition returns a new one.
type containerState struct {
	// phase is the lifecycle phase.
	phase phase
	// attempt is the number of the current or last attempt (its restart
	// count); meaningful once ran.
	attempt int32
	// ran is true once an attempt was made.
	ran bool
	// startedAt is when the running attempt started.
	startedAt time.Time
	// containerID identifies the running or last attempt.
	containerID string
	// started is true while the running attempt has passed its startup
	// probe (at once when it has none).
	started bool
	// probes are the probes that run against the running attempt.
	probes attemptProbes
	// ready is true while the running attempt is started and has passed
	// its readiness probe (at once when it has none).
	ready bool
	// initialized is true once a sidecar has started for the first time:
	// from then on it no longer holds up the init containers after it.
	initialized bool
	// last is the last finished attempt, prev the one before; nil if none.
	last, prev *attemptResult
	// notBefore is when a waiting or backing-off container may start.
	notBefore time.Time
	// backoff is the crash-loop back-off.
	backoff restartBackoff
	// policyDecides is set while stopping a container the agent killed on
	// its own (a failed startup or liveness probe): the restart policy then decides on
	// the exit, as after a crash, and restartsAfterKill may restart it
	// whatever its exit code.
	policyDecides bool
	// waitReason and waitMessage say why the container is waiting.
	waitReason, waitMessage string
	// hooks are the lifecycle hooks of the running attempt.
	hooks attemptHooks
	// hook is the hook that runs now: postStart while starting, preStop
	// while stopping before the stop signal; hookNone otherwise.
	hook hookKind
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

// nextAttempt is the number the next attempt will have.
func (s containerState) nextAttempt() int32 {
	if s.ran {
		return s.attempt + 1
	}
	return 0
}

// due reports whether a waiting or backing-off container may start at now.
func (s containerState) due(now time.Time) bool {
	return (s.phase == phaseWaiting || s.phase == phaseBackOff) && !s.notBefore.After(now)
}

// active reports whether an attempt runs (starting, running or stopping).
func (s containerState) active() bool {
	return s.phase == phaseStarting || s.phase == phaseRunning || s.phase == phaseStopping
}

// eventKind is what happened to a container.
type eventKind int

const (
	// evStarted: the runtime started an attempt.
	evStarted eventKind = iota
	// evStartFailed: the runtime could not start the attempt; it counts as
	// an attempt that ended with result.
	evStartFailed
	// evConfigFailed: the attempt could not be configured (env, working
	// directory); nothing ran.
	evConfigFailed
	// evExited: the running attempt ended with result.
	evExited
	// evProbeSucceeded: the startup probe passed.
	evProbeSucceeded
	// evProbeFailed: the startup or liveness probe (event.probe) reached
	// its failure threshold.
	evProbeFailed
	// evReadiness: the readiness probe crossed a threshold (event.ok).
	evReadiness
	// evStop: the pod is finishing; the container must not run again.
	evStop
	// evImageWait: the container's image is not ready (being pulled, a
	// pull failed, backing off); it waits with reason until retry.
	evImageWait
	// evHookDone: the running hook (event.hook) returned: ok, or failed
	// with message, or was abandoned at the end of the grace period
	// (preStop only).
	evHookDone
	// evEndedAway: attempt event.attempt (event.containerID) ended with
	// result while no agent watched it (the agent restarted), or was lost.
	evEndedAway
	// evAdopted: attempt event.attempt, started at event.at, runs on from
	// a previous run of the agent, which this one took over; event.ok and
	// event.ready are whether it had started and was ready.
	evAdopted
)

// event is one input of transition.
type event struct {
	// kind is what happened.
	kind eventKind
	// at is when it happened.
	at time.Time
	// containerID is the started attempt's ID (evStarted).
	containerID string
	// probes are the probes that run against the started attempt
	// (evStarted).
	probes attemptProbes
	// hooks are the lifecycle hooks of the started attempt (evStarted).
	hooks attemptHooks
	// hook is the hook that returned (evHookDone).
	hook hookKind
	// abandoned is set when the preStop hook was still running at the end
	// of the grace period (evHookDone).
	abandoned bool
	// probe is the probe that failed (evProbeFailed).
	probe probeKind
	// ok is the readiness probe's verdict (evReadiness), or whether the
	// hook succeeded (evHookDone).
	ok bool
	// result is how the attempt ended (evStartFailed, evExited).
	result runtime.Result
	// message explains evConfigFailed, or a hook's failure (evHookDone).
	message string
	// grace is the grace period of a stop (evStop, evProbeFailed, and
	// evHookDone of a failed postStart hook: the container is killed).
	grace time.Duration
	// attempt is the attempt's number (evEndedAway, evAdopted).
	attempt int32
	// ready is whether an adopted attempt was ready (evAdopted).
	ready bool
	// reason and retry are the waiting reason and the next look
	// (evImageWait; message is the waiting message); reason also
	// replaces CreateContainerConfigError for evConfigFailed.
	reason string
	retry  time.Time
}

// actionKind is what the worker must do after a transition.
type actionKind int

const (
	// actStop: stop the running attempt with grace.
	actStop actionKind = iota
	// actRecord: record an event on the pod.
	actRecord
	// actProbe: start the probes now due for the running attempt: the
	// startup probe, or once started the liveness and readiness probes.
	actProbe
	// actPostStart: run the attempt's postStart hook.
	actPostStart
	// actPreStop: run the attempt's preStop hook, for grace at most;
	// the stop signal follows once it returns (evHookDone).
	actPreStop
)

// action is one output of transition.
type action struct {
	// kind is what to do.
	kind actionKind
	// grace is the stop's grace period (actStop), or how long the preStop
	// hook may run (actPreStop).
	grace time.Duration
	// eventType, reason and message describe the event (actRecord).
	eventType, reason, message string
}

// recordEvent is an actRecord action.
func recordEvent(eventType, reason, message string) action {
	return action{kind: actRecord, eventType: eventType, reason: reason, message: message}
}

// containerInfo is what transition needs to know about the container and
// its pod; it does not change during the pod's life.
type containerInfo struct {
	// name is the container's name.
	name string
	// kind is the container's kind.
	kind containerKind
	// restart is the restart policy (the pod's and the container's).
	restart restartPolicy
	// podRef names the pod in messages: "name_namespace(uid)".
	podRef string
}

// failedStartedAt is the startedAt of an attempt that never started: the
// Unix epoch, what the kubelet reports for a container the runtime created
// but could not start (its runtime start time is 0).
var failedStartedAt = time.Unix(0, 0).UTC()

// retryConfigError is how long a container whose attempt cannot be
// configured waits before the next try.
var retryConfigError = 10 * time.Second

// transition is the container lifecycle: given the state, what happened and
// the container's fixed facts, it returns the next state and what the worker
// must do. It is pure: the worker starts attempts, delivers their exits and
// probe results, and carries out the actions. Events that make no sense in
// the current phase (a late probe result, a stop of an exited container)
// leave the state unchanged.
func transition(s containerState, c containerInfo, ev event) (containerState, []action) {
	switch ev.kind {
	case evStarted:
		if s.phase != phaseWaiting && s.phase != phaseBackOff {
			return s, nil
		}
		s.attempt, s.ran = s.nextAttempt(), true
		s.startedAt, s.containerID, s.probes, s.hooks = ev.at, ev.containerID, ev.probes, ev.hooks
		s.policyDecides = false
		created := recordEvent(corev1.EventTypeNormal, "Created", "Container created")
		started := recordEvent(corev1.EventTypeNormal, "Started", "Container started")
		if s.hooks.postStart {
			// Until the hook returns the container shows as before: the
			// waiting reason stays.
			s.phase, s.hook = phaseStarting, hookPostStart
			return s, []action{created, started, {kind: actPostStart}}
		}
		s, out := running(s, c)
		return s, append([]action{created, started}, out...)
	case evStartFailed:
		if s.phase != phaseWaiting && s.phase != phaseBackOff {
			return s, nil
		}
		s.attempt, s.ran = s.nextAttempt(), true
		s.containerID = ""
		res := ev.result
		if res.StartedAt.IsZero() {
			res.StartedAt = failedStartedAt
		}
		s, out := ended(s, c, res)
		failed := recordEvent(corev1.EventTypeWarning, "Failed", fmt.Sprintf("Error: %s: %s", res.Reason, res.Message))
		return s, append([]action{failed}, out...)
	case evConfigFailed:
		if s.phase != phaseWaiting && s.phase != phaseBackOff {
			return s, nil
		}
		s.phase = phaseWaiting
		s.waitReason, s.waitMessage = ReasonCreateContainerConfigError, ev.message
		if ev.reason != "" {
			s.waitReason = ev.reason
		}
		s.notBefore = ev.at.Add(retryConfigError)
		return s, []action{recordEvent(corev1.EventTypeWarning, "Failed", "Error: "+ev.message)}
	case evImageWait:
		if s.phase != phaseWaiting && s.phase != phaseBackOff {
			return s, nil
		}
		s.waitReason, s.waitMessage, s.notBefore = ev.reason, ev.message, ev.retry
		return s, nil
	case evExited:
		if !s.active() {
			return s, nil
		}
		if s.phase == phaseStopping && !s.policyDecides {
			s = finished(s, ev.result)
			s.phase = phaseExited
			return s, nil
		}
		return ended(s, c, ev.result)
	case evEndedAway:
		if s.active() {
			return s, nil
		}
		s.attempt, s.ran, s.containerID = ev.attempt, true, ev.containerID
		return ended(s, c, ev.result)
	case evAdopted:
		if s.active() {
			return s, nil
		}
		s.attempt, s.ran = ev.attempt, true
		s.startedAt, s.containerID, s.probes, s.hooks = ev.at, ev.containerID, ev.probes, ev.hooks
		s.policyDecides = false
		s, out := running(s, c)
		if ev.ok && !s.started {
			// Its startup probe passed before the restart: the liveness
			// and readiness probes resume.
			s.started, s.ready = true, ev.ready
			s.initialized = s.initialized || c.kind == kindSidecar
		} else if s.started && s.probes.readiness {
			s.ready = ev.ready
		}
		return s, out
	case evProbeSucceeded:
		if s.phase != phaseRunning {
			return s, nil
		}
		s.started, s.ready = true, !s.probes.readiness
		s.initialized = s.initialized || c.kind == kindSidecar
		if s.probes.afterStart() {
			return s, []action{{kind: actProbe}}
		}
		return s, nil
	case evReadiness:
		if s.phase != phaseRunning || !s.started {
			return s, nil
		}
		s.ready = ev.ok
		return s, nil
	case evHookDone:
		switch {
		case ev.hook == hookPostStart && s.phase == phaseStarting && s.hook == hookPostStart:
			if ev.ok {
				return running(s, c)
			}
			// As the kubelet's startContainer: the event does not carry
			// the hook's message (it may hold secrets); the container is
			// killed, preStop hook included, and its exit code decides.
			s.policyDecides, s.postStartFailed, s.postStartMessage = true, true, ev.message
			s, stop := stopping(s, ev.at, ev.grace)
			return s, []action{
				recordEvent(corev1.EventTypeWarning, ReasonFailedPostStartHook, "PostStartHook failed"),
				recordEvent(corev1.EventTypeNormal, "Killing", ReasonFailedPostStartHook),
				stop,
			}
		case ev.hook == hookPreStop && s.phase == phaseStopping && s.hook == hookPreStop:
			// As the kubelet's killContainer: the hook's whole seconds are
			// deducted from the grace period, and the container gets at
			// least minStopGrace after it.
			s.hook = hookNone
			grace := max(s.stopGrace-ev.at.Sub(s.stopAt).Truncate(time.Second), minStopGrace)
			var out []action
			if !ev.ok && !ev.abandoned {
				out = append(out, recordEvent(corev1.EventTypeWarning, ReasonFailedPreStopHook, "PreStopHook failed"))
			}
			return s, append(out, action{kind: actStop, grace: grace})
		}
		return s, nil
	case evProbeFailed:
		if s.phase != phaseRunning {
			return s, nil
		}
		s.policyDecides = true
		probe := strings.ToLower(ev.probe.String())
		msg := fmt.Sprintf("Container %s failed %s probe", c.name, probe)
		switch {
		case c.kind == kindSidecar:
			msg = fmt.Sprintf("Init container %s failed %s probe", c.name, probe)
		case c.restart.restartsAfterKill(c.kind):
			msg += ", will be restarted"
		}
		s, stop := stopping(s, ev.at, ev.grace)
		return s, []action{recordEvent(corev1.EventTypeNormal, "Killing", msg), stop}
	case evStop:
		switch s.phase {
		case phaseRunning, phaseStarting:
			s, stop := stopping(s, ev.at, ev.grace)
			return s, []action{recordEvent(corev1.EventTypeNormal, "Killing", fmt.Sprintf("Stopping container %s", c.name)), stop}
		case phaseStopping:
			s.policyDecides = false
		case phaseWaiting, phaseBackOff:
			s.phase = phaseExited
			s.waitReason, s.waitMessage = "", ""
		}
		return s, nil
	}
	return s, nil
}

// running is the attempt's start once its postStart hook (if any)
// returned: it is started at once without a startup probe, ready at once
// without a readiness probe, and its probes begin.
func running(s containerState, c containerInfo) (containerState, []action) {
	s.phase, s.hook = phaseRunning, hookNone
	s.started = !s.probes.startup
	s.ready = s.started && !s.probes.readiness
	s.initialized = s.initialized || (c.kind == kindSidecar && s.started)
	s.waitReason, s.waitMessage = "", ""
	if s.probes.startup || s.probes.afterStart() {
		return s, []action{{kind: actProbe}}
	}
	return s, nil
}

// stopping begins to stop the running attempt with grace: with its preStop
// hook first when it has one and grace is not zero (as the kubelet's
// killContainer), else with the stop signal at once.
func stopping(s containerState, at time.Time, grace time.Duration) (containerState, action) {
	s.phase = phaseStopping
	if s.hooks.preStop && grace > 0 {
		s.hook, s.stopAt, s.stopGrace = hookPreStop, at, grace
		return s, action{kind: actPreStop, grace: grace}
	}
	s.hook = hookNone
	return s, action{kind: actStop, grace: grace}
}

// finished records a finished attempt.
func finished(s containerState, res runtime.Result) containerState {
	s.prev, s.last = s.last, &attemptResult{Result: res, containerID: s.containerID}
	s.started, s.ready, s.probes, s.policyDecides = false, false, attemptProbes{}, false
	s.hooks, s.hook, s.postStartFailed, s.postStartMessage = attemptHooks{}, hookNone, false, ""
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
func ended(s containerState, c containerInfo, res runtime.Result) (containerState, []action) {
	killed := s.policyDecides && !s.postStartFailed
	hookFailed, hookMessage := s.postStartFailed, s.postStartMessage
	s = finished(s, res)
	if !(killed && c.restart.restartsAfterKill(c.kind)) && !shouldRestart(c.restart, c.kind, res.ExitCode) {
		s.phase = phaseExited
		s.waitReason, s.waitMessage = "", ""
		return s, nil
	}
	delay := s.backoff.next(res.FinishedAt)
	s.phase, s.notBefore = phaseBackOff, res.FinishedAt.Add(delay)
	s.waitReason, s.waitMessage = "", ""
	if delay == 0 {
		if hookFailed {
			s.waitReason, s.waitMessage = ReasonPostStartHookError, hookMessage
		}
		return s, nil
	}
	s.waitReason = ReasonCrashLoopBackOff
	s.waitMessage = fmt.Sprintf("back-off %s restarting failed container=%s pod=%s", delay, c.name, c.podRef)
	return s, []action{recordEvent(corev1.EventTypeWarning, "BackOff", fmt.Sprintf("Back-off restarting failed container %s in pod %s", c.name, c.podRef))}
}
