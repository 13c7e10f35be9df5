package nodeagent

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/volume"
)

// Local storage eviction, as the kubelet's eviction manager does it for a
// pod's emptyDir over its sizeLimit: every EvictionInterval the disk-backed
// emptyDirs with a sizeLimit are measured (as du counts), and a pod with
// one over its limit is stopped for good: a Warning event Evicted, phase
// Failed with reason Evicted and the kubelet's message, the
// DisruptionTarget condition (TerminationByKubelet) with that message, and
// its containers stopped with the kubelet's minimum grace period. A Job's
// podFailurePolicy can match it as on a cluster. Memory-backed emptyDirs
// are bounded by their tmpfs' size instead.

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

// emptyDirOverLimit returns the kubelet's eviction message for the first
// disk-backed emptyDir of pod whose usage exceeds its sizeLimit, "" when
// none does. usage measures a volume by name.
func emptyDirOverLimit(pod *corev1.Pod, usage func(name string) (int64, bool)) string {
	for _, v := range pod.Spec.Volumes {
		ed := v.EmptyDir
		if ed == nil || ed.SizeLimit == nil || ed.SizeLimit.IsZero() || ed.Medium == corev1.StorageMediumMemory {
			continue
		}
		used, ok := usage(v.Name)
		if ok && used > ed.SizeLimit.Value() {
			return fmt.Sprintf("Usage of EmptyDir volume %q exceeds the limit %q. ", v.Name, ed.SizeLimit.String())
		}
	}
	return ""
}

// evictLoop checks local storage every EvictionInterval until ctx ends.
func (a *Agent) evictLoop(ctx context.Context) {
	t := a.clock.NewTicker(EvictionInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			a.evictForLocalStorage(ctx)
		}
	}
}

// evictForLocalStorage evicts the running pods whose emptyDirs exceed
// their sizeLimit.
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
		msg := emptyDirOverLimit(pod, func(name string) (int64, bool) {
			used, err := volume.DiskUsage(a.volumes.Source(pod, name))
			return used, err == nil
		})
		if msg == "" || w.shutdownRequested() != nil {
			continue
		}
		klog.FromContext(ctx).Info("Evicting pod", "pod", klog.KObj(pod), "message", msg)
		a.event(pod, corev1.EventTypeWarning, ReasonEvicted, msg)
		w.shutdown(shutdownPlan{grace: evictionGrace, reason: ReasonEvicted, message: msg})
	}
}
