package volume

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm"
)

// Memory-backed emptyDir volumes (medium: Memory) are a tmpfs, as the
// kubelet makes them, where the agent can mount one on this host's
// filesystem: as root, for containers with a private view (which see the
// host's mounts made before they start). Elsewhere they stay a directory,
// and DecideFeatures warns that the medium is not honoured.

// MemoryMediumHonoured reports whether memory-backed emptyDirs are tmpfs.
func (m *Manager) MemoryMediumHonoured() bool {
	return m.cfg.EUID == 0 && Isolated(m.cfg.Runtime())
}

// emptyDirTmpfsSize is the size of a memory-backed emptyDir, as the
// kubelet's SizeMemoryBackedVolumes (GA) computes it: the node's
// allocatable memory, or the pod's memory limit (as its cgroup gets it)
// when smaller, or the volume's sizeLimit when smaller still. 0: the
// kernel's default.
func emptyDirTmpfsSize(pod *corev1.Pod, ed *corev1.EmptyDirVolumeSource, allocatable corev1.ResourceList) int64 {
	size := allocatable.Memory().Value()
	if rc := cm.ResourceConfigForPod(pod, false, cm.QuotaPeriod, false, ""); rc != nil && rc.Memory != nil {
		if l := *rc.Memory; l > 0 && (size == 0 || l <= size) {
			size = l
		}
	}
	if ed.SizeLimit != nil {
		if l := ed.SizeLimit.Value(); l > 0 && (size == 0 || l <= size) {
			size = l
		}
	}
	return size
}

// mountTmpfs mounts a tmpfs of size bytes on dir, unless one is already
// there (a previous run of the agent mounted it). Its root has tmpfs'
// default mode, 1777, as the kubelet's (which mounts it with a size only).
func mountTmpfs(dir string, size int64) error {
	if mounted, err := isMountPoint(dir); err != nil || mounted {
		return err
	}
	opts := "mode=1777"
	if size > 0 {
		opts += ",size=" + strconv.FormatInt(size, 10)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mounting a tmpfs for a memory-backed emptyDir: %w", err)
	}
	return nil
}

// isMountPoint reports whether dir is on another filesystem than its
// parent.
func isMountPoint(dir string) (bool, error) {
	var st, parent unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return false, err
	}
	if err := unix.Lstat(filepath.Dir(dir), &parent); err != nil {
		return false, err
	}
	return st.Dev != parent.Dev, nil
}

// UnmountVolumes detaches what is mounted on the volume directories of
// the pod whose directory is podDir (memory-backed emptyDirs), so that the
// directory can be removed; nothing mounted is no error.
func UnmountVolumes(podDir string) error {
	entries, err := os.ReadDir(filepath.Join(podDir, "volumes"))
	if err != nil {
		return nil
	}
	var firstErr error
	for _, e := range entries {
		dir := filepath.Join(podDir, "volumes", e.Name())
		if mounted, err := isMountPoint(dir); err != nil || !mounted {
			continue
		}
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("unmounting %s: %w", dir, err)
		}
	}
	return firstErr
}
