package podconfig

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestRecursiveReadOnly(t *testing.T) {
	mount := func(readOnly bool, mode corev1.RecursiveReadOnlyMode) corev1.VolumeMount {
		vm := corev1.VolumeMount{Name: "v", MountPath: "/v", ReadOnly: readOnly}
		if mode != "" {
			vm.RecursiveReadOnly = &mode
		}
		return vm
	}
	for _, tc := range []struct {
		name      string
		vm        corev1.VolumeMount
		supported bool
		want      bool
		wantErr   string
	}{
		{name: "unset", vm: mount(true, ""), supported: true},
		{name: "disabled", vm: mount(true, corev1.RecursiveReadOnlyDisabled), supported: true},
		{name: "if possible, supported", vm: mount(true, corev1.RecursiveReadOnlyIfPossible), supported: true, want: true},
		{name: "if possible, not supported", vm: mount(true, corev1.RecursiveReadOnlyIfPossible)},
		{name: "enabled", vm: mount(true, corev1.RecursiveReadOnlyEnabled), supported: true, want: true},
		{name: "enabled, not supported", vm: mount(true, corev1.RecursiveReadOnlyEnabled),
			wantErr: `volume "v" requested recursive read-only mode, but it is not supported by the runtime`},
		{name: "enabled, not read-only", vm: mount(false, corev1.RecursiveReadOnlyEnabled), supported: true,
			wantErr: `volume "v" requested recursive read-only mode, but it is not read-only`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := RecursiveReadOnly(tc.vm, tc.supported)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("RecursiveReadOnly = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	withPropagation := mount(true, corev1.RecursiveReadOnlyEnabled)
	withPropagation.MountPropagation = ptr.To(corev1.MountPropagationHostToContainer)
	if _, err := RecursiveReadOnly(withPropagation, true); err == nil {
		t.Error("recursive read-only with propagation accepted, want an error")
	}
}

// TestVolumeMountStatuses: every mount is listed; a read-only one says
// Enabled or Disabled, a writable one nothing, as the kubelet reports them.
func TestVolumeMountStatuses(t *testing.T) {
	mounts := []corev1.VolumeMount{
		{Name: "data", MountPath: "/data"},
		{Name: "token", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true},
		{Name: "cfg", MountPath: "/cfg", ReadOnly: true, RecursiveReadOnly: ptr.To(corev1.RecursiveReadOnlyIfPossible)},
	}
	for _, supported := range []bool{true, false} {
		cfgMode := corev1.RecursiveReadOnlyDisabled
		if supported {
			cfgMode = corev1.RecursiveReadOnlyEnabled
		}
		want := []corev1.VolumeMountStatus{
			{Name: "data", MountPath: "/data"},
			{Name: "token", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true, RecursiveReadOnly: ptr.To(corev1.RecursiveReadOnlyDisabled)},
			{Name: "cfg", MountPath: "/cfg", ReadOnly: true, RecursiveReadOnly: &cfgMode},
		}
		if diff := cmp.Diff(want, VolumeMountStatuses(mounts, supported)); diff != "" {
			t.Errorf("supported %v: (-want +got):\n%s", supported, diff)
		}
	}
	if got := VolumeMountStatuses(nil, true); got != nil {
		t.Errorf("no mounts: %v, want nil", got)
	}
}
