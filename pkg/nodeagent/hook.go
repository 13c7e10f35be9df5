package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/lifecycle"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/prober"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// hookUserAgent is the User-Agent of httpGet hooks, the kubelet's.
const hookUserAgent = "kube-lifecycle/1.36"

// unsupportedHook returns why the agent cannot run hook h against an
// attempt whose handle is hd, "" when it can. Only exec hooks need
// anything: a runtime that can run commands in its containers. A handler
// the kubelet cannot run either (tcpSocket, none) is not refused here: it
// fails when run, as the kubelet's.
func unsupportedHook(h *corev1.LifecycleHandler, hd runtime.Handle) string {
	if h.Exec == nil {
		return ""
	}
	if _, ok := hd.(runtime.Execer); !ok {
		return "this runtime cannot run commands in containers"
	}
	return ""
}

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
		if why := unsupportedHook(h, hd); why != "" {
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

// hookRun is one run of a hook's handler against one attempt.
type hookRun struct {
	// handler is the hook.
	handler *corev1.LifecycleHandler
	// container is the container's spec.
	container *corev1.Container
	// podRef names the pod in messages: "name_namespace(uid)".
	podRef string
	// handle is the attempt.
	handle runtime.Handle
	// clock times sleep hooks.
	clock clock.Clock
	// record records an event on the pod.
	record func(eventType, reason, message string)
}

// run runs the handler as the kubelet's handlerRunner does and returns
// the kubelet's failure message with the error; nil when it succeeded.
//   - exec runs the command inside the container (not expanded, no
//     timeout): a non-zero exit code fails;
//   - httpGet sends the request (no timeout): only an error fails, the
//     status code does not count; an HTTPS request answered in plain HTTP
//     is retried with HTTP (LifecycleHTTPFallback event);
//   - sleep waits sleep.seconds; ending early (ctx) fails;
//   - anything else (tcpSocket, deprecated and never supported) fails.
func (r hookRun) run(ctx context.Context) (string, error) {
	h, c := r.handler, r.container
	switch {
	case h.Exec != nil:
		ex, ok := r.handle.(runtime.Execer)
		if !ok {
			err := errors.New(unsupportedHook(h, r.handle))
			return fmt.Sprintf("Cannot run handler: %v", err), err
		}
		out, code, err := prober.ExecCapture(ctx, ex, h.Exec.Command, 0)
		if err == nil && code != 0 {
			err = fmt.Errorf("command '%s' exited with %d: %s", strings.Join(h.Exec.Command, " "), code, out)
		}
		if err != nil {
			return fmt.Sprintf("Exec lifecycle hook (%v) for Container %q in Pod %q failed - error: %v, message: %q", h.Exec.Command, c.Name, r.podRef, err, out), err
		}
		return "", nil
	case h.HTTPGet != nil:
		if err := r.httpGet(ctx); err != nil {
			return fmt.Sprintf("HTTP lifecycle hook (%s) for Container %q in Pod %q failed - error: %v", h.HTTPGet.Path, c.Name, r.podRef, err), err
		}
		return "", nil
	case h.Sleep != nil:
		t := r.clock.NewTimer(time.Duration(h.Sleep.Seconds) * time.Second)
		defer t.Stop()
		select {
		case <-ctx.Done():
			err := errors.New("container terminated before sleep hook finished")
			return fmt.Sprintf("Sleep lifecycle hook (%d) for Container %q in Pod %q failed - error: %v", h.Sleep.Seconds, c.Name, r.podRef, err), err
		case <-t.C():
			return "", nil
		}
	default:
		err := fmt.Errorf("invalid handler: %v", h)
		return fmt.Sprintf("Cannot run handler: %v", err), err
	}
}

// httpGet sends an httpGet hook's request as the kubelet's lifecycle
// client: certificates are not verified, redirects to another host are not
// followed, the answer's status is not looked at, and an HTTPS request that
// got a plain HTTP answer is sent again with HTTP.
func (r hookRun) httpGet(ctx context.Context) error {
	req, err := prober.HTTPRequest(ctx, r.handler.HTTPGet, r.container, hookUserAgent)
	if err != nil {
		return err
	}
	client := prober.HTTPClient(0)
	res, err := client.Do(req)
	discardBody(res)
	var uerr *url.Error
	if err == nil || !errors.As(err, &uerr) || !strings.Contains(uerr.Err.Error(), "server gave HTTP response to HTTPS client") {
		return err
	}
	retry := req.Clone(ctx)
	retry.URL.Scheme = "http"
	retry.Header.Del("Authorization")
	res, herr := client.Do(retry)
	discardBody(res)
	if herr != nil {
		return err
	}
	r.record(corev1.EventTypeWarning, lifecycle.ReasonLifecycleHTTPFallback, fmt.Sprintf("request to HTTPS lifecycle hook %s got HTTP response, retry with HTTP succeeded", retry.URL.Host))
	return nil
}

// discardBody reads up to prober.MaxOutput of an answer and closes it.
func discardBody(res *http.Response) {
	if res == nil {
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, prober.MaxOutput))
	_ = res.Body.Close()
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
	r := hookRun{
		handler: kind.Of(c.spec), container: c.spec, podRef: c.info.PodRef, handle: c.handle, clock: w.agent.clock,
		record: func(eventType, reason, message string) {
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
			msg, err := r.run(ctx)
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
