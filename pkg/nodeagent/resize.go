package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
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
	// effective are the resources each running attempt's cgroup has: its
	// own, with the pod-level limits it inherits (allocation.Effective).
	effective map[string]corev1.ResourceRequirements
	// decided is the pod generation last decided on.
	decided int64
	// pending and inProgress are the pod's PodResizePending and
	// PodResizeInProgress conditions; nil when it has none.
	pending, inProgress *corev1.PodCondition
	// retry is when a deferred resize or a failed actuation is tried
	// again; zero when none waits.
	retry time.Time
	// restarting are the containers restarted for the resize that have
	// not run again yet; waiting is set while a container to resize is
	// starting or stopping.
	restarting map[string]bool
	waiting    bool
}

// restoreResize rebuilds the resize state of a pod the agent may have run
// before (allocation.Restore), with the resize conditions its status
// shows, as the kubelet's status manager backfills them.
func restoreResize(pod *corev1.Pod) resizeState {
	r := resizeState{alloc: allocation.Restore(pod), actuated: map[string]corev1.ResourceRequirements{}, decided: pod.Generation, restarting: map[string]bool{}}
	r.effective = map[string]corev1.ResourceRequirements{}
	for name, res := range r.alloc.Containers {
		r.actuated[name] = res
		r.effective[name] = allocation.Effective(r.alloc.Pod, res)
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

// reserve updates what the pod counts for when the binder places others:
// as the scheduler counts it from the pod (a resize not yet allocated
// included), and at least what the agent has allocated to it.
func (w *worker) reserve(pod *corev1.Pod) {
	a := w.agent
	a.mu.Lock()
	defer a.mu.Unlock()
	r := binder.BoundPodRequests(pod).Max(w.requests)
	if !w.released {
		a.reservedRequests = a.reservedRequests.Sub(w.reserved).Add(r)
	}
	w.reserved = r
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
	defer w.reserve(pod)
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
	v := allocation.Admit(request, others, a.allocatable)
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
// written in place; the pod's cgroup is widened first and narrowed last
// (once the restarted containers run again), so that it never holds less
// than its containers on the way. The resize is complete once every
// running container has its allocation.
func (w *worker) actuateResize(ctx context.Context, pod *corev1.Pod, now time.Time) bool {
	r := &w.resizes
	logger := klog.FromContext(ctx)
	allocated := r.alloc.Apply(pod)
	var inPlace []*container
	progress := false
	for _, c := range append(append([]*container{}, w.inits...), w.containers...) {
		name := c.spec.Name
		want := r.alloc.Containers[name]
		if r.restarting[name] {
			if c.state.Phase == lifecycle.PhaseExited {
				// It will not run again (the pod finishes).
				delete(r.restarting, name)
			}
			continue
		}
		// Compared as the cgroup has them: a change of the pod-level
		// limits changes a container that sets none of its own.
		will := allocation.Effective(r.alloc.Pod, want)
		if c.handle == nil {
			// Not running: its next attempt starts with its allocation.
			r.actuated[name], r.effective[name] = want, will
			continue
		}
		have := r.effective[name]
		if allocation.SameResources(have, will) {
			continue
		}
		if c.state.Phase != lifecycle.PhaseRunning {
			// Starting or stopping: decided once it runs, or is gone.
			r.waiting = true
			continue
		}
		if allocation.NeedsRestart(c.spec, have, will) {
			if err := w.widenPodCgroup(allocated); err != nil {
				return w.resizeFailed(ctx, pod, allocated, now, err)
			}
			w.apply(ctx, pod, c, lifecycle.Event{Kind: lifecycle.EvResizeRestart, At: now, Grace: w.grace(pod)})
			r.restarting[name] = true
			progress = true
			continue
		}
		inPlace = append(inPlace, c)
	}
	if len(inPlace) > 0 {
		if err := w.widenPodCgroup(allocated); err != nil {
			return w.resizeFailed(ctx, pod, allocated, now, err)
		}
		if err := w.resizeInPlace(allocated, inPlace); err != nil {
			return w.resizeFailed(ctx, pod, allocated, now, err)
		}
		for _, c := range inPlace {
			r.actuated[c.spec.Name] = r.alloc.Containers[c.spec.Name]
			r.effective[c.spec.Name] = allocation.Effective(r.alloc.Pod, r.alloc.Containers[c.spec.Name])
		}
		// What they inherit is the allocation's now.
		r.actuatedPod = nil
		if r.alloc.Pod != nil {
			r.actuatedPod = r.alloc.Pod.DeepCopy()
		}
		progress = true
	}
	if len(r.restarting) > 0 || r.waiting {
		r.waiting = false
		r.retry = time.Time{}
		return progress
	}
	if err := w.narrowPodCgroup(allocated); err != nil {
		return w.resizeFailed(ctx, pod, allocated, now, err)
	}
	r.actuatedPod = nil
	if r.alloc.Pod != nil {
		r.actuatedPod = r.alloc.Pod.DeepCopy()
	}
	gen := r.inProgress.ObservedGeneration
	r.inProgress, r.retry = nil, time.Time{}
	logger.V(2).Info("Pod resize completed", "pod", klog.KObj(pod), "generation", gen)
	w.agent.event(pod, corev1.EventTypeNormal, events.ResizeCompleted, events.PodResizeCompletedMsg(logger, allocated, gen))
	return true
}

// resizeStarted records that a container started with its allocation:
// a restart a resize asked for is done.
func (w *worker) resizeStarted(c *container) {
	r := &w.resizes
	r.actuated[c.spec.Name] = *c.spec.Resources.DeepCopy()
	r.effective[c.spec.Name] = allocation.Effective(r.alloc.Pod, c.spec.Resources)
	delete(r.restarting, c.spec.Name)
}

// resizeFailed records why the resize could not be actuated (the
// PodResizeInProgress condition's reason Error, a ResizeError event) and
// has it tried again.
func (w *worker) resizeFailed(ctx context.Context, pod, allocated *corev1.Pod, now time.Time, err error) bool {
	r := &w.resizes
	logger := klog.FromContext(ctx)
	logger.V(2).Info("Pod resize not actuated", "pod", klog.KObj(pod), "err", err)
	r.retry = now.Add(resizeRetry)
	if r.inProgress.Reason == corev1.PodReasonError && r.inProgress.Message == err.Error() {
		return false
	}
	c := *r.inProgress
	c.Reason, c.Message = corev1.PodReasonError, err.Error()
	r.inProgress = &c
	w.agent.event(pod, corev1.EventTypeWarning, events.ResizeError, events.PodResizeErrorMsg(logger, allocated, c.ObservedGeneration, err.Error()))
	return true
}

// actualPod is the pod with the resources its containers and its cgroup
// have now.
func (w *worker) actualPod(allocated *corev1.Pod) *corev1.Pod {
	r := &w.resizes
	return allocation.Allocation{Containers: r.actuated, Pod: r.actuatedPod}.Apply(allocated)
}

// widenPodCgroup writes into the pod's cgroup the larger of what it has
// and what it is allocated, before a container gets more; nothing where
// limits are not enforced.
func (w *worker) widenPodCgroup(allocated *corev1.Pod) error {
	a := w.agent
	if !a.enforcesLimits() {
		return nil
	}
	old, want := a.cgroups.PodConfig(w.actualPod(allocated)), a.cgroups.PodConfig(allocated)
	if err := a.cgroups.SetPodConfig(allocated, cgroup.Widest(old, want)); err != nil {
		return fmt.Errorf("updating the pod's cgroup: %w", err)
	}
	if err := a.setQoSShare(allocated); err != nil {
		return fmt.Errorf("updating the QoS cgroups: %w", err)
	}
	return nil
}

// narrowPodCgroup writes the pod's allocation into its cgroup once its
// containers have theirs, refusing, as the kubelet does, a memory limit
// below what the pod uses now.
func (w *worker) narrowPodCgroup(allocated *corev1.Pod) error {
	a := w.agent
	if !a.enforcesLimits() {
		return nil
	}
	want := a.cgroups.PodConfig(allocated)
	if want.Memory != nil && *want.Memory > 0 {
		if used, err := a.cgroups.PodMemoryUsage(allocated); err == nil && used > *want.Memory {
			return fmt.Errorf("attempting to set pod memory limit (%d) below current usage (%d)", *want.Memory, used)
		}
	}
	if err := a.cgroups.SetPodConfig(allocated, want); err != nil {
		return fmt.Errorf("updating the pod's cgroup: %w", err)
	}
	return nil
}

// resizeInPlace writes the allocation of the running containers in
// inPlace into their cgroups (the pod's was widened). Where the agent
// enforces no limits there is nothing to write. A memory limit below what
// a container uses now is refused before anything is written, with the
// kubelet's message.
func (w *worker) resizeInPlace(allocated *corev1.Pod, inPlace []*container) error {
	a := w.agent
	if !a.enforcesLimits() {
		return nil
	}
	type update struct {
		h    runtime.Resizer
		name string
		r    *runtimeapi.LinuxContainerResources
	}
	var updates []update
	for _, c := range inPlace {
		h, ok := c.handle.(runtime.Resizer)
		if !ok || !h.Resizable() {
			continue
		}
		r := cgroup.ContainerResources(allocated, c.spec, a.cgroups.Unified())
		if lim := r.MemoryLimitInBytes; lim > 0 {
			if used, err := h.MemoryUsage(); err == nil && used > lim {
				return fmt.Errorf("attempting to set container %q memory limit (%d) below current usage (%d)", c.spec.Name, lim, used)
			}
		}
		updates = append(updates, update{h, c.spec.Name, r})
	}
	var errs []error
	for _, u := range updates {
		if err := u.h.UpdateResources(u.r); err != nil {
			errs = append(errs, fmt.Errorf("updating the cgroup of container %q: %w", u.name, err))
		}
	}
	return errors.Join(errs...)
}

// equalPodResources compares pod-level resources by value.
func equalPodResources(a, b *corev1.ResourceRequirements) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return allocation.SameResources(*a, *b)
}
