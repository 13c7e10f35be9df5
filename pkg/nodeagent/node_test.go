package nodeagent

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestHostCapacity: the node advertises the filesystem of its data
// directory as ephemeral-storage and the extended resources it is given.
func TestHostCapacity(t *testing.T) {
	c := hostCapacity(3, t.TempDir()+"/not/yet", map[corev1.ResourceName]int64{"example.com/gpu": 2})
	if q := c[corev1.ResourceEphemeralStorage]; q.Value() <= 0 {
		t.Errorf("ephemeral-storage %v, want the data directory's filesystem size", q.String())
	}
	if q := c["example.com/gpu"]; q.Value() != 2 {
		t.Errorf("example.com/gpu %v, want 2", q.String())
	}
	if q := c[corev1.ResourcePods]; q.Value() != 3 {
		t.Errorf("pods %v, want 3", q.String())
	}
}

// TestHostInfo: kubectl get nodes -o wide shows the kernel and the OS.
func TestHostInfo(t *testing.T) {
	info := hostInfo()
	if info.KernelVersion == "" || info.OSImage == "" || info.BootID == "" {
		t.Errorf("node info %+v lacks the kernel, the OS image or the boot id", info)
	}
	if info.OperatingSystem != "linux" || info.KubeletVersion != KubeletVersion {
		t.Errorf("node info %+v", info)
	}
}

// TestExtendedResourceOptions: a name that is not an extended resource,
// or a negative count, is refused, naming it.
func TestExtendedResourceOptions(t *testing.T) {
	for name, tc := range map[string]struct {
		res  map[corev1.ResourceName]int64
		want string
	}{
		"fine":                 {res: map[corev1.ResourceName]int64{"example.com/gpu": 1}},
		"not domain-qualified": {res: map[corev1.ResourceName]int64{"gpu": 1}, want: `extended resource "gpu": not an extended resource name`},
		"kubernetes.io's":      {res: map[corev1.ResourceName]int64{"kubernetes.io/gpu": 1}, want: `extended resource "kubernetes.io/gpu"`},
		"negative":             {res: map[corev1.ResourceName]int64{"example.com/gpu": -1}, want: `extended resource "example.com/gpu": count -1 is negative`},
	} {
		t.Run(name, func(t *testing.T) {
			o := Options{DataDir: t.TempDir(), ExtendedResources: tc.res}
			err := o.complete()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("complete() = %v, want %q", err, tc.want)
			}
		})
	}
}
