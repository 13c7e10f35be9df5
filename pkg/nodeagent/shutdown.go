package nodeagent

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/status"
)

// A clean stop of the agent is a graceful node shutdown (KEP-2000), as the
// kubelet's node shutdown manager carries it out: every pod that has not
// finished gets the DisruptionTarget condition (reason
// TerminationByKubelet) with status reason Terminated, its containers are
// stopped with their grace period capped to Options.ShutdownGracePeriod
// (preStop hooks included), and it ends Failed (Succeeded only if it had
// already succeeded). A Job whose podFailurePolicy ignores DisruptionTarget
// does not count these pods as failures. The agent then waits for the
// status writes, at most a few seconds more.

// shutdownPlan is what a worker does when its node stops the pod for
// good: a node shutdown, or an eviction (eviction.go).
type shutdownPlan struct {
	// grace caps the pod's grace period.
	grace time.Duration
	// reason and message are the pod's status reason and message; the
	// message is also its DisruptionTarget condition's.
	reason, message string
}

// shutdownGrace is the grace period of a pod's stop in a node shutdown:
// its own, capped to the shutdown's.
func shutdownGrace(pod *corev1.Pod, capped time.Duration) time.Duration {
	return min(podGrace(pod), capped)
}

// shutdownPods stops every pod that has not finished as a graceful node
// shutdown does, and waits until they are stopped and their status is
// written, or the shutdown grace period (plus a few seconds for the
// writes) is over.
func (a *Agent) shutdownPods(ctx context.Context) {
	logger := klog.FromContext(ctx)
	a.mu.Lock()
	a.shuttingDown = true
	var ws []*worker
	for _, w := range a.workers {
		if !isClosed(w.finished) {
			ws = append(ws, w)
		}
	}
	a.mu.Unlock()
	if len(ws) == 0 {
		return
	}
	grace := a.opts.ShutdownGracePeriod
	logger.Info("Shutting down the node: stopping its pods", "pods", len(ws), "shutdownGracePeriod", grace)
	for _, w := range ws {
		w.shutdown(shutdownPlan{grace: grace, reason: status.ReasonNodeShutdown, message: status.MessageNodeShutdown})
	}
	deadline := time.NewTimer(grace + 2*time.Second)
	defer deadline.Stop()
	for _, w := range ws {
		select {
		case <-w.finished:
		case <-w.done:
		case <-deadline.C:
			logger.Info("Pods still running at the end of the shutdown grace period: killing them")
			return
		}
	}
	if !a.status.WaitWritten(3 * time.Second) {
		logger.Info("Some pod status was not written before the node agent stopped")
	}
}

// shutdown asks the worker to stop its pod for a node shutdown or an
// eviction; the first asked is kept.
func (w *worker) shutdown(p shutdownPlan) {
	w.mu.Lock()
	if w.nodeShutdown == nil {
		w.nodeShutdown = &p
	}
	w.mu.Unlock()
	w.poke()
}

// shutdownRequested returns the node shutdown asked of the worker, nil if
// none.
func (w *worker) shutdownRequested() *shutdownPlan {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.nodeShutdown
}
