package builder

import corev1 "k8s.io/api/core/v1"

// ContainerRestartPolicy sets the first container's own restartPolicy
// (ContainerRestartRules), which overrides the pod's.
func (w *PodWrapper) ContainerRestartPolicy(p corev1.ContainerRestartPolicy) *PodWrapper {
	w.Pod.Spec.Containers[0].RestartPolicy = &p
	return w
}

// ContainerRestartRule appends a restartPolicyRules entry to the first
// container: action when its exit code is (In) or is not (NotIn) among
// values. The container needs a restartPolicy of its own for rules to count.
func (w *PodWrapper) ContainerRestartRule(action corev1.ContainerRestartRuleAction, op corev1.ContainerRestartRuleOnExitCodesOperator, values ...int32) *PodWrapper {
	c := &w.Pod.Spec.Containers[0]
	c.RestartPolicyRules = append(c.RestartPolicyRules, corev1.ContainerRestartRule{
		Action:    action,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: op, Values: values},
	})
	return w
}
