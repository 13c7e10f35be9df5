package status

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/lifecycle"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/podconfig"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// ContainerView is what the status needs to know about one container.
type ContainerView struct {
	// Name is the container's name.
	Name string
	// Image is the container's image: the reference it resolved to in
	// image mode, the spec's otherwise.
	Image string
	// ImageID is the image's digest ("" in host mode).
	ImageID string
	// Kind is the container's kind (init, sidecar, main).
	Kind lifecycle.ContainerKind
	// Running is true while an attempt runs (stopping included).
	Running bool
	// Started is true while the running attempt has passed its startup
	// probe (at once without one).
	Started bool
	// Ready is true while the running attempt is started and has passed
	// its readiness probe (at once without one).
	Ready bool
	// StartedAt is when the running attempt started.
	StartedAt time.Time
	// ContainerID identifies the running or last attempt.
	ContainerID string
	// RestartCount counts restarts.
	RestartCount int32
	// Last is the last finished attempt, nil if none.
	Last *lifecycle.AttemptResult
	// Prev is the attempt before last, nil if none.
	Prev *lifecycle.AttemptResult
	// Final is true when the container will not run again.
	Final bool
	// EverRan is true once an attempt was made.
	EverRan bool
	// WaitReason and waitMessage describe why a container is not running.
	WaitReason, WaitMessage string
	// User is who the running or last attempt runs as, as the runtime
	// reported it (nil: not reported).
	User *runtime.ContainerUser
	// Resources are the container's resources as its running attempt
	// has them (which an in-place resize in progress has not changed
	// yet), else as allocated.
	Resources corev1.ResourceRequirements
	// Allocated are the requests the container is allocated.
	Allocated corev1.ResourceList
}

// PodView is what the status needs to know about the pod.
type PodView struct {
	// Inits are the init containers (regular and sidecars), in spec order.
	Inits []ContainerView
	// Containers are the main containers, in spec order.
	Containers []ContainerView
	// Ephemerals are the ephemeral containers, in spec order; they count
	// for neither the phase nor the conditions.
	Ephemerals []ContainerView
	// StartTime is when the agent accepted the pod.
	StartTime time.Time
	// OwnNetwork is true for a pod with a network namespace of its own,
	// whose address is PodIP once it has one (empty before); a pod
	// without one has the node's.
	OwnNetwork bool
	PodIP      string
	// NodeIP is the node's address: the pod's hostIP, and its podIP when
	// it shares the node's network. Empty: podconfig.NodeIP.
	NodeIP string
	// Terminal is true once the pod was stopped for good (deletion, deadline).
	Terminal bool
	// Reason and message explain a terminal pod.
	Reason, Message string
	// Disrupted is set when the pod is stopped by a node shutdown or an
	// eviction; Reason and Message then say which.
	Disrupted bool
	// RestartingAll is set while the pod restarts its containers in place
	// (RestartAllContainers), until none of them runs any more.
	RestartingAll bool
	// RecursiveReadOnly says the runtime supports recursively read-only
	// mounts, for the containers' volumeMounts statuses.
	RecursiveReadOnly bool
	// ResizeConditions are the PodResizePending and PodResizeInProgress
	// conditions the pod has now (none when no resize waits or runs).
	ResizeConditions []corev1.PodCondition
	// PodResources and PodAllocated are the pod-level resources as the
	// pod's cgroup has them and the pod-level requests allocated; nil
	// when the pod has no pod-level resources.
	PodResources *corev1.ResourceRequirements
	PodAllocated corev1.ResourceList
}

// exitCode returns the last exit code of a container and whether it ran.
func (c ContainerView) exitCode() (int32, bool) {
	if c.Last == nil {
		return 0, false
	}
	return c.Last.ExitCode, true
}

// InitSucceeded reports whether a regular init container is done successfully.
func (c ContainerView) InitSucceeded() bool {
	code, ran := c.exitCode()
	return !c.Running && ran && code == 0 && c.Final
}

// initialized reports whether an init container counts as initialized, as
// the kubelet's Initialized condition counts it: a sidecar while it runs
// and has started, a regular init container once it succeeded.
func (c ContainerView) initialized() bool {
	if c.Kind == lifecycle.KindSidecar {
		return c.Running && c.Started
	}
	return c.InitSucceeded()
}

// anyRunning reports whether an attempt of the pod still runs.
func (v PodView) anyRunning() bool {
	for _, c := range v.Inits {
		if c.Running {
			return true
		}
	}
	for _, c := range v.Containers {
		if c.Running {
			return true
		}
	}
	for _, c := range v.Ephemerals {
		if c.Running {
			return true
		}
	}
	return false
}

// mainStarted reports whether a main container ever ran: the pod was
// initialized (the kubelet's HasAnyActiveRegularContainerStarted).
func (v PodView) mainStarted() bool {
	for _, c := range v.Containers {
		if c.Running || c.EverRan {
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
func podPhase(v PodView) corev1.PodPhase {
	pendingInit, pendingSidecar, sidecarsWaiting, failedInit := 0, 0, 0, 0
	running, waiting, stopped, stoppedFinal, succeeded := 0, 0, 0, 0, 0
	for _, c := range v.Inits {
		code, ran := c.exitCode()
		if c.Kind == lifecycle.KindSidecar {
			switch {
			case c.Running:
				running++
				if !c.Started {
					pendingSidecar++
				}
			case !ran:
				pendingSidecar++
				sidecarsWaiting++
			}
			continue
		}
		switch {
		case c.Running || !ran:
			pendingInit++
		case code != 0 && c.Final:
			failedInit++
		}
	}
	for _, c := range v.Containers {
		code, ran := c.exitCode()
		switch {
		case c.Running:
			running++
		case ran:
			stopped++
			if c.Final {
				stoppedFinal++
			}
			if code == 0 && (c.Final || v.Terminal) {
				succeeded++
			}
		default:
			waiting++
		}
	}
	if v.Terminal && running == 0 {
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
func containerStatus(c ContainerView, terminal bool) corev1.ContainerStatus {
	s := corev1.ContainerStatus{
		Name:         c.Name,
		Image:        c.Image,
		ImageID:      c.ImageID,
		ContainerID:  c.ContainerID,
		RestartCount: c.RestartCount,
		Ready:        c.Running && c.Ready && !terminal,
		Started:      ptr.To(c.Running && c.Started),
	}
	if u := c.User; u != nil && c.EverRan {
		// As the kubelet reports the runtime's answer: for the attempt
		// that runs, or else the last one.
		s.User = &corev1.ContainerUser{Linux: &corev1.LinuxContainerUser{
			UID: u.UID, GID: u.GID, SupplementalGroups: slices.Clone(u.SupplementalGroups)}}
	}
	if c.EverRan {
		// As the kubelet (InPlacePodVerticalScaling, GA) for a container
		// the runtime knows: what it got, and what it was allocated,
		// which differ while an in-place resize is in progress.
		s.Resources = c.Resources.DeepCopy()
		s.AllocatedResources = c.Allocated.DeepCopy()
	}
	switch {
	case c.Running:
		s.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(c.StartedAt)}
		if c.Last != nil {
			s.LastTerminationState.Terminated = terminatedState(c.Last)
		}
	case c.Last != nil && (c.Final || terminal):
		s.State.Terminated = terminatedState(c.Last)
		if c.Prev != nil {
			s.LastTerminationState.Terminated = terminatedState(c.Prev)
		}
	case c.Last != nil:
		reason := c.WaitReason
		if reason == "" {
			reason = lifecycle.ReasonCrashLoopBackOff
		}
		s.State.Waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: c.WaitMessage}
		s.LastTerminationState.Terminated = terminatedState(c.Last)
	default:
		reason := c.WaitReason
		if reason == "" {
			reason = lifecycle.ReasonContainerCreating
		}
		s.State.Waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: c.WaitMessage}
	}
	if c.Kind == lifecycle.KindInit && s.State.Terminated != nil && s.State.Terminated.ExitCode == 0 {
		// As the kubelet's prober manager: a regular init container that
		// completed is ready.
		s.Ready = true
	}
	return s
}

// setVolumeMounts fills every container status's volumeMounts from the
// pod's spec, as the kubelet does.
func setVolumeMounts(pod *corev1.Pod, st *corev1.PodStatus, rro bool) {
	mounts := map[string][]corev1.VolumeMount{}
	for _, c := range pod.Spec.InitContainers {
		mounts["i/"+c.Name] = c.VolumeMounts
	}
	for _, c := range pod.Spec.Containers {
		mounts["c/"+c.Name] = c.VolumeMounts
	}
	for _, c := range pod.Spec.EphemeralContainers {
		mounts["e/"+c.Name] = c.VolumeMounts
	}
	for prefix, list := range map[string][]corev1.ContainerStatus{"i/": st.InitContainerStatuses, "c/": st.ContainerStatuses, "e/": st.EphemeralContainerStatuses} {
		for i := range list {
			list[i].VolumeMounts = podconfig.VolumeMountStatuses(mounts[prefix+list[i].Name], rro)
		}
	}
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

// BuildStatus computes the pod status the agent wants in the API, starting
// from the pod's current status so fields and conditions owned by others
// are kept.
func BuildStatus(pod *corev1.Pod, v PodView, now time.Time) *corev1.PodStatus {
	st := pod.Status.DeepCopy()
	phase := podPhase(v)
	switch {
	case v.Disrupted && v.Terminal:
		phase = DisruptedPhase(v)
	case v.Terminal && v.Reason == lifecycle.ReasonDeadlineExceeded:
		// As the kubelet's active deadline handler: the pod failed, however
		// its containers ended (a shell trapping SIGTERM exits 0).
		phase = corev1.PodFailed
	}
	if IsTerminalPhase(phase) && v.anyRunning() {
		// As the kubelet's status manager: never report a terminal phase
		// while a container may still run (a sidecar being stopped after
		// an init container failed).
		phase = st.Phase
		if phase == "" || IsTerminalPhase(phase) {
			phase = corev1.PodPending
		}
	}
	terminal := IsTerminalPhase(phase)
	st.Phase = phase
	nodeIP := cmp.Or(v.NodeIP, podconfig.NodeIP)
	st.HostIP = nodeIP
	st.HostIPs = []corev1.HostIP{{IP: nodeIP}}
	ip := nodeIP
	if v.OwnNetwork {
		ip = v.PodIP
	}
	if ip != "" {
		st.PodIP = ip
		st.PodIPs = []corev1.PodIP{{IP: ip}}
	}
	if !v.StartTime.IsZero() && st.StartTime == nil {
		st.StartTime = ptr.To(metav1.NewTime(v.StartTime))
	}
	if v.Reason != "" {
		st.Reason, st.Message = v.Reason, v.Message
	}
	st.InitContainerStatuses = nil
	for _, c := range v.Inits {
		st.InitContainerStatuses = append(st.InitContainerStatuses, containerStatus(c, terminal))
	}
	st.ContainerStatuses = nil
	for _, c := range v.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, containerStatus(c, terminal))
	}
	st.EphemeralContainerStatuses = nil
	for _, c := range v.Ephemerals {
		st.EphemeralContainerStatuses = append(st.EphemeralContainerStatuses, containerStatus(c, terminal))
	}
	setVolumeMounts(pod, st, v.RecursiveReadOnly)

	limitTerminationMessages(pod, st)

	// Conditions as the kubelet generates them (pkg/kubelet/status/generate.go):
	// sidecars count for readiness; a pod whose main containers started
	// stays initialized while its sidecars restart.
	var notInit, notReady []string
	for _, c := range v.Inits {
		if !c.initialized() {
			notInit = append(notInit, c.Name)
		}
		if c.Kind == lifecycle.KindSidecar && !(c.Running && c.Ready) {
			notReady = append(notReady, c.Name)
		}
	}
	for _, c := range v.Containers {
		if !(c.Running && c.Ready) {
			notReady = append(notReady, c.Name)
		}
	}
	// Every condition the kubelet writes says which generation of the pod
	// it describes (PodObservedGenerationTracking, GA in v1.35), as the
	// status itself does (Manager.Set).
	set := func(t corev1.PodConditionType, ok bool, reason, message string) {
		setCondition(st, t, ok, reason, message, now)
		st.Conditions[conditionIndex(st, t)].ObservedGeneration = pod.Generation
	}
	set(corev1.PodReadyToStartContainers, !terminal, "", "")
	switch {
	case phase == corev1.PodSucceeded:
		set(corev1.PodInitialized, true, "PodCompleted", "")
	case len(notInit) == 0 || v.mainStarted():
		set(corev1.PodInitialized, true, "", "")
	default:
		set(corev1.PodInitialized, false, "ContainersNotInitialized", fmt.Sprintf("containers with incomplete status: [%s]", strings.Join(notInit, " ")))
	}
	switch {
	case terminal:
		set(corev1.ContainersReady, false, "PodCompleted", "")
		set(corev1.PodReady, false, "PodCompleted", "")
	case len(notReady) == 0:
		set(corev1.ContainersReady, true, "", "")
		set(corev1.PodReady, true, "", "")
	default:
		msg := fmt.Sprintf("containers with unready status: [%s]", strings.Join(notReady, " "))
		set(corev1.ContainersReady, false, "ContainersNotReady", msg)
		set(corev1.PodReady, false, "ContainersNotReady", msg)
	}
	if v.Disrupted {
		// A node shutdown's or an eviction's message, as the kubelet's.
		set(corev1.DisruptionTarget, true, corev1.PodReasonTerminationByKubelet, v.Message)
	}
	// The resize conditions are the agent's alone: those it has now
	// replace whatever the status had.
	kept := st.Conditions[:0]
	for _, c := range st.Conditions {
		if c.Type != corev1.PodResizePending && c.Type != corev1.PodResizeInProgress {
			kept = append(kept, c)
		}
	}
	st.Conditions = append(kept, v.ResizeConditions...)
	st.Resources, st.AllocatedResources = nil, nil
	if v.PodResources != nil {
		st.Resources, st.AllocatedResources = v.PodResources.DeepCopy(), v.PodAllocated.DeepCopy()
	}
	if i := conditionIndex(st, corev1.PodScheduled); i < 0 {
		set(corev1.PodScheduled, true, "", "")
	} else {
		// The kubelet regenerates it with every status, as it does the
		// conditions above.
		st.Conditions[i].ObservedGeneration = pod.Generation
	}
	if lifecycle.HasRestartAll(pod) {
		// As the kubelet's, on every pod that may restart in place, with
		// no observedGeneration.
		switch {
		case phase == corev1.PodSucceeded:
			setCondition(st, corev1.AllContainersRestarting, false, "PodCompleted", "", now)
		case phase == corev1.PodFailed:
			setCondition(st, corev1.AllContainersRestarting, false, "PodFailed", "", now)
		case v.RestartingAll:
			setCondition(st, corev1.AllContainersRestarting, true, lifecycle.ReasonRestartAllContainersStarted, lifecycle.MessageRestartAllContainersStarted, now)
		default:
			setCondition(st, corev1.AllContainersRestarting, false, "", "", now)
		}
	}
	return st
}

// IsTerminalPhase reports whether phase is Succeeded or Failed.
func IsTerminalPhase(phase corev1.PodPhase) bool {
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

// Reason and message of a pod stopped because its node shuts down, as the
// kubelet's node shutdown manager writes them (pkg/kubelet/nodeshutdown):
// the pod's status reason and message, and the DisruptionTarget
// condition's message (its reason is corev1.PodReasonTerminationByKubelet).
const (
	// ReasonNodeShutdown is the pod's status reason.
	ReasonNodeShutdown = "Terminated"
	// MessageNodeShutdown is the pod's status message and the condition's.
	MessageNodeShutdown = "Pod was terminated in response to imminent node shutdown."
)

// DisruptedPhase is the phase of a pod stopped by a node shutdown once
// nothing runs, as the kubelet's status function sets it: Failed, unless
// the pod had already succeeded on its own.
func DisruptedPhase(v PodView) corev1.PodPhase {
	v.Terminal = false
	if podPhase(v) == corev1.PodSucceeded {
		return corev1.PodSucceeded
	}
	return corev1.PodFailed
}
