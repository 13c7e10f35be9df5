package volume

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestEmptyDirTmpfsSize: the kubelet's sizes of a memory-backed emptyDir.
func TestEmptyDirTmpfsSize(t *testing.T) {
	alloc := corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("8Gi")}
	limited := func(limit string) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(limit)},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(limit)}}}}}}
	}
	unlimited := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
	q := func(s string) *resource.Quantity { v := resource.MustParse(s); return &v }
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		ed   corev1.EmptyDirVolumeSource
		want int64
	}{
		"no limits: the node's allocatable": {pod: unlimited, want: 8 << 30},
		"the pod's memory limit":            {pod: limited("1Gi"), want: 1 << 30},
		"a smaller sizeLimit":               {pod: limited("1Gi"), ed: corev1.EmptyDirVolumeSource{SizeLimit: q("64Mi")}, want: 64 << 20},
		"a larger sizeLimit is not taken":   {pod: limited("1Gi"), ed: corev1.EmptyDirVolumeSource{SizeLimit: q("2Gi")}, want: 1 << 30},
		"sizeLimit without a pod limit":     {pod: unlimited, ed: corev1.EmptyDirVolumeSource{SizeLimit: q("64Mi")}, want: 64 << 20},
	} {
		t.Run(name, func(t *testing.T) {
			if got := emptyDirTmpfsSize(tc.pod, &tc.ed, alloc); got != tc.want {
				t.Errorf("size %d, want %d", got, tc.want)
			}
		})
	}
}

// TestMemoryBackedEmptyDir: as root with a private view, a memory-backed
// emptyDir is a tmpfs of the pod's size, world-writable and sticky, which
// UnmountVolumes takes away; an ordinary emptyDir stays a directory.
func TestMemoryBackedEmptyDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	a, _ := volumeAgent(t, true)
	a.volumes.cfg.Capacity = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("8Gi")}
	size := resource.MustParse("16Mi")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "c"}},
		Volumes: []corev1.Volume{
			{Name: "mem", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &size}}},
			{Name: "disk", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		}}}
	if err := a.volumes.Prepare(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	podDir := a.podDir(pod.UID)
	mem, disk := filepath.Join(podDir, "volumes", "mem"), filepath.Join(podDir, "volumes", "disk")
	t.Cleanup(func() { _ = UnmountVolumes(podDir) })
	var st unix.Statfs_t
	if err := unix.Statfs(mem, &st); err != nil || st.Type != unix.TMPFS_MAGIC || int64(st.Blocks)*st.Bsize != 16<<20 {
		t.Errorf("mem: statfs type %#x, %d bytes (%v); want a 16Mi tmpfs", st.Type, int64(st.Blocks)*st.Bsize, err)
	}
	if fi, err := os.Stat(mem); err != nil || fi.Mode()&(os.ModePerm|os.ModeSticky) != 0o777|os.ModeSticky {
		t.Errorf("mem: %v, %v; want mode 1777, tmpfs' own", fi.Mode(), err)
	}
	if mounted, _ := isMountPoint(disk); mounted {
		t.Error("disk is a mount point")
	}
	// A second Prepare (another run of the agent) mounts nothing more.
	a.volumes.Forget(pod.UID)
	if err := a.volumes.Prepare(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	if err := UnmountVolumes(podDir); err != nil {
		t.Fatal(err)
	}
	if mounted, _ := isMountPoint(mem); mounted {
		t.Error("mem is still mounted after UnmountVolumes (or was mounted twice)")
	}
	if err := os.RemoveAll(podDir); err != nil {
		t.Errorf("the pod's directory cannot be removed: %v", err)
	}
}
