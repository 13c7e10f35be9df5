package lifecycle

// Event reasons and waiting reasons of lifecycle hooks, as the kubelet's
// (pkg/kubelet/events, pkg/kubelet/kuberuntime).
const (
	// ReasonFailedPostStartHook is the reason of the Warning event of a
	// failed postStart hook, and the message of the Killing event that
	// follows.
	ReasonFailedPostStartHook = "FailedPostStartHook"
	// ReasonFailedPreStopHook is the reason of the Warning event of a
	// failed preStop hook.
	ReasonFailedPreStopHook = "FailedPreStopHook"
	// ReasonPostStartHookError is the waiting reason of a container whose
	// postStart hook failed, until it starts again.
	ReasonPostStartHookError = "PostStartHookError"
	// ReasonLifecycleHTTPFallback is the reason of the Warning event of an
	// HTTPS hook answered in plain HTTP and retried with HTTP.
	ReasonLifecycleHTTPFallback = "LifecycleHTTPFallback"
	// ReasonHookNotSupported is the reason of the Warning event recorded
	// when a container's hook cannot run here (an exec hook on a runtime
	// that cannot run commands in containers): the hook is then treated as
	// absent.
	ReasonHookNotSupported = "LifecycleHookNotSupported"
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

// Reasons and messages of RestartAllContainers (a container restartPolicyRules
// action, RestartAllContainersOnContainerExits, beta and on in v1.36), as
// the kubelet's.
const (
	// ReasonRestartingAllContainers is the waiting reason, and the reason
	// of the last termination, of a container its pod restarted in place.
	ReasonRestartingAllContainers = "RestartingAllContainers"
	// MessageRestartingAllContainers goes with it.
	MessageRestartingAllContainers = "The container is removed because RestartAllContainers in place"
	// ExitCodeRestartingAllContainers is the exit code the last
	// termination of such a container reports, whatever it was.
	ExitCodeRestartingAllContainers = 137
	// MessageKillingRestartAll is the message of the Killing event of a
	// container stopped because its pod restarts in place.
	MessageKillingRestartAll = "killing"
	// ReasonRestartAllContainersStarted and MessageRestartAllContainersStarted
	// are the pod's AllContainersRestarting condition's while it restarts.
	ReasonRestartAllContainersStarted  = "RestartAllContainersStarted"
	MessageRestartAllContainersStarted = "container exited with restart policy rule"
)
