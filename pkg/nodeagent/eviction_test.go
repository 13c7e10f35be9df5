package nodeagent

import (
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/volume"
)

// TestLocalStorageOverLimit: the kubelet's local storage checks, in its
// order, with its messages.
func TestLocalStorageOverLimit(t *testing.T) {
	limit := resource.MustParse("1Mi")
	vol := func(name string, medium corev1.StorageMedium, limit *resource.Quantity) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: medium, SizeLimit: limit}}}
	}
	ctr := func(name, storage string) corev1.Container {
		c := corev1.Container{Name: name}
		if storage != "" {
			c.Resources.Limits = corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse(storage)}
		}
		return c
	}
	volumes := map[string]int64{"small": 512 << 10, "big": 2 << 20, "mem": 2 << 20, "nolimit": 2 << 20}
	logs := map[string]int64{"quiet": 1 << 10, "chatty": 3 << 20}
	u := storageUsage{
		volume: func(name string) (int64, bool) { v, ok := volumes[name]; return v, ok },
		logs:   func(name string) (int64, bool) { v, ok := logs[name]; return v, ok },
	}
	for name, tc := range map[string]struct {
		vols []corev1.Volume
		ctrs []corev1.Container
		want string
	}{
		"emptyDir under its limit":            {vols: []corev1.Volume{vol("small", "", &limit)}},
		"emptyDir over its limit":             {vols: []corev1.Volume{vol("small", "", &limit), vol("big", "", &limit)}, want: `Usage of EmptyDir volume "big" exceeds the limit "1Mi". `},
		"memory-backed: its tmpfs bounds it":  {vols: []corev1.Volume{vol("mem", corev1.StorageMediumMemory, &limit)}},
		"no sizeLimit":                        {vols: []corev1.Volume{vol("nolimit", "", nil)}},
		"not measured (gone): nothing to say": {vols: []corev1.Volume{vol("unknown", "", &limit)}},
		"the pod's limit: volumes and logs": {vols: []corev1.Volume{vol("nolimit", "", nil)}, ctrs: []corev1.Container{ctr("quiet", "1Mi"), ctr("chatty", "")},
			want: "Pod ephemeral local storage usage exceeds the total limit of containers 1Mi. "},
		"the pod's limit is the containers' sum": {ctrs: []corev1.Container{ctr("quiet", "3Mi"), ctr("chatty", "4Mi")}},
		"a container's logs over its limit": {ctrs: []corev1.Container{ctr("quiet", "1Mi"), ctr("chatty", "2Mi"), ctr("other", "10Mi")},
			want: `Container chatty exceeded its local ephemeral storage limit "2Mi". `},
		"emptyDir first, as the kubelet": {vols: []corev1.Volume{vol("big", "", &limit)}, ctrs: []corev1.Container{ctr("chatty", "1Mi")},
			want: `Usage of EmptyDir volume "big" exceeds the limit "1Mi". `},
	} {
		t.Run(name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{Volumes: tc.vols, Containers: tc.ctrs}}
			if got := localStorageOverLimit(pod, u); got != tc.want {
				t.Errorf("localStorageOverLimit = %q, want %q", got, tc.want)
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
