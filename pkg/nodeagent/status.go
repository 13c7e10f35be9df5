package nodeagent

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// Reasons and messages the agent writes into pod status.
const (
	// ReasonDeadlineExceeded is the pod reason when activeDeadlineSeconds passed.
	ReasonDeadlineExceeded = "DeadlineExceeded"
	// MessageDeadlineExceeded is the pod message when activeDeadlineSeconds passed.
	MessageDeadlineExceeded = "Pod was active on the node longer than the specified deadline"
	// ReasonCrashLoopBackOff is the waiting reason of a container in restart back-off.
	ReasonCrashLoopBackOff = "CrashLoopBackOff"
	// ReasonContainerCreating is the waiting reason of a container not started yet.
	ReasonContainerCreating = "ContainerCreating"
	// ReasonPodInitializing is the waiting reason of a container waiting for init containers.
	ReasonPodInitializing = "PodInitializing"
	// ReasonCreateContainerConfigError is the waiting reason when env cannot be resolved.
	ReasonCreateContainerConfigError = "CreateContainerConfigError"
	// ReasonContainerStatusUnknown is the terminated reason of a container
	// whose process was lost because the agent stopped.
	ReasonContainerStatusUnknown = "ContainerStatusUnknown"
)

// nodeIP is the only address of the local node; pods share it.
const nodeIP = "127.0.0.1"

// containerView is what the status needs to know about one container.
type containerView struct {
	// name is the container's name.
	name string
	// image is the container's image, reported unchanged.
	image string
	// running is true while an attempt runs.
	running bool
	// startedAt is when the running attempt started.
	startedAt time.Time
	// containerID identifies the running or last attempt.
	containerID string
	// restartCount counts restarts.
	restartCount int32
	// last is the last finished attempt, nil if none.
	last *runtime.Result
	// prev is the attempt before last, nil if none.
	prev *runtime.Result
	// final is true when the container will not run again.
	final bool
	// waitReason and waitMessage describe why a container is not running.
	waitReason, waitMessage string
}

// podView is what the status needs to know about the pod.
type podView struct {
	// inits are the init containers, in spec order.
	inits []containerView
	// containers are the regular containers, in spec order.
	containers []containerView
	// startTime is when the agent accepted the pod.
	startTime time.Time
	// terminal is true once the pod was stopped for good (deletion, deadline).
	terminal bool
	// reason and message explain a terminal pod.
	reason, message string
}

// exitCode returns the last exit code of a container and whether it ran.
func (c containerView) exitCode() (int32, bool) {
	if c.last == nil {
		return 0, false
	}
	return c.last.ExitCode, true
}

// initSucceeded reports whether an init container is done successfully.
func (c containerView) initSucceeded() bool {
	code, ran := c.exitCode()
	return !c.running && ran && code == 0 && c.final
}

// podPhase derives the phase from the containers, like the kubelet:
// an init container that failed for good fails the pod; unfinished init
// containers or a container never started keep it Pending; any running
// container makes it Running; when all containers stopped, it is Succeeded
// or Failed once none of them will restart (or the pod was stopped).
func podPhase(v podView) corev1.PodPhase {
	for _, c := range v.inits {
		if code, ran := c.exitCode(); ran && code != 0 && c.final && !c.running {
			return corev1.PodFailed
		}
	}
	for _, c := range v.inits {
		if !c.initSucceeded() {
			if v.terminal {
				return corev1.PodFailed
			}
			return corev1.PodPending
		}
	}
	running, waiting, stopped, final, succeeded := 0, 0, 0, 0, 0
	for _, c := range v.containers {
		code, ran := c.exitCode()
		switch {
		case c.running:
			running++
		case ran:
			stopped++
			if c.final {
				final++
			}
			if code == 0 {
				succeeded++
			}
		default:
			waiting++
		}
	}
	switch {
	case v.terminal && running == 0:
		if waiting == 0 && stopped == succeeded {
			return corev1.PodSucceeded
		}
		return corev1.PodFailed
	case waiting > 0:
		return corev1.PodPending
	case running > 0:
		return corev1.PodRunning
	case stopped != final:
		return corev1.PodRunning
	case stopped == succeeded:
		return corev1.PodSucceeded
	default:
		return corev1.PodFailed
	}
}

// containerStatus builds the API status of one container.
func containerStatus(c containerView, terminal bool) corev1.ContainerStatus {
	s := corev1.ContainerStatus{
		Name:         c.name,
		Image:        c.image,
		ImageID:      "",
		ContainerID:  c.containerID,
		RestartCount: c.restartCount,
		Ready:        c.running && !terminal,
		Started:      ptr.To(c.running),
	}
	switch {
	case c.running:
		s.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(c.startedAt)}
		if c.last != nil {
			s.LastTerminationState.Terminated = terminatedState(c.last, c.containerID)
		}
	case c.last != nil && (c.final || terminal):
		s.State.Terminated = terminatedState(c.last, c.containerID)
		if c.prev != nil {
			s.LastTerminationState.Terminated = terminatedState(c.prev, "")
		}
	case c.last != nil:
		reason := c.waitReason
		if reason == "" {
			reason = ReasonCrashLoopBackOff
		}
		s.State.Waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: c.waitMessage}
		s.LastTerminationState.Terminated = terminatedState(c.last, c.containerID)
	default:
		reason := c.waitReason
		if reason == "" {
			reason = ReasonContainerCreating
		}
		s.State.Waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: c.waitMessage}
	}
	return s
}

// terminatedState converts a runtime result.
func terminatedState(r *runtime.Result, id string) *corev1.ContainerStateTerminated {
	t := &corev1.ContainerStateTerminated{
		ExitCode:    r.ExitCode,
		Signal:      r.Signal,
		Reason:      r.Reason,
		Message:     r.Message,
		FinishedAt:  metav1.NewTime(r.FinishedAt),
		ContainerID: id,
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
	terminal := phase == corev1.PodSucceeded || phase == corev1.PodFailed
	st.Phase = phase
	st.HostIP = nodeIP
	st.HostIPs = []corev1.HostIP{{IP: nodeIP}}
	st.PodIP = nodeIP
	st.PodIPs = []corev1.PodIP{{IP: nodeIP}}
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

	var notInit, notReady []string
	for _, c := range v.inits {
		if !c.initSucceeded() {
			notInit = append(notInit, c.name)
		}
	}
	for _, c := range v.containers {
		if !c.running {
			notReady = append(notReady, c.name)
		}
	}
	setCondition(st, corev1.PodReadyToStartContainers, !terminal, "", "", now)
	if len(notInit) == 0 {
		setCondition(st, corev1.PodInitialized, true, "", "", now)
	} else {
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
	if i := conditionIndex(st, corev1.PodScheduled); i < 0 {
		setCondition(st, corev1.PodScheduled, true, "", "", now)
	}
	return st
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
