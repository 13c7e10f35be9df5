package podconfig

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// RecursiveReadOnly decides, as the kubelet does, whether vm is mounted
// read-only with every mount below it: Enabled needs readOnly, no
// propagation and a runtime that supports it (else the container cannot be
// configured: the error says why); IfPossible is Enabled where supported
// and Disabled elsewhere.
func RecursiveReadOnly(vm corev1.VolumeMount, supported bool) (bool, error) {
	if vm.RecursiveReadOnly == nil || *vm.RecursiveReadOnly == corev1.RecursiveReadOnlyDisabled {
		return false, nil
	}
	if !vm.ReadOnly {
		return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not read-only", vm.Name)
	}
	if p := vm.MountPropagation; p != nil && *p != corev1.MountPropagationNone {
		return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not compatible with propagation %q", vm.Name, *p)
	}
	switch mode := *vm.RecursiveReadOnly; mode {
	case corev1.RecursiveReadOnlyIfPossible:
		return supported, nil
	case corev1.RecursiveReadOnlyEnabled:
		if !supported {
			return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not supported by the runtime", vm.Name)
		}
		return true, nil
	default:
		return false, fmt.Errorf("unknown recursive read-only mode %q", mode)
	}
}

// VolumeMountStatuses are a container's volume mounts as the kubelet
// reports them in its status (RecursiveReadOnlyMounts, GA): each mount's
// name, path and readOnly, and for a read-only one whether it is
// recursively read-only (Enabled) or not (Disabled), as decided by
// RecursiveReadOnly with the runtime's support (supported).
func VolumeMountStatuses(mounts []corev1.VolumeMount, supported bool) []corev1.VolumeMountStatus {
	var out []corev1.VolumeMountStatus
	for _, vm := range mounts {
		st := corev1.VolumeMountStatus{Name: vm.Name, MountPath: vm.MountPath, ReadOnly: vm.ReadOnly}
		if vm.ReadOnly {
			mode := corev1.RecursiveReadOnlyDisabled
			if rro, err := RecursiveReadOnly(vm, supported); err == nil && rro {
				mode = corev1.RecursiveReadOnlyEnabled
			}
			st.RecursiveReadOnly = &mode
		}
		out = append(out, st)
	}
	return out
}
