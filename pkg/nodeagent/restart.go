package nodeagent

import corev1 "k8s.io/api/core/v1"

// shouldRestart reports whether a container of the given kind that exited
// with exitCode runs again under the pod's restartPolicy, as the kubelet
// decides: a sidecar always restarts (it is stopped only when the pod
// finishes); a regular init container never restarts after success; a main
// container follows the policy.
func shouldRestart(policy corev1.RestartPolicy, kind containerKind, exitCode int32) bool {
	if kind == kindSidecar {
		return true
	}
	switch policy {
	case corev1.RestartPolicyAlways:
		return kind == kindMain || exitCode != 0
	case corev1.RestartPolicyOnFailure:
		return exitCode != 0
	default:
		return false
	}
}
