package nodeagent

import (
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// seccompDir is where Localhost seccomp profiles are read from, under the
// data directory, as the kubelet reads them under <root-dir>/seccomp.
const seccompDir = "seccomp"

// seccompChoice is the seccomp profile type that applies to container c of
// pod: the container's securityContext's, else the pod's, else
// RuntimeDefault when the node defaults to it (--seccomp-default), else
// Unconfined; with the Localhost profile's name. It decides only.
func seccompChoice(pod *corev1.Pod, c *corev1.Container, seccompDefault bool) (corev1.SeccompProfileType, string) {
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

// seccompProfile resolves the seccomp profile of container c for the
// runtime: nil for Unconfined (and for a privileged container, which runs
// unconfined), the runtime's default, or a Localhost profile's content,
// read from <data-dir>/seccomp. A Localhost profile that cannot be read
// is a createError naming its file.
func (a *Agent) seccompProfile(pod *corev1.Pod, c *corev1.Container) (*runtime.Seccomp, error) {
	if sc := c.SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged {
		return nil, nil
	}
	typ, name := seccompChoice(pod, c, a.opts.SeccompDefault)
	switch typ {
	case corev1.SeccompProfileTypeRuntimeDefault:
		return &runtime.Seccomp{RuntimeDefault: true}, nil
	case corev1.SeccompProfileTypeLocalhost:
		dir := filepath.Join(a.opts.DataDir, seccompDir)
		p := filepath.Join(dir, filepath.Clean("/"+name))
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, &createError{msg: fmt.Sprintf("cannot load seccomp profile %q: %v", p, err)}
		}
		return &runtime.Seccomp{Profile: b, Name: p}, nil
	}
	return nil, nil
}
