package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/events"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/allocation"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/binder"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/cgroup"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/lifecycle"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// resizeRetry is how long a deferred resize, or one whose actuation
// failed, waits before it is tried again (the kubelet tries again as pods
// come and go, and at its periodic syncs).
var resizeRetry = 5 * time.Second

// resizeState is the worker's record of the pod's in-place resizes
// (worker goroutine only).
type resizeState struct {
	// alloc is what the pod is allocated: its containers start, and its
	// cgroups are written, with it.
	alloc allocation.Allocation
	// actuated are the resources the running attempt of each container
	// got, by name, and actuatedPod the pod cgroup's pod-level ones.
	actuated    map[string]corev1.ResourceRequirements
	actuatedPod *corev1.ResourceRequirements
	// decided is the pod generation last decided on.
	decided int64
	// pending and inProgress are the pod's PodResizePending and
	// PodResizeInProgress conditions; nil when it has none.
	pending, inProgress *corev1.PodCondition
	// retry is when a deferred resize or a failed actuation is tried
	// again; zero when none waits.
	retry time.Time
}

// restoreResize rebuilds the resize state of a pod the agent may have run
// before (allocation.Restore), with the resize conditions its status
// shows, as the kubelet's status manager backfills them.
func restoreResize(pod *corev1.Pod) resizeState {
	r := resizeState{alloc: allocation.Restore(pod), actuated: map[string]corev1.ResourceRequirements{}, decided: pod.Generation}
	for name, res := range r.alloc.Containers {
		r.actuated[name] = res
	}
	if r.alloc.Pod != nil {
		r.actuatedPod = r.alloc.Pod.DeepCopy()
	}
	for i := range pod.Status.Conditions {
		c := pod.Status.Conditions[i]
		switch c.Type {
		case corev1.PodResizePending:
			r.pending = &c
			r.decided = 0
		case corev1.PodResizeInProgress:
			r.inProgress = &c
		}
	}
	if !allocation.FromSpec(pod).Equal(r.alloc) {
		r.decided = 0
	}
	return r
}

// conditions are the resize conditions for the pod's status.
func (r *resizeState) conditions() []corev1.PodCondition {
	var out []corev1.PodCondition
	for _, c := range []*corev1.PodCondition{r.pending, r.inProgress} {
		if c != nil {
			out = append(out, *c)
		}
	}
	return out
}

// resize decides a resize asked since the last look (or a deferred one
// whose retry is due) and actuates what is allocated but not yet in the
// running containers. It reports whether anything changed.
func (w *worker) resize(ctx context.Context, pod *corev1.Pod, now time.Time) bool {
	if w.stopping {
		return false
	}
	r := &w.resizes
	progress := false
	if pod.Generation != r.decided || (r.pending != nil && !now.Before(r.retry)) {
		r.decided = pod.Generation
		progress = w.decideResize(ctx, pod, now)
	}
	if r.inProgress != nil && (r.retry.IsZero() || !now.Before(r.retry) || progress) {
		progress = w.actuateResize(ctx, pod, now) || progress
	}
	return progress
}

// decideResize allocates what the pod's spec asks when it differs from
// the allocation and fits the node, or records why it waits.
func (w *worker) decideResize(ctx context.Context, pod *corev1.Pod, now time.Time) bool {
	r := &w.resizes
	logger := klog.FromContext(ctx)
	want := allocation.FromSpec(pod)
	if want.Equal(r.alloc) {
		if r.pending == nil {
			return false
		}
		r.pending, r.retry = nil, time.Time{}
		return true
	}
	request := binder.PodRequests(pod)
	a := w.agent
	a.mu.Lock()
	others := a.activeRequests
	if !w.released {
		others = others.Sub(w.requests)
	}
	a.mu.Unlock()
	v := allocation.Admit(request, others, a.capacity)
	if !v.Fit {
		r.retry = now.Add(resizeRetry)
		old := r.pending
		if old != nil && old.Reason == v.Reason && old.Message == v.Message && old.ObservedGeneration == pod.Generation {
			return false
		}
		r.pending = &corev1.PodCondition{Type: corev1.PodResizePending, Status: corev1.ConditionTrue, Reason: v.Reason, Message: v.Message,
			ObservedGeneration: pod.Generation, LastTransitionTime: metav1.NewTime(now)}
		if old != nil {
			r.pending.LastTransitionTime = old.LastTransitionTime
		}
		if old == nil || old.Reason != v.Reason || old.ObservedGeneration != pod.Generation {
			reason := events.ResizeDeferred
			if v.Reason == corev1.PodReasonInfeasible {
				reason = events.ResizeInfeasible
			}
			a.event(pod, corev1.EventTypeWarning, reason, events.PodResizePendingMsg(logger, pod, v.Reason, v.Message, pod.Generation))
		}
		return true
	}

	a.mu.Lock()
	if !w.released {
		a.activeRequests = a.activeRequests.Sub(w.requests).Add(request)
	}
	w.requests = request
	a.mu.Unlock()
	r.alloc = want
	for _, c := range append(append([]*container{}, w.inits...), w.containers...) {
		if res, ok := want.Containers[c.spec.Name]; ok && !allocation.SameResources(res, c.spec.Resources) {
			spec := *c.spec
			spec.Resources = *res.DeepCopy()
			c.spec = &spec
		}
	}
	// A new allocation starts a new resize: its condition says which
	// generation it is for.
	r.pending, r.retry = nil, time.Time{}
	r.inProgress = &corev1.PodCondition{Type: corev1.PodResizeInProgress, Status: corev1.ConditionTrue,
		ObservedGeneration: pod.Generation, LastTransitionTime: metav1.NewTime(now)}
	logger.V(2).Info("Pod resize allocated", "pod", klog.KObj(pod), "generation", pod.Generation)
	a.event(pod, corev1.EventTypeNormal, events.ResizeStarted, events.PodResizeStartedMsg(logger, pod, pod.Generation))
	return true
}

// actuateResize brings the running containers and the pod's cgroup to
// the allocation, as the kubelet's runtime manager does: containers whose
// resizePolicy asks for it are restarted; the others get their cgroups
// written in place, the pod's cgroup widened first and narrowed last so
// that it never holds less than its containers on the way. Once nothing
// is left, the resize is complete.
func (w *worker) actuateResize(ctx context.Context, pod *corev1.Pod, now time.Time) bool {
	r := &w.resizes
	logger := klog.FromContext(ctx)
	allocated := r.alloc.Apply(pod)
	var inPlace []*container
	restarting, restarted := false, false
	for _, c := range append(append([]*container{}, w.inits...), w.containers...) {
		want := r.alloc.Containers[c.spec.Name]
		if c.handle == nil || c.state.Phase != lifecycle.PhaseRunning {
			// Not running: its next attempt starts with its allocation.
			if c.handle == nil {
				r.actuated[c.spec.Name] = want
			} else {
				restarting = true
			}
			continue
		}
		if allocation.SameResources(r.actuated[c.spec.Name], want) {
			continue
		}
		if allocation.NeedsRestart(c.spec, r.actuated[c.spec.Name], want) {
			w.apply(ctx, pod, c, lifecycle.Event{Kind: lifecycle.EvResizeRestart, At: now, Grace: w.grace(pod)})
			restarting, restarted = true, true
			continue
		}
		inPlace = append(inPlace, c)
	}
	podChanged := !equalPodResources(r.actuatedPod, r.alloc.Pod)
	if len(inPlace) > 0 || podChanged {
		if err := w.resizeInPlace(allocated, inPlace); err != nil {
			if r.inProgress.Reason != corev1.PodReasonError || r.inProgress.Message != err.Error() {
				c := *r.inProgress
				c.Reason, c.Message = corev1.PodReasonError, err.Error()
				r.inProgress = &c
				w.agent.event(pod, corev1.EventTypeWarning, events.ResizeError, events.PodResizeErrorMsg(logger, allocated, c.ObservedGeneration, err.Error()))
			}
			logger.V(2).Info("Pod resize not actuated", "pod", klog.KObj(pod), "err", err)
			r.retry = now.Add(resizeRetry)
			return true
		}
		for _, c := range inPlace {
			r.actuated[c.spec.Name] = r.alloc.Containers[c.spec.Name]
		}
		r.actuatedPod = r.alloc.Pod.DeepCopy()
	}
	if restarting {
		// Done once the restarted containers run with their allocation.
		r.retry = time.Time{}
		return restarted || len(inPlace) > 0 || podChanged
	}
	gen := r.inProgress.ObservedGeneration
	r.inProgress, r.retry = nil, time.Time{}
	logger.V(2).Info("Pod resize completed", "pod", klog.KObj(pod), "generation", gen)
	w.agent.event(pod, corev1.EventTypeNormal, events.ResizeCompleted, events.PodResizeCompletedMsg(logger, allocated, gen))
	return true
}

// resizeInPlace writes the allocation of the pod (allocated: the pod
// with its allocated resources) into its cgroup and those of the running
// containers in inPlace. Where the agent enforces no limits there is
// nothing to write. A memory limit below what is used now is refused
// before anything is written, with the kubelet's message.
func (w *worker) resizeInPlace(allocated *corev1.Pod, inPlace []*container) error {
	a := w.agent
	if !a.enforcesLimits() {
		return nil
	}
	type update struct {
		h runtime.Resizer
		c *container
	}
	var updates []update
	for _, c := range inPlace {
		h, ok := c.handle.(runtime.Resizer)
		if !ok || !h.Resizable() {
			continue
		}
		if lim, ok := c.spec.Resources.Limits[corev1.ResourceMemory]; ok {
			if used, err := h.MemoryUsage(); err == nil && used > lim.Value() {
				return fmt.Errorf("attempting to set container %q memory limit (%d) below current usage (%d)", c.spec.Name, lim.Value(), used)
			}
		}
		updates = append(updates, update{h, c})
	}
	before := w.resizes.alloc
	before.Containers = w.resizes.actuated
	before.Pod = w.resizes.actuatedPod
	oldConfig, newConfig := a.cgroups.PodConfig(before.Apply(allocated)), a.cgroups.PodConfig(allocated)
	if newConfig.Memory != nil && *newConfig.Memory > 0 {
		if used, err := a.cgroups.PodMemoryUsage(allocated); err == nil && used > *newConfig.Memory {
			return fmt.Errorf("attempting to set pod memory limit (%d) below current usage (%d)", *newConfig.Memory, used)
		}
	}
	if err := a.cgroups.SetPodConfig(allocated, cgroup.Widest(oldConfig, newConfig)); err != nil {
		return fmt.Errorf("updating the pod's cgroup: %w", err)
	}
	var errs []error
	for _, u := range updates {
		if err := u.h.UpdateResources(cgroup.ContainerResources(u.c.spec, a.cgroups.Unified())); err != nil {
			errs = append(errs, fmt.Errorf("updating the cgroup of container %q: %w", u.c.spec.Name, err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := a.cgroups.SetPodConfig(allocated, newConfig); err != nil {
		return fmt.Errorf("updating the pod's cgroup: %w", err)
	}
	return nil
}

// equalPodResources compares pod-level resources by value.
func equalPodResources(a, b *corev1.ResourceRequirements) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return allocation.SameResources(*a, *b)
}
