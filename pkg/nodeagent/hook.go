package nodeagent

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/lifecycle"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/prober"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// hooksOf returns the hooks that run for the attempt hd of c. A hook that
// cannot run here is treated as absent, with a LifecycleHookNotSupported
// event.
func (w *worker) hooksOf(pod *corev1.Pod, c *container, hd runtime.Handle) lifecycle.AttemptHooks {
	var out lifecycle.AttemptHooks
	for _, k := range []lifecycle.HookKind{lifecycle.HookPostStart, lifecycle.HookPreStop} {
		h := k.Of(c.spec)
		if h == nil {
			continue
		}
		if why := prober.UnsupportedHook(h, hd); why != "" {
			w.agent.containerEvent(pod, c.info, corev1.EventTypeWarning, lifecycle.ReasonHookNotSupported, fmt.Sprintf("%s hook of container %s not run: %s", k, c.spec.Name, why))
			continue
		}
		if k == lifecycle.HookPostStart {
			out.PostStart = true
		} else {
			out.PreStop = true
		}
	}
	return out
}

// hookResult is what a hook reports to the worker.
type hookResult struct {
	// attempt is the attempt the hook ran for.
	attempt int32
	// kind is which hook.
	kind lifecycle.HookKind
	// ok is true when it succeeded.
	ok bool
	// abandoned is true when the grace period ended first.
	abandoned bool
	// message is the kubelet's failure message.
	message string
	// at is when it returned.
	at time.Time
}

// startHook runs c's hook of kind in a goroutine; its result reaches the
// worker through hookResults and a poke. With limit set (preStop: the
// grace period) a hook still running once limit passed is abandoned: its
// context ends and it reports abandoned. endHook (the container exited,
// the hook is no longer wanted) ends it without a report.
func (w *worker) startHook(ctx context.Context, pod *corev1.Pod, c *container, kind lifecycle.HookKind, limit time.Duration) {
	w.endHook(c)
	ctx, cancel := context.WithCancel(ctx)
	c.stopHook = cancel
	info := c.info
	r := prober.HookRun{
		Handler: kind.Of(c.spec), Container: c.spec, PodRef: c.info.PodRef, Handle: c.handle, Clock: w.agent.clock, PodIP: w.knownPodIP(pod),
		Record: func(eventType, reason, message string) {
			w.agent.containerEvent(w.currentPod(), info, eventType, reason, message)
		},
	}
	name, attempt, clk := c.spec.Name, c.state.Attempt, w.agent.clock
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod), "container", name, "hook", kind)
	var timeout <-chan time.Time
	var stopTimer func() bool
	if limit > 0 {
		t := clk.NewTimer(limit)
		timeout, stopTimer = t.C(), t.Stop
	}
	go func() {
		if stopTimer != nil {
			defer stopTimer()
		}
		type outcome struct {
			msg string
			err error
		}
		done := make(chan outcome, 1)
		go func() {
			msg, err := r.Run(ctx)
			done <- outcome{msg, err}
		}()
		res := hookResult{attempt: attempt, kind: kind}
		select {
		case <-ctx.Done():
			return
		case <-timeout:
			logger.V(2).Info("Hook not completed in grace period", "gracePeriod", limit)
			res.abandoned = true
			cancel()
		case o := <-done:
			if ctx.Err() != nil {
				return
			}
			res.ok, res.message = o.err == nil, o.msg
			if o.err != nil {
				logger.V(1).Info("Hook failed", "err", o.err, "message", o.msg)
			}
		}
		res.at = clk.Now()
		w.mu.Lock()
		w.hookResults[name] = res
		w.mu.Unlock()
		w.poke()
	}()
}

// endHook ends c's hook, if one runs.
func (w *worker) endHook(c *container) {
	if c.stopHook != nil {
		c.stopHook()
		c.stopHook = nil
	}
}

// stopHooks ends every hook (the worker is returning).
func (w *worker) stopHooks() {
	for _, c := range w.all() {
		w.endHook(c)
	}
}

// collectHooks delivers the hook results that arrived, each to the
// attempt and hook it ran for; a stale one is dropped.
func (w *worker) collectHooks(ctx context.Context) bool {
	w.mu.Lock()
	results := w.hookResults
	w.hookResults = map[string]hookResult{}
	w.mu.Unlock()
	if len(results) == 0 {
		return false
	}
	pod := w.currentPod()
	for _, c := range w.all() {
		r, ok := results[c.spec.Name]
		if !ok || r.attempt != c.state.Attempt || r.kind != c.state.Hook {
			continue
		}
		w.endHook(c)
		ev := lifecycle.Event{Kind: lifecycle.EvHookDone, At: r.at, Hook: r.kind, OK: r.ok, Abandoned: r.abandoned, Message: r.message}
		if r.kind == lifecycle.HookPostStart {
			// A failed postStart hook kills the container with the pod's
			// grace period, as the kubelet's.
			ev.Grace = podGrace(pod)
		}
		w.apply(ctx, pod, c, ev)
	}
	return true
}
