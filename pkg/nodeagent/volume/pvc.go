package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// pvcProtectionFinalizer is the finalizer the apiserver's admission puts on
// claims; a claim being deleted that still has it may still be used.
const pvcProtectionFinalizer = "kubernetes.io/pvc-protection"

// claimPaths holds, per pod, the host path of each persistentVolumeClaim
// volume: the path of the PersistentVolume bound to the claim, looked up
// when the pod's volumes are prepared. The zero value is ready to use.
type claimPaths struct {
	// mu guards paths.
	mu sync.Mutex
	// paths maps a pod's UID to its volumes' paths by volume name.
	paths map[types.UID]map[string]string
}

// set records the path of a pod's volume.
func (c *claimPaths) set(uid types.UID, volume, path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.paths == nil {
		c.paths = map[types.UID]map[string]string{}
	}
	if c.paths[uid] == nil {
		c.paths[uid] = map[string]string{}
	}
	c.paths[uid][volume] = path
}

// path returns the path recorded for a pod's volume, "" when none is.
func (c *claimPaths) path(uid types.UID, volume string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.paths[uid][volume]
}

// forget drops a pod's paths.
func (c *claimPaths) forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.paths, uid)
}

// claimReadOnly reports a persistentVolumeClaim volume the pod mounts
// read-only (its readOnly field), in every container.
func claimReadOnly(v *corev1.Volume) bool {
	return v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ReadOnly
}

// prepareClaims looks up the PersistentVolume behind each
// persistentVolumeClaim volume of pod and records its host path, as the
// kubelet's volume manager does before it mounts: the claim must be Bound
// (and not being deleted without its protection finalizer), and its volume
// bound back to it. A claim not ready yet is no failure of the pod: the
// container waits, a FailedMount event with the kubelet's message says why,
// and the next attempt looks again.
func (m *Manager) prepareClaims(ctx context.Context, pod *corev1.Pod) error {
	var failed []string
	var firstErr error
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if v.PersistentVolumeClaim == nil {
			continue
		}
		path, local, err := m.claimPath(ctx, pod.Namespace, v.PersistentVolumeClaim.ClaimName)
		if err == nil && local {
			// As the kubelet's local volumes (hostPath ones keep their
			// owners).
			var policy *corev1.PodFSGroupChangePolicy
			if sc := pod.Spec.SecurityContext; sc != nil {
				policy = sc.FSGroupChangePolicy
			}
			if err = m.applyFSGroup(pod, path, v.PersistentVolumeClaim.ReadOnly, policy); err != nil {
				err = fmt.Errorf("volume %q: %w", v.Name, err)
			}
		}
		if err != nil {
			failed = append(failed, v.Name)
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		m.claims.set(pod.UID, v.Name, path)
	}
	if firstErr == nil {
		return nil
	}
	sort.Strings(failed)
	names := "[" + strings.Join(failed, " ") + "]"
	msg := fmt.Sprintf("Unable to attach or mount volumes: unmounted volumes=%s, unattached volumes=%s, failed to process volumes=%s: %v", names, names, names, firstErr)
	m.cfg.Event(pod, corev1.EventTypeWarning, "FailedMount", msg)
	return errors.New(msg)
}

// claimPath returns the host path of the PersistentVolume bound to the
// claim namespace/name and whether it is a local volume, with the
// kubelet's errors when there is none yet.
func (m *Manager) claimPath(ctx context.Context, namespace, name string) (string, bool, error) {
	client := m.cfg.Client.CoreV1()
	pvc, err := client.PersistentVolumeClaims(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", false, fmt.Errorf("error processing PVC %s/%s: failed to fetch PVC from API server: %v", namespace, name, err)
	}
	pv, err := claimVolumeName(pvc)
	if err != nil {
		return "", false, fmt.Errorf("error processing PVC %s/%s: %v", namespace, name, err)
	}
	vol, err := client.PersistentVolumes().Get(ctx, pv, metav1.GetOptions{})
	if err != nil {
		return "", false, fmt.Errorf("error processing PVC %s/%s: failed to fetch PV %s from API server: %v", namespace, name, pv, err)
	}
	path, err := volumePath(vol, pvc.UID)
	if err != nil {
		return "", false, fmt.Errorf("error processing PVC %s/%s: %v", namespace, name, err)
	}
	return path, vol.Spec.Local != nil, nil
}

// claimVolumeName returns the name of the volume a claim is bound to, or
// the kubelet's error for a claim that cannot be used yet.
func claimVolumeName(pvc *corev1.PersistentVolumeClaim) (string, error) {
	if pvc.DeletionTimestamp != nil && !slices.Contains(pvc.Finalizers, pvcProtectionFinalizer) {
		return "", errors.New("PVC is being deleted")
	}
	if pvc.Status.Phase != corev1.ClaimBound {
		return "", errors.New("PVC is not bound")
	}
	if pvc.Spec.VolumeName == "" {
		return "", errors.New("PVC has empty pvc.Spec.VolumeName")
	}
	return pvc.Spec.VolumeName, nil
}

// volumePath returns the host path of a hostPath or local PersistentVolume
// bound to the claim with UID claimUID, making a hostPath's directory as its
// type asks; the kubelet's errors for a volume not bound back to the claim.
func volumePath(pv *corev1.PersistentVolume, claimUID types.UID) (string, error) {
	if pv.Spec.ClaimRef == nil {
		return "", fmt.Errorf("found PV object %s but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim", pv.Name)
	}
	if pv.Spec.ClaimRef.UID != claimUID {
		return "", fmt.Errorf("found PV object %s but its pv.Spec.ClaimRef.UID %s does not point to claim.UID %s", pv.Name, pv.Spec.ClaimRef.UID, claimUID)
	}
	if pv.Spec.VolumeMode != nil && *pv.Spec.VolumeMode == corev1.PersistentVolumeBlock {
		return "", fmt.Errorf("PV %s has volumeMode Block: block volumes are not supported by the local node agent", pv.Name)
	}
	switch {
	case pv.Spec.HostPath != nil:
		if err := checkHostPath(pv.Spec.HostPath); err != nil {
			return "", fmt.Errorf("PV %s: %w", pv.Name, err)
		}
		return filepath.Clean(pv.Spec.HostPath.Path), nil
	case pv.Spec.Local != nil:
		p := filepath.Clean(pv.Spec.Local.Path)
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("PV %s: local path: %w", pv.Name, err)
		}
		return p, nil
	}
	return "", fmt.Errorf("PV %s is neither a hostPath nor a local volume: only those are supported by the local node agent", pv.Name)
}
