package status

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// FieldManager is the field manager of every write the agent makes.
const FieldManager = "jobkeeper-node-agent"

// statusEntry is what the status manager still has to do for one pod.
type statusEntry struct {
	// namespace and name address the pod.
	namespace, name string
	// status is the status to write, nil when written.
	status *corev1.PodStatus
	// deleteWhenDone asks for the final delete once the pod is terminal
	// in the API (a kubelet's confirmation of a graceful deletion).
	deleteWhenDone bool
	// terminal is true once a terminal status was written or observed.
	terminal bool
}

// Manager writes pod status through the status subresource and
// finishes graceful deletions. Writes are coalesced per pod: only the
// latest status is sent.
type Manager struct {
	// client writes to the API.
	client kubernetes.Interface
	// queue holds pods with work to do.
	queue workqueue.TypedRateLimitingInterface[types.UID]

	// mu guards entries and syncing.
	mu sync.Mutex
	// entries is the pending work per pod.
	entries map[types.UID]*statusEntry
	// syncing counts the syncs in progress (a write may be in flight).
	syncing int
}

// NewManager returns a status manager.
func NewManager(client kubernetes.Interface) *Manager {
	return &Manager{
		client: client,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[types.UID](),
			workqueue.TypedRateLimitingQueueConfig[types.UID]{Name: "nodeagent_pod_status"}),
		entries: map[types.UID]*statusEntry{},
	}
}

// entry returns the entry of pod, creating it; mu is held.
func (m *Manager) entry(pod *corev1.Pod) *statusEntry {
	e, ok := m.entries[pod.UID]
	if !ok {
		e = &statusEntry{namespace: pod.Namespace, name: pod.Name}
		m.entries[pod.UID] = e
	}
	return e
}

// Set queues status as the pod's desired status, with the pod's generation
// as its observedGeneration (never lowered), as the kubelet's status
// manager writes every status (PodObservedGenerationTracking, GA in v1.35).
func (m *Manager) Set(pod *corev1.Pod, status *corev1.PodStatus) {
	if status.ObservedGeneration < pod.Generation {
		status = status.DeepCopy()
		status.ObservedGeneration = pod.Generation
	}
	m.mu.Lock()
	m.entry(pod).status = status
	m.mu.Unlock()
	m.queue.Add(pod.UID)
}

// RequestDelete asks for the final delete of a pod being deleted, done once
// its terminal status is in the API.
func (m *Manager) RequestDelete(pod *corev1.Pod) {
	m.mu.Lock()
	e := m.entry(pod)
	e.deleteWhenDone = true
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		e.terminal = true
	}
	m.mu.Unlock()
	m.queue.Add(pod.UID)
}

// ForgetIfIdle drops the entry of a pod with nothing left to write or delete.
func (m *Manager) ForgetIfIdle(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.entries[uid]; ok && e.status == nil && !e.deleteWhenDone {
		delete(m.entries, uid)
	}
}

// Forget drops a pod that left the API.
func (m *Manager) Forget(uid types.UID) {
	m.mu.Lock()
	delete(m.entries, uid)
	m.mu.Unlock()
}

// Run processes the queue with n workers until ctx is done.
func (m *Manager) Run(ctx context.Context, n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m.processNext(ctx) {
			}
		}()
	}
	<-ctx.Done()
	m.queue.ShutDown()
	wg.Wait()
}

// processNext handles one pod.
func (m *Manager) processNext(ctx context.Context) bool {
	uid, quit := m.queue.Get()
	if quit {
		return false
	}
	defer m.queue.Done(uid)
	m.mu.Lock()
	m.syncing++
	m.mu.Unlock()
	err := m.sync(ctx, uid)
	m.mu.Lock()
	m.syncing--
	m.mu.Unlock()
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Retrying pod status sync", "uid", uid, "err", err)
		m.queue.AddRateLimited(uid)
		return true
	}
	m.queue.Forget(uid)
	return true
}

// sync writes the pending status of a pod, then the final delete if asked.
func (m *Manager) sync(ctx context.Context, uid types.UID) error {
	m.mu.Lock()
	e, ok := m.entries[uid]
	if !ok {
		m.mu.Unlock()
		return nil
	}
	ns, name, status := e.namespace, e.name, e.status
	e.status = nil
	m.mu.Unlock()

	if status != nil {
		if err := m.patchStatus(ctx, ns, name, uid, status); err != nil {
			if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
				// The pod is gone or was replaced by another with the same name.
				return nil
			}
			if apierrors.IsInvalid(err) {
				// A UID mismatch (the pod was replaced) or a status the
				// apiserver refuses: retrying the same write cannot help.
				klog.FromContext(ctx).Info("Pod status write refused", "pod", klog.KRef(ns, name), "err", err)
				return nil
			}
			m.mu.Lock()
			if e.status == nil {
				e.status = status
			}
			m.mu.Unlock()
			return err
		}
		if status.Phase == corev1.PodSucceeded || status.Phase == corev1.PodFailed {
			m.mu.Lock()
			e.terminal = true
			m.mu.Unlock()
		}
	}

	m.mu.Lock()
	deleteNow := e.deleteWhenDone && e.terminal && e.status == nil
	m.mu.Unlock()
	if !deleteNow {
		return nil
	}
	err := m.client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: &uid},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("finishing deletion of pod %s/%s: %w", ns, name, err)
	}
	m.mu.Lock()
	e.deleteWhenDone = false
	m.mu.Unlock()
	return nil
}

// patchStatus writes status with a merge patch on the status subresource;
// metadata.uid in the patch makes it fail if the pod was replaced.
func (m *Manager) patchStatus(ctx context.Context, ns, name string, uid types.UID, status *corev1.PodStatus) error {
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": uid},
		"status":   status,
	})
	if err != nil {
		return err
	}
	_, err = m.client.CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: FieldManager}, "status")
	if err != nil {
		return fmt.Errorf("writing status of pod %s/%s: %w", ns, name, err)
	}
	return nil
}

// WaitWritten waits until no status is left to write, at most timeout; it
// reports whether none is.
func (m *Manager) WaitWritten(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		m.mu.Lock()
		pending := m.syncing > 0
		for _, e := range m.entries {
			pending = pending || e.status != nil
		}
		m.mu.Unlock()
		if !pending && m.queue.Len() == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}
