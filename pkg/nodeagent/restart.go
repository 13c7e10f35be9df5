package nodeagent

import corev1 "k8s.io/api/core/v1"

// shouldRestart reports whether a container that exited with exitCode runs
// again under the pod's restartPolicy. Init containers never restart after
// success.
func shouldRestart(policy corev1.RestartPolicy, isInit bool, exitCode int32) bool {
	switch policy {
	case corev1.RestartPolicyAlways:
		return !isInit || exitCode != 0
	case corev1.RestartPolicyOnFailure:
		return exitCode != 0
	default:
		return false
	}
}
