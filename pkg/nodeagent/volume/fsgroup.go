package volume

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	corev1 "k8s.io/api/core/v1"
)

// The permission bits the kubelet adds to a volume's files when it gives
// them the pod's fsGroup.
const (
	fsGroupRWMask   = os.FileMode(0o660)
	fsGroupROMask   = os.FileMode(0o440)
	fsGroupExecMask = os.FileMode(0o110)
)

// podFSGroup returns the pod's fsGroup, nil when it has none.
func podFSGroup(pod *corev1.Pod) *int64 {
	if sc := pod.Spec.SecurityContext; sc != nil {
		return sc.FSGroup
	}
	return nil
}

// setVolumeOwnership gives a volume the pod's fsGroup as the kubelet's
// volume ownership does: every file and directory below dir (dir
// included) gets the group, and, symbolic links left out, group read and
// write (read only for a read-only volume) added to its mode; directories
// also get the group's search bit and setgid, so that what is created in
// them later has the group too. With fsGroupChangePolicy OnRootMismatch
// nothing is done when dir already has the group and those bits. The
// emptyDir, configMap, secret, downwardAPI and projected volumes always
// walk (their policy is not looked at, as upstream), local volumes follow
// the policy; hostPath volumes keep their owners.
func setVolumeOwnership(dir string, fsGroup int64, readOnly bool, policy *corev1.PodFSGroupChangePolicy) error {
	if policy != nil && *policy == corev1.FSGroupChangeOnRootMismatch && !ownershipMismatch(dir, fsGroup, readOnly) {
		return nil
	}
	var failed error
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(p, -1, int(fsGroup)); err != nil && failed == nil {
			failed = err
		}
		if d.Type()&os.ModeSymlink != 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		mask := fsGroupRWMask
		if readOnly {
			mask = fsGroupROMask
		}
		if info.IsDir() {
			mask |= os.ModeSetgid | fsGroupExecMask
		}
		if err := os.Chmod(p, info.Mode()|mask); err != nil && failed == nil {
			failed = err
		}
		return nil
	})
	if err == nil {
		err = failed
	}
	if err != nil {
		return fmt.Errorf("setting the volume's group to fsGroup %d: %w", fsGroup, err)
	}
	return nil
}

// ownershipMismatch reports whether dir lacks what setVolumeOwnership
// gives it: the group, the mode bits and setgid.
func ownershipMismatch(dir string, fsGroup int64, readOnly bool) bool {
	info, err := os.Stat(dir)
	if err != nil {
		return true
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok || int64(st.Gid) != fsGroup || !info.IsDir() {
		return true
	}
	want := fsGroupRWMask | fsGroupExecMask
	if readOnly {
		want = fsGroupROMask | fsGroupExecMask
	}
	return info.Mode().Perm()&want != want || info.Mode()&os.ModeSetgid == 0
}

// errNoFSGroup is returned for a pod with fsGroup on an agent that cannot
// give groups (decideFeatures refuses such pods first).
var errNoFSGroup = errors.New("fsGroup needs the node agent to run as root")

// applyFSGroup gives a volume prepared by the agent the pod's fsGroup, if
// it has one.
func (m *Manager) applyFSGroup(pod *corev1.Pod, dir string, readOnly bool, policy *corev1.PodFSGroupChangePolicy) error {
	g := podFSGroup(pod)
	if g == nil {
		return nil
	}
	if m.cfg.EUID != 0 {
		return errNoFSGroup
	}
	return setVolumeOwnership(dir, *g, readOnly, policy)
}
