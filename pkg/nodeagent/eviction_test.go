package nodeagent

import (
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/volume"
)

func TestEmptyDirOverLimit(t *testing.T) {
	limit := resource.MustParse("1Mi")
	vol := func(name string, medium corev1.StorageMedium, limit *resource.Quantity) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: medium, SizeLimit: limit}}}
	}
	usage := map[string]int64{"small": 512 << 10, "big": 2 << 20, "mem": 2 << 20, "nolimit": 2 << 20}
	measure := func(name string) (int64, bool) { v, ok := usage[name]; return v, ok }
	for name, tc := range map[string]struct {
		vols []corev1.Volume
		want string
	}{
		"under its limit":                     {vols: []corev1.Volume{vol("small", "", &limit)}},
		"over its limit":                      {vols: []corev1.Volume{vol("small", "", &limit), vol("big", "", &limit)}, want: `Usage of EmptyDir volume "big" exceeds the limit "1Mi". `},
		"memory-backed: its tmpfs bounds it":  {vols: []corev1.Volume{vol("mem", corev1.StorageMediumMemory, &limit)}},
		"no sizeLimit":                        {vols: []corev1.Volume{vol("nolimit", "", nil)}},
		"not measured (gone): nothing to say": {vols: []corev1.Volume{vol("unknown", "", &limit)}},
	} {
		t.Run(name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{Volumes: tc.vols}}
			if got := emptyDirOverLimit(pod, measure); got != tc.want {
				t.Errorf("emptyDirOverLimit = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestDiskUsage: allocated blocks as du counts them, a file linked twice
// once.
func TestDiskUsage(t *testing.T) {
	dir := t.TempDir()
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = 1
	}
	if err := os.WriteFile(filepath.Join(dir, "a"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "a"), filepath.Join(dir, "b")); err != nil {
		t.Fatal(err)
	}
	used, err := volume.DiskUsage(dir)
	if err != nil || used < 1<<20 || used > 1<<20+64<<10 {
		t.Errorf("DiskUsage = %d, %v; want about 1MiB", used, err)
	}
}
