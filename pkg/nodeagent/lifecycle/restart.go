package lifecycle

import corev1 "k8s.io/api/core/v1"

// RestartPolicy is everything that decides whether one container runs
// again after it exited: the pod's restartPolicy and, with
// ContainerRestartRules (beta, on by default since Kubernetes 1.35), the
// container's own restartPolicy and restartPolicyRules.
type RestartPolicy struct {
	// Pod is the pod's restartPolicy.
	Pod corev1.RestartPolicy
	// Container is the container's restartPolicy; nil when unset (the
	// pod's then applies).
	Container *corev1.ContainerRestartPolicy
	// Rules are the container's restartPolicyRules, in order.
	Rules []corev1.ContainerRestartRule
}

// RestartPolicyOf returns the restart policy of container c of pod.
func RestartPolicyOf(pod *corev1.Pod, c *corev1.Container) RestartPolicy {
	return RestartPolicy{Pod: pod.Spec.RestartPolicy, Container: c.RestartPolicy, Rules: c.RestartPolicyRules}
}

// ShouldRestart reports whether a container of the given kind that exited
// with exitCode runs again, as the kubelet decides: a sidecar always
// restarts (it is stopped only when the pod finishes); a regular init
// container never restarts after success; otherwise restartsAfter decides.
func ShouldRestart(p RestartPolicy, kind ContainerKind, exitCode int32) bool {
	switch {
	case kind == KindEphemeral:
		return false
	case kind == KindSidecar:
		return true
	case kind == KindInit && exitCode == 0:
		return false
	default:
		return p.restartsAfter(exitCode)
	}
}

// restartsAfter is the kubelet's ContainerShouldRestart: the container's
// restartPolicyRules in order, the first whose exit codes match deciding
// (action Restart restarts it, RestartAllContainers restarts it with the
// rest of its pod: TriggersRestartAll); without a match the container's
// restartPolicy; without one the pod's (Always when unset). Rules count
// only when the container has a restartPolicy, as the API requires.
func (p RestartPolicy) restartsAfter(exitCode int32) bool {
	if p.Container != nil {
		if _, ok := matchingRestartRule(p.Rules, exitCode); ok {
			return true
		}
		switch *p.Container {
		case corev1.ContainerRestartPolicyAlways:
			return true
		case corev1.ContainerRestartPolicyOnFailure:
			return exitCode != 0
		case corev1.ContainerRestartPolicyNever:
			return false
		}
	}
	switch p.Pod {
	case corev1.RestartPolicyOnFailure:
		return exitCode != 0
	case corev1.RestartPolicyNever:
		return false
	default:
		return true
	}
}

// TriggersRestartAll reports whether a container of the given kind that
// exited with exitCode restarts its whole pod in place: its first rule
// matching the exit code has action RestartAllContainers (KEP-5532,
// RestartAllContainersOnContainerExits, beta and on in v1.36). As the
// kubelet, whatever the container's kind (init, sidecar or main; an
// ephemeral container has no rules) and whatever it exited for.
func TriggersRestartAll(p RestartPolicy, kind ContainerKind, exitCode int32) bool {
	if kind == KindEphemeral || p.Container == nil {
		return false
	}
	rule, ok := matchingRestartRule(p.Rules, exitCode)
	return ok && rule.Action == corev1.ContainerRestartRuleActionRestartAllContainers
}

// HasRestartAll reports whether any init or regular container of the pod
// has a rule with action RestartAllContainers: such a pod's status carries
// the AllContainersRestarting condition.
func HasRestartAll(pod *corev1.Pod) bool {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			for _, r := range c.RestartPolicyRules {
				if r.Action == corev1.ContainerRestartRuleActionRestartAllContainers {
					return true
				}
			}
		}
	}
	return false
}

// RestartsAfterKill reports whether a container the agent killed on its own
// (a failed liveness or startup probe, a failed postStart hook) is started
// again whatever its exit code: the kubelet then looks only at the
// container's restartPolicy, else the pod's ("will be restarted" unless it
// is Never). Rules are not evaluated, the container had not exited.
func (p RestartPolicy) RestartsAfterKill(kind ContainerKind) bool {
	switch {
	case kind == KindEphemeral:
		return false
	case kind == KindSidecar:
		return true
	case p.Container != nil:
		return *p.Container != corev1.ContainerRestartPolicyNever
	default:
		return p.Pod != corev1.RestartPolicyNever
	}
}

// matchingRestartRule returns the first rule whose exitCodes match
// exitCode: operator In when the code is among the values, NotIn when it is
// not. A rule with another operator or without exitCodes never matches.
func matchingRestartRule(rules []corev1.ContainerRestartRule, exitCode int32) (corev1.ContainerRestartRule, bool) {
	for _, rule := range rules {
		if rule.ExitCodes == nil {
			continue
		}
		in := false
		for _, v := range rule.ExitCodes.Values {
			in = in || v == exitCode
		}
		switch rule.ExitCodes.Operator {
		case corev1.ContainerRestartRuleOnExitCodesOpIn:
			if in {
				return rule, true
			}
		case corev1.ContainerRestartRuleOnExitCodesOpNotIn:
			if !in {
				return rule, true
			}
		}
	}
	return corev1.ContainerRestartRule{}, false
}
