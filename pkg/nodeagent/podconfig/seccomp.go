package podconfig

import (
	corev1 "k8s.io/api/core/v1"
)

// SeccompChoice is the seccomp profile type that applies to container c of
// pod: the container's securityContext's, else the pod's, else
// RuntimeDefault when the node defaults to it (--seccomp-default), else
// Unconfined; with the Localhost profile's name. It decides only.
func SeccompChoice(pod *corev1.Pod, c *corev1.Container, seccompDefault bool) (corev1.SeccompProfileType, string) {
	var p *corev1.SeccompProfile
	if sc := c.SecurityContext; sc != nil && sc.SeccompProfile != nil {
		p = sc.SeccompProfile
	} else if psc := pod.Spec.SecurityContext; psc != nil && psc.SeccompProfile != nil {
		p = psc.SeccompProfile
	}
	switch {
	case p == nil && seccompDefault:
		return corev1.SeccompProfileTypeRuntimeDefault, ""
	case p == nil:
		return corev1.SeccompProfileTypeUnconfined, ""
	case p.Type == corev1.SeccompProfileTypeLocalhost && p.LocalhostProfile != nil:
		return p.Type, *p.LocalhostProfile
	}
	return p.Type, ""
}
