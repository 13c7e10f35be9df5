package nodeagent

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/lifecycle"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/podconfig"
)

// containerView is what the status needs to know about one container.
type containerView struct {
	// name is the container's name.
	name string
	// image is the container's image: the reference it resolved to in
	// image mode, the spec's otherwise.
	image string
	// imageID is the image's digest ("" in host mode).
	imageID string
	// kind is the container's kind (init, sidecar, main).
	kind lifecycle.ContainerKind
	// running is true while an attempt runs (stopping included).
	running bool
	// started is true while the running attempt has passed its startup
	// probe (at once without one).
	started bool
	// ready is true while the running attempt is started and has passed
	// its readiness probe (at once without one).
	ready bool
	// startedAt is when the running attempt started.
	startedAt time.Time
	// containerID identifies the running or last attempt.
	containerID string
	// restartCount counts restarts.
	restartCount int32
	// last is the last finished attempt, nil if none.
	last *lifecycle.AttemptResult
	// prev is the attempt before last, nil if none.
	prev *lifecycle.AttemptResult
	// final is true when the container will not run again.
	final bool
	// everRan is true once an attempt was made.
	everRan bool
	// waitReason and waitMessage describe why a container is not running.
	waitReason, waitMessage string
}

// podView is what the status needs to know about the pod.
type podView struct {
	// inits are the init containers (regular and sidecars), in spec order.
	inits []containerView
	// containers are the main containers, in spec order.
	containers []containerView
	// ephemerals are the ephemeral containers, in spec order; they count
	// for neither the phase nor the conditions.
	ephemerals []containerView
	// startTime is when the agent accepted the pod.
	startTime time.Time
	// terminal is true once the pod was stopped for good (deletion, deadline).
	terminal bool
	// reason and message explain a terminal pod.
	reason, message string
	// disrupted is set when the pod is stopped by a node shutdown.
	disrupted bool
}

// exitCode returns the last exit code of a container and whether it ran.
func (c containerView) exitCode() (int32, bool) {
	if c.last == nil {
		return 0, false
	}
	return c.last.ExitCode, true
}

// initSucceeded reports whether a regular init container is done successfully.
func (c containerView) initSucceeded() bool {
	code, ran := c.exitCode()
	return !c.running && ran && code == 0 && c.final
}

// initialized reports whether an init container counts as initialized, as
// the kubelet's Initialized condition counts it: a sidecar while it runs
// and has started, a regular init container once it succeeded.
func (c containerView) initialized() bool {
	if c.kind == lifecycle.KindSidecar {
		return c.running && c.started
	}
	return c.initSucceeded()
}

// anyRunning reports whether an attempt of the pod still runs.
func (v podView) anyRunning() bool {
	for _, c := range v.inits {
		if c.running {
			return true
		}
	}
	for _, c := range v.containers {
		if c.running {
			return true
		}
	}
	for _, c := range v.ephemerals {
		if c.running {
			return true
		}
	}
	return false
}

// mainStarted reports whether a main container ever ran: the pod was
// initialized (the kubelet's HasAnyActiveRegularContainerStarted).
func (v podView) mainStarted() bool {
	for _, c := range v.containers {
		if c.running || c.everRan {
			return true
		}
	}
	return false
}

// podPhase derives the phase from the containers as the kubelet's getPhase
// does (pkg/kubelet/kubelet_pods.go, with ContainerRestartRules on, its
// default since 1.35):
//   - a regular init container that failed and will not restart fails the pod;
//   - a regular init container not done, or a sidecar not started before the
//     pod was initialized, or a main container never started: Pending;
//   - any running main container or sidecar: Running;
//   - every main container stopped: Running while one of them will restart,
//     else Succeeded when all exited 0, else Failed. A terminated or
//     restarting sidecar does not count.
//
// A pod stopped for good (deletion, deadline) with nothing running is
// Succeeded only if every main container exited 0, else Failed.
func podPhase(v podView) corev1.PodPhase {
	pendingInit, pendingSidecar, sidecarsWaiting, failedInit := 0, 0, 0, 0
	running, waiting, stopped, stoppedFinal, succeeded := 0, 0, 0, 0, 0
	for _, c := range v.inits {
		code, ran := c.exitCode()
		if c.kind == lifecycle.KindSidecar {
			switch {
			case c.running:
				running++
				if !c.started {
					pendingSidecar++
				}
			case !ran:
				pendingSidecar++
				sidecarsWaiting++
			}
			continue
		}
		switch {
		case c.running || !ran:
			pendingInit++
		case code != 0 && c.final:
			failedInit++
		}
	}
	for _, c := range v.containers {
		code, ran := c.exitCode()
		switch {
		case c.running:
			running++
		case ran:
			stopped++
			if c.final {
				stoppedFinal++
			}
			if code == 0 && (c.final || v.terminal) {
				succeeded++
			}
		default:
			waiting++
		}
	}
	if v.terminal && running == 0 {
		if pendingInit == 0 && failedInit == 0 && waiting == 0 && stopped == succeeded {
			return corev1.PodSucceeded
		}
		return corev1.PodFailed
	}
	if failedInit > 0 {
		return corev1.PodFailed
	}
	switch {
	case pendingInit > 0, pendingSidecar > 0 && !v.mainStarted(), waiting > 0, sidecarsWaiting > 0:
		return corev1.PodPending
	case running > 0:
		return corev1.PodRunning
	case stopped > 0 && stopped != stoppedFinal:
		return corev1.PodRunning
	case stopped > 0 && stopped == succeeded:
		return corev1.PodSucceeded
	case stopped > 0:
		return corev1.PodFailed
	default:
		return corev1.PodPending
	}
}

// containerStatus builds the API status of one container. Each terminated
// state carries the container ID of the attempt it describes.
func containerStatus(c containerView, terminal bool) corev1.ContainerStatus {
	s := corev1.ContainerStatus{
		Name:         c.name,
		Image:        c.image,
		ImageID:      c.imageID,
		ContainerID:  c.containerID,
		RestartCount: c.restartCount,
		Ready:        c.running && c.ready && !terminal,
		Started:      ptr.To(c.running && c.started),
	}
	switch {
	case c.running:
		s.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(c.startedAt)}
		if c.last != nil {
			s.LastTerminationState.Terminated = terminatedState(c.last)
		}
	case c.last != nil && (c.final || terminal):
		s.State.Terminated = terminatedState(c.last)
		if c.prev != nil {
			s.LastTerminationState.Terminated = terminatedState(c.prev)
		}
	case c.last != nil:
		reason := c.waitReason
		if reason == "" {
			reason = lifecycle.ReasonCrashLoopBackOff
		}
		s.State.Waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: c.waitMessage}
		s.LastTerminationState.Terminated = terminatedState(c.last)
	default:
		reason := c.waitReason
		if reason == "" {
			reason = lifecycle.ReasonContainerCreating
		}
		s.State.Waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: c.waitMessage}
	}
	return s
}

// terminatedState converts a finished attempt.
func terminatedState(r *lifecycle.AttemptResult) *corev1.ContainerStateTerminated {
	t := &corev1.ContainerStateTerminated{
		ExitCode:    r.ExitCode,
		Signal:      r.Signal,
		Reason:      r.Reason,
		Message:     r.Message,
		FinishedAt:  metav1.NewTime(r.FinishedAt),
		ContainerID: r.ContainerID,
	}
	if !r.StartedAt.IsZero() {
		t.StartedAt = metav1.NewTime(r.StartedAt)
	}
	return t
}

// buildStatus computes the pod status the agent wants in the API, starting
// from the pod's current status so fields and conditions owned by others
// are kept.
func buildStatus(pod *corev1.Pod, v podView, now time.Time) *corev1.PodStatus {
	st := pod.Status.DeepCopy()
	phase := podPhase(v)
	if v.disrupted && v.terminal {
		phase = disruptedPhase(v)
	}
	if isTerminalPhase(phase) && v.anyRunning() {
		// As the kubelet's status manager: never report a terminal phase
		// while a container may still run (a sidecar being stopped after
		// an init container failed).
		phase = st.Phase
		if phase == "" || isTerminalPhase(phase) {
			phase = corev1.PodPending
		}
	}
	terminal := isTerminalPhase(phase)
	st.Phase = phase
	st.HostIP = podconfig.NodeIP
	st.HostIPs = []corev1.HostIP{{IP: podconfig.NodeIP}}
	st.PodIP = podconfig.NodeIP
	st.PodIPs = []corev1.PodIP{{IP: podconfig.NodeIP}}
	if !v.startTime.IsZero() && st.StartTime == nil {
		st.StartTime = ptr.To(metav1.NewTime(v.startTime))
	}
	if v.reason != "" {
		st.Reason, st.Message = v.reason, v.message
	}
	st.InitContainerStatuses = nil
	for _, c := range v.inits {
		st.InitContainerStatuses = append(st.InitContainerStatuses, containerStatus(c, terminal))
	}
	st.ContainerStatuses = nil
	for _, c := range v.containers {
		st.ContainerStatuses = append(st.ContainerStatuses, containerStatus(c, terminal))
	}
	st.EphemeralContainerStatuses = nil
	for _, c := range v.ephemerals {
		st.EphemeralContainerStatuses = append(st.EphemeralContainerStatuses, containerStatus(c, terminal))
	}

	limitTerminationMessages(pod, st)

	// Conditions as the kubelet generates them (pkg/kubelet/status/generate.go):
	// sidecars count for readiness; a pod whose main containers started
	// stays initialized while its sidecars restart.
	var notInit, notReady []string
	for _, c := range v.inits {
		if !c.initialized() {
			notInit = append(notInit, c.name)
		}
		if c.kind == lifecycle.KindSidecar && !(c.running && c.ready) {
			notReady = append(notReady, c.name)
		}
	}
	for _, c := range v.containers {
		if !(c.running && c.ready) {
			notReady = append(notReady, c.name)
		}
	}
	setCondition(st, corev1.PodReadyToStartContainers, !terminal, "", "", now)
	switch {
	case phase == corev1.PodSucceeded:
		setCondition(st, corev1.PodInitialized, true, "PodCompleted", "", now)
	case len(notInit) == 0 || v.mainStarted():
		setCondition(st, corev1.PodInitialized, true, "", "", now)
	default:
		setCondition(st, corev1.PodInitialized, false, "ContainersNotInitialized", fmt.Sprintf("containers with incomplete status: [%s]", strings.Join(notInit, " ")), now)
	}
	switch {
	case terminal:
		setCondition(st, corev1.ContainersReady, false, "PodCompleted", "", now)
		setCondition(st, corev1.PodReady, false, "PodCompleted", "", now)
	case len(notReady) == 0:
		setCondition(st, corev1.ContainersReady, true, "", "", now)
		setCondition(st, corev1.PodReady, true, "", "", now)
	default:
		msg := fmt.Sprintf("containers with unready status: [%s]", strings.Join(notReady, " "))
		setCondition(st, corev1.ContainersReady, false, "ContainersNotReady", msg, now)
		setCondition(st, corev1.PodReady, false, "ContainersNotReady", msg, now)
	}
	if v.disrupted {
		setCondition(st, corev1.DisruptionTarget, true, corev1.PodReasonTerminationByKubelet, MessageNodeShutdown, now)
	}
	if i := conditionIndex(st, corev1.PodScheduled); i < 0 {
		setCondition(st, corev1.PodScheduled, true, "", "", now)
	}
	return st
}

// isTerminalPhase reports whether phase is Succeeded or Failed.
func isTerminalPhase(phase corev1.PodPhase) bool {
	return phase == corev1.PodSucceeded || phase == corev1.PodFailed
}

// conditionIndex finds a condition by type.
func conditionIndex(st *corev1.PodStatus, t corev1.PodConditionType) int {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			return i
		}
	}
	return -1
}

// setCondition sets a condition, keeping its transition time when the
// status does not change.
func setCondition(st *corev1.PodStatus, t corev1.PodConditionType, ok bool, reason, message string, now time.Time) {
	status := corev1.ConditionFalse
	if ok {
		status = corev1.ConditionTrue
	}
	c := corev1.PodCondition{Type: t, Status: status, Reason: reason, Message: message, LastTransitionTime: metav1.NewTime(now)}
	if i := conditionIndex(st, t); i >= 0 {
		if st.Conditions[i].Status == status {
			c.LastTransitionTime = st.Conditions[i].LastTransitionTime
			c.LastProbeTime = st.Conditions[i].LastProbeTime
		}
		st.Conditions[i] = c
		return
	}
	st.Conditions = append(st.Conditions, c)
}
