package builder

import corev1 "k8s.io/api/core/v1"

// sidecar is an init container with restartPolicy Always running cmd.
func sidecar(name string, cmd []string) corev1.Container {
	always := corev1.ContainerRestartPolicyAlways
	return corev1.Container{Name: name, Image: "busybox", Command: cmd, RestartPolicy: &always}
}

// Sidecar appends a native sidecar (an init container with restartPolicy
// Always, image "busybox") running cmd to the pod template.
func (w *JobWrapper) Sidecar(name string, cmd ...string) *JobWrapper {
	spec := &w.Job.Spec.Template.Spec
	spec.InitContainers = append(spec.InitContainers, sidecar(name, cmd))
	return w
}

// Sidecar appends a native sidecar (an init container with restartPolicy
// Always, image "busybox") running cmd.
func (w *PodWrapper) Sidecar(name string, cmd ...string) *PodWrapper {
	w.Pod.Spec.InitContainers = append(w.Pod.Spec.InitContainers, sidecar(name, cmd))
	return w
}

// Args sets the args of the pod's first container and clears its command,
// as `kubectl run x --image=busybox -- sleep 1` does.
func (w *PodWrapper) Args(args ...string) *PodWrapper {
	w.Pod.Spec.Containers[0].Command = nil
	w.Pod.Spec.Containers[0].Args = args
	return w
}
