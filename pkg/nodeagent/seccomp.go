package nodeagent

import (
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/podconfig"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// seccompDir is where Localhost seccomp profiles are read from, under the
// data directory, as the kubelet reads them under <root-dir>/seccomp.
const seccompDir = "seccomp"

// seccompProfile resolves the seccomp profile of container c for the
// runtime: nil for Unconfined (and for a privileged container, which runs
// unconfined), the runtime's default, or a Localhost profile's content,
// read from <data-dir>/seccomp. A Localhost profile that cannot be read
// is a podconfig.CreateError naming its file.
func (a *Agent) seccompProfile(pod *corev1.Pod, c *corev1.Container) (*runtime.Seccomp, error) {
	if sc := c.SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged {
		return nil, nil
	}
	typ, name := podconfig.SeccompChoice(pod, c, a.opts.SeccompDefault)
	switch typ {
	case corev1.SeccompProfileTypeRuntimeDefault:
		return &runtime.Seccomp{RuntimeDefault: true}, nil
	case corev1.SeccompProfileTypeLocalhost:
		dir := filepath.Join(a.opts.DataDir, seccompDir)
		p := filepath.Join(dir, filepath.Clean("/"+name))
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, &podconfig.CreateError{Msg: fmt.Sprintf("cannot load seccomp profile %q: %v", p, err)}
		}
		return &runtime.Seccomp{Profile: b, Name: p}, nil
	}
	return nil, nil
}
