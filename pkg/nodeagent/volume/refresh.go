package volume

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/internal/periodic"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// DefaultSyncFrequency is how often the volumes of running pods are
// refreshed by default: the kubelet's --sync-frequency.
const DefaultSyncFrequency = time.Minute

// refreshed reports the volumes the kubelet keeps up to date under a
// running pod: their files follow the ConfigMaps, Secrets, pod fields and
// tokens they are made of. (A subPath mount of one is not refreshed: it
// holds the file it was mounted from.)
func refreshed(v *corev1.Volume) bool {
	s := v.VolumeSource
	return s.ConfigMap != nil || s.Secret != nil || s.DownwardAPI != nil || s.Projected != nil
}

// refreshable reports whether a pod's volumes are still kept up to date:
// not once it has finished or is being deleted, as the kubelet stops
// syncing them.
func refreshable(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp == nil && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

// Token refresh, as the kubelet's token manager: a projected token is
// requested again once 80% of its requested lifetime has passed, or after
// 24 hours.
const (
	tokenRefreshFraction = 0.8
	tokenMaxAge          = 24 * time.Hour
)

// tokenNeedsRefresh reports whether a token issued at issued for ttl must
// be requested again at now.
func tokenNeedsRefresh(issued time.Time, ttl time.Duration, now time.Time) bool {
	age := now.Sub(issued)
	return age >= tokenMaxAge || age >= time.Duration(float64(ttl)*tokenRefreshFraction)
}

// tokenKey names one projected token of one pod.
type tokenKey struct {
	pod      types.UID
	account  string
	audience string
	ttl      time.Duration
}

// issuedToken is a token the agent wrote, and when.
type issuedToken struct {
	token  []byte
	issued time.Time
}

// RefreshLoop refreshes the volumes of running pods every syncFrequency
// until ctx is done.
func (m *Manager) RefreshLoop(ctx context.Context, syncFrequency time.Duration) {
	periodic.Every(ctx, m.cfg.Clock, syncFrequency, func() { m.RefreshAll(ctx) })
}

// RefreshAll writes again the refreshed volumes of every pod whose volumes
// were prepared (by this run, or by the previous one for a pod taken over)
// and that still runs. A write that changes nothing leaves
// the directory untouched; one that fails keeps the files as they were and
// records a FailedMount event, as the kubelet's sync does.
func (m *Manager) RefreshAll(ctx context.Context) {
	pods, err := m.cfg.Pods.List(labels.Everything())
	if err != nil {
		return
	}
	// One pass reads each ConfigMap and Secret once, however many pods
	// mount it (every pod mounts its namespace's kube-root-ca.crt).
	reads := &objectReads{memo: map[objectRef]objectRead{}}
	for _, pod := range pods {
		if !refreshable(pod) {
			continue
		}
		m.refreshPod(ctx, reads, pod)
	}
}

// TakeOver records that a container of pod, started by a previous run of
// the agent, was taken over: the volumes that run wrote are refreshed from
// now on. A runtime that mounts nothing on this host has none.
func (m *Manager) TakeOver(pod *corev1.Pod) {
	if _, ok := m.cfg.Runtime().(runtime.Isolator); !ok {
		return
	}
	m.mu.Lock()
	m.takenOver[pod.UID] = true
	m.mu.Unlock()
}

// refreshPod refreshes one pod's volumes. It holds refreshMu so that a pod
// being forgotten (its directory about to be removed) is not written again.
func (m *Manager) refreshPod(ctx context.Context, reads *objectReads, pod *corev1.Pod) {
	m.refreshMu.Lock()
	defer m.refreshMu.Unlock()
	m.mu.Lock()
	ready := m.ready[pod.UID] || m.takenOver[pod.UID]
	m.mu.Unlock()
	if !ready {
		return
	}
	isolated := Isolated(m.cfg.Runtime())
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if !refreshed(v) || (ServiceAccountVolume(v) && !isolated) {
			continue
		}
		files, err := m.projection(ctx, reads, pod, v)
		if err == nil {
			// The new files get the pod's fsGroup before they are
			// swapped in: a reader never sees them without it.
			dir := m.source(pod, v)
			var changed bool
			changed, err = writeAtomicWith(dir, files, m.cfg.Clock.Now(), func() error { return m.applyFSGroup(pod, dir, true, nil) })
			if changed && err == nil {
				klog.FromContext(ctx).V(2).Info("Volume refreshed", "pod", klog.KObj(pod), "volume", v.Name)
			}
		}
		if err != nil {
			m.cfg.Event(pod, corev1.EventTypeWarning, "FailedMount", fmt.Sprintf("MountVolume.SetUp failed for volume %q : %v", v.Name, err))
		}
	}
}
