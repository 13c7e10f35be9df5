package nodeagent

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/lifecycle"
)

// restartAll carries out RestartAllContainers (KEP-5532; beta and on in
// v1.36) as the kubelet does: once a container exits with a rule of that
// action, every init and regular container of the pod is stopped at once
// (no preStop hook) and reset, in the same sandbox with the same volumes;
// while any of them still runs nothing starts and the pod shows
// AllContainersRestarting; then they start again from the first init
// container. Ephemeral containers are left alone. A pod
// that is stopping for good (deleted, past its deadline, evicted) does not
// restart: the caller asks only while it is not.
//
// The container that asked starts again not before its crash-loop
// back-off allows (ContainerState.NotBefore), and so does the restart: a
// container that keeps exiting at once restarts its pod at the back-off's
// pace, not in a tight loop.
//
// It reports whether the restart is under way (nothing may start), whether
// it began just now, and when to look again while it waits out the
// back-off (zero: only an exit can move it).
func (w *worker) restartAll(ctx context.Context, pod *corev1.Pod, now time.Time) (underway, begun bool, next time.Time) {
	if !w.restartingAll {
		trigger := ""
		if w.resumeRestartAll {
			// Begun by the agent before it restarted: the containers it
			// took over are stopped too.
			w.resumeRestartAll, trigger = false, "(before the agent restarted)"
		}
		w.restartAt = time.Time{}
		for _, c := range w.resettable() {
			if !c.state.RestartAll {
				continue
			}
			if trigger == "" {
				trigger = c.spec.Name
			}
			if c.state.NotBefore.After(w.restartAt) {
				w.restartAt = c.state.NotBefore
			}
		}
		if trigger == "" {
			return false, false, time.Time{}
		}
		klog.FromContext(ctx).V(2).Info("Restarting all containers in place", "pod", klog.KObj(pod), "container", trigger, "notBefore", w.restartAt)
		w.restartingAll = true
		for _, c := range w.resettable() {
			w.apply(ctx, pod, c, lifecycle.Event{Kind: lifecycle.EvRestartAll, At: now})
		}
		// Under way until the next look, so the status shows it.
		return true, true, time.Time{}
	}
	for _, c := range w.resettable() {
		if c.state.Active() {
			return true, false, time.Time{}
		}
	}
	if now.Before(w.restartAt) {
		return true, false, w.restartAt
	}
	w.restartingAll = false
	return false, false, time.Time{}
}

// resettable are the containers a restart in place resets, in the order
// the kubelet stops them: regular containers, then init containers.
func (w *worker) resettable() []*container {
	return append(append(make([]*container, 0, len(w.containers)+len(w.inits)), w.containers...), w.inits...)
}

// restartingInAPI reports whether the pod's status shows it restarting its
// containers in place.
func restartingInAPI(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.AllContainersRestarting {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
