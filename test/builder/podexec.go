package builder

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Command sets the command of the pod's first container.
func (w *PodWrapper) Command(cmd ...string) *PodWrapper {
	w.Pod.Spec.Containers[0].Command = cmd
	return w
}

// RestartPolicy sets spec.restartPolicy.
func (w *PodWrapper) RestartPolicy(p corev1.RestartPolicy) *PodWrapper {
	w.Pod.Spec.RestartPolicy = p
	return w
}

// ActiveDeadlineSeconds sets spec.activeDeadlineSeconds.
func (w *PodWrapper) ActiveDeadlineSeconds(s int64) *PodWrapper {
	w.Pod.Spec.ActiveDeadlineSeconds = &s
	return w
}

// TerminationGracePeriodSeconds sets spec.terminationGracePeriodSeconds.
func (w *PodWrapper) TerminationGracePeriodSeconds(s int64) *PodWrapper {
	w.Pod.Spec.TerminationGracePeriodSeconds = &s
	return w
}

// Env adds a plain variable to the first container.
func (w *PodWrapper) Env(name, value string) *PodWrapper {
	c := &w.Pod.Spec.Containers[0]
	c.Env = append(c.Env, corev1.EnvVar{Name: name, Value: value})
	return w
}

// EnvFieldRef adds a downward-API variable to the first container.
func (w *PodWrapper) EnvFieldRef(name, fieldPath string) *PodWrapper {
	c := &w.Pod.Spec.Containers[0]
	c.Env = append(c.Env, corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: fieldPath}}})
	return w
}

// RequestCPU sets the CPU request of the first container ("500m", "2").
func (w *PodWrapper) RequestCPU(q string) *PodWrapper {
	c := &w.Pod.Spec.Containers[0]
	if c.Resources.Requests == nil {
		c.Resources.Requests = corev1.ResourceList{}
	}
	c.Resources.Requests[corev1.ResourceCPU] = resource.MustParse(q)
	return w
}

// InitContainer appends an init container running cmd.
func (w *PodWrapper) InitContainer(name string, cmd ...string) *PodWrapper {
	w.Pod.Spec.InitContainers = append(w.Pod.Spec.InitContainers, corev1.Container{Name: name, Image: "busybox", Command: cmd})
	return w
}
