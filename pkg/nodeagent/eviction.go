package nodeagent

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/internal/periodic"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/volume"
)

// Local storage eviction, as the kubelet's eviction manager does it: every
// EvictionInterval a pod's local storage is measured (as du counts) and
// checked, in the kubelet's order, against its emptyDirs' sizeLimits, its
// ephemeral-storage limit (the sum of its containers') and each
// container's; a pod over one is stopped for good: a Warning event
// Evicted, phase Failed with reason Evicted and the kubelet's message, the
// DisruptionTarget condition (TerminationByKubelet) with that message, and
// its containers stopped with the kubelet's minimum grace period. A Job's
// podFailurePolicy can match it as on a cluster.
//
// What counts: disk-backed emptyDirs and the containers' logs. A
// container's writable root is a tmpfs here (the overlay's upper layer),
// so its writes count against its memory instead; memory-backed emptyDirs
// are bounded by their tmpfs' size.

// EvictionInterval is how often local storage is checked (the kubelet's
// eviction manager's housekeeping interval).
var EvictionInterval = 10 * time.Second

// ReasonEvicted is the pod's status reason and the event's, as the
// kubelet's eviction manager writes them.
const ReasonEvicted = "Evicted"

// evictionGrace is the grace period of an evicted pod's containers: the
// kubelet evicts for local storage with none, and its runtime manager
// gives a container at least two seconds.
const evictionGrace = 2 * time.Second

// storageUsage measures a pod's local storage: a volume's by name, a
// container's logs by the container's name; false when not measured.
type storageUsage struct {
	volume, logs func(name string) (int64, bool)
}

// localStorageOverLimit returns the kubelet's eviction message for the
// first limit pod's local storage exceeds, in the kubelet's order
// (emptyDir sizeLimits, the pod's ephemeral-storage limit, a container's),
// "" when none is exceeded.
func localStorageOverLimit(pod *corev1.Pod, u storageUsage) string {
	var volumes int64
	for _, v := range pod.Spec.Volumes {
		ed := v.EmptyDir
		if ed == nil || ed.Medium == corev1.StorageMediumMemory {
			continue
		}
		used, ok := u.volume(v.Name)
		if !ok {
			continue
		}
		volumes += used
		if ed.SizeLimit != nil && ed.SizeLimit.Sign() > 0 && used > ed.SizeLimit.Value() {
			return fmt.Sprintf("Usage of EmptyDir volume %q exceeds the limit %q. ", v.Name, ed.SizeLimit.String())
		}
	}
	logs := map[string]int64{}
	var total int64
	for _, c := range podContainerNames(pod) {
		if used, ok := u.logs(c); ok {
			logs[c] = used
			total += used
		}
	}
	if limit, ok := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})[corev1.ResourceEphemeralStorage]; ok && volumes+total > limit.Value() {
		return fmt.Sprintf("Pod ephemeral local storage usage exceeds the total limit of containers %s. ", limit.String())
	}
	for _, c := range pod.Spec.Containers {
		limit := c.Resources.Limits.StorageEphemeral()
		if !limit.IsZero() && logs[c.Name] > limit.Value() {
			return fmt.Sprintf("Container %s exceeded its local ephemeral storage limit %q. ", c.Name, limit.String())
		}
	}
	return ""
}

// podContainerNames are the names of every container of the pod.
func podContainerNames(pod *corev1.Pod) []string {
	var out []string
	for _, c := range pod.Spec.InitContainers {
		out = append(out, c.Name)
	}
	for _, c := range pod.Spec.Containers {
		out = append(out, c.Name)
	}
	for _, c := range pod.Spec.EphemeralContainers {
		out = append(out, c.Name)
	}
	return out
}

// evictLoop checks local storage every EvictionInterval until ctx ends.
func (a *Agent) evictLoop(ctx context.Context) {
	periodic.Every(ctx, a.clock, EvictionInterval, func() { a.evictForLocalStorage(ctx) })
}

// evictForLocalStorage evicts the running pods whose local storage exceeds
// a limit.
func (a *Agent) evictForLocalStorage(ctx context.Context) {
	a.mu.Lock()
	ws := make([]*worker, 0, len(a.workers))
	for _, w := range a.workers {
		if !isClosed(w.finished) {
			ws = append(ws, w)
		}
	}
	a.mu.Unlock()
	for _, w := range ws {
		pod := w.currentPod()
		msg := localStorageOverLimit(pod, storageUsage{
			volume: func(name string) (int64, bool) {
				used, err := volume.DiskUsage(a.volumes.Source(pod, name))
				return used, err == nil
			},
			logs: func(name string) (int64, bool) {
				used, err := volume.DiskUsage(filepath.Dir(a.logPath(pod.UID, name, 0)))
				return used, err == nil
			},
		})
		if msg == "" || w.shutdownRequested() != nil {
			continue
		}
		klog.FromContext(ctx).Info("Evicting pod", "pod", klog.KObj(pod), "message", msg)
		a.event(pod, corev1.EventTypeWarning, ReasonEvicted, msg)
		w.shutdown(shutdownPlan{grace: evictionGrace, reason: ReasonEvicted, message: msg})
	}
}
