package builder

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// PodFailurePolicy sets spec.podFailurePolicy to the given rules, in order.
func (w *JobWrapper) PodFailurePolicy(rules ...batchv1.PodFailurePolicyRule) *JobWrapper {
	w.Job.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: rules}
	return w
}

// ExitCodeRule returns a podFailurePolicy rule with onExitCodes: action
// when a container (named container, or any if container is "") exits
// with a code that op (In or NotIn) accepts against codes.
func ExitCodeRule(action batchv1.PodFailurePolicyAction, container string, op batchv1.PodFailurePolicyOnExitCodesOperator, codes ...int32) batchv1.PodFailurePolicyRule {
	req := &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: op, Values: codes}
	if container != "" {
		req.ContainerName = &container
	}
	return batchv1.PodFailurePolicyRule{Action: action, OnExitCodes: req}
}

// PodConditionRule returns a podFailurePolicy rule with onPodConditions:
// action when the pod has condition condType with status True (the
// apiserver's default status).
func PodConditionRule(action batchv1.PodFailurePolicyAction, condType corev1.PodConditionType) batchv1.PodFailurePolicyRule {
	return batchv1.PodFailurePolicyRule{
		Action:          action,
		OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: condType, Status: corev1.ConditionTrue}},
	}
}

// ContainerExited appends a status for container name terminated with
// exitCode (reason Error, or Completed for 0). It does not change the phase.
func (w *PodWrapper) ContainerExited(name string, exitCode int32) *PodWrapper {
	w.Pod.Status.ContainerStatuses = append(w.Pod.Status.ContainerStatuses, terminatedStatus(name, exitCode))
	return w
}

// InitContainerExited appends an init container status for name
// terminated with exitCode. It does not change the phase.
func (w *PodWrapper) InitContainerExited(name string, exitCode int32) *PodWrapper {
	w.Pod.Status.InitContainerStatuses = append(w.Pod.Status.InitContainerStatuses, terminatedStatus(name, exitCode))
	return w
}

// ContainerRunning appends a status for container name in state Running.
func (w *PodWrapper) ContainerRunning(name string) *PodWrapper {
	w.Pod.Status.ContainerStatuses = append(w.Pod.Status.ContainerStatuses, corev1.ContainerStatus{
		Name: name, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
	})
	return w
}

// Condition appends a pod condition of type t with the given status.
func (w *PodWrapper) Condition(t corev1.PodConditionType, status corev1.ConditionStatus) *PodWrapper {
	w.Pod.Status.Conditions = append(w.Pod.Status.Conditions, corev1.PodCondition{Type: t, Status: status})
	return w
}

// terminatedStatus is a container status terminated with exitCode.
func terminatedStatus(name string, exitCode int32) corev1.ContainerStatus {
	reason := "Completed"
	if exitCode != 0 {
		reason = "Error"
	}
	return corev1.ContainerStatus{
		Name:  name,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exitCode, Reason: reason}},
	}
}

// Container appends a container running image "busybox" with cmd to the
// pod template.
func (w *JobWrapper) Container(name string, cmd ...string) *JobWrapper {
	spec := &w.Job.Spec.Template.Spec
	spec.Containers = append(spec.Containers, corev1.Container{Name: name, Image: "busybox", Command: cmd})
	return w
}
