package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/klog/v2"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// container is the worker's record of one container. It is owned by the
// worker goroutine, except the fields copied into logState.
type container struct {
	// spec is the container's spec.
	spec *corev1.Container
	// isInit is true for init containers.
	isInit bool
	// handle is the running attempt, nil when none runs.
	handle runtime.Handle
	// stopping is true once Stop was called on handle.
	stopping bool
	// attempt is the number of the current or last attempt (0 = first).
	attempt int32
	// ran is true once an attempt was made (the first one is attempt 0).
	ran bool
	// startedAt is when the running attempt started.
	startedAt time.Time
	// containerID identifies the current or last attempt.
	containerID string
	// last is the last finished attempt.
	last *runtime.Result
	// prev is the attempt that finished before last.
	prev *runtime.Result
	// final is true when the container will not run again.
	final bool
	// notBefore is when a restarting container may start.
	notBefore time.Time
	// backoff is the crash-loop back-off.
	backoff restartBackoff
	// waitReason and waitMessage say why the container is waiting.
	waitReason, waitMessage string
}

// view returns the status view of the container.
func (c *container) view() containerView {
	restarts := c.attempt
	return containerView{
		name:         c.spec.Name,
		image:        c.spec.Image,
		running:      c.handle != nil,
		startedAt:    c.startedAt,
		containerID:  c.containerID,
		restartCount: restarts,
		last:         c.last,
		prev:         c.prev,
		final:        c.final,
		waitReason:   c.waitReason,
		waitMessage:  c.waitMessage,
	}
}

// logState is what the log endpoint needs from a worker.
type logState struct {
	// attempt is the current attempt of the container.
	attempt int32
	// ran is true once an attempt was made.
	ran bool
	// running is true while it runs.
	running bool
	// handle is the running attempt (nil when none runs): exec and attach
	// reach the container through it.
	handle runtime.Handle
}

// worker runs one pod. Its state machine, per container:
//
//	waiting --start--> running --exit--> finished
//	   ^                                    |
//	   +---- restartPolicy says restart ----+ (after back-off)
//
// and for the pod: accepted -> initializing (init containers one at a
// time) -> running (all containers) -> terminal, with "stopping" (deletion
// or active deadline: stop every attempt, grace period, then terminal)
// reachable from every non-terminal state. The worker goroutine alone
// mutates the containers; other goroutines only hand it the latest pod and
// poke it.
type worker struct {
	// agent gives access to the runtime, the status manager and the clock.
	agent *Agent

	// mu guards pod and logs.
	mu sync.Mutex
	// pod is the latest pod seen in the API.
	pod *corev1.Pod
	// logs is the per-container state for the log endpoint.
	logs map[string]logState

	// wake is poked whenever something may have changed.
	wake chan struct{}
	// cancel stops the worker (pod removed from the API, agent stopping).
	cancel context.CancelFunc
	// done is closed when the worker goroutine returned.
	done chan struct{}
	// finished is closed when the pod reached a terminal state here.
	finished chan struct{}

	// inits and containers are the pod's containers (worker goroutine only).
	inits, containers []*container
	// startTime is when the pod was accepted.
	startTime time.Time
	// stopping is set when the pod must stop for good.
	stopping bool
	// reason and message explain why the pod stopped.
	reason, message string
	// lastStatus is the last status handed to the status manager.
	lastStatus *corev1.PodStatus

	// requests is what the pod asks of the node (fixed at creation).
	requests requests
	// released is true once the pod no longer counts against the node's
	// capacity (guarded by the agent's mu).
	released bool
}

// newWorker creates the worker of pod, restoring state from the pod's
// status: a container that the API says was running when the agent stopped
// lost its process, and is treated as a kubelet treats a container lost in
// a node reboot (terminated with ContainerStatusUnknown, then restartPolicy
// decides).
func newWorker(a *Agent, pod *corev1.Pod) *worker {
	w := &worker{
		agent:    a,
		pod:      pod,
		logs:     map[string]logState{},
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
		finished: make(chan struct{}),
		requests: podRequests(pod),
	}
	now := a.clock.Now()
	w.startTime = now
	if pod.Status.StartTime != nil {
		w.startTime = pod.Status.StartTime.Time
	}
	for i := range pod.Spec.InitContainers {
		w.inits = append(w.inits, restoreContainer(pod, &pod.Spec.InitContainers[i], true, pod.Status.InitContainerStatuses, now))
	}
	for i := range pod.Spec.Containers {
		w.containers = append(w.containers, restoreContainer(pod, &pod.Spec.Containers[i], false, pod.Status.ContainerStatuses, now))
	}
	for _, c := range w.all() {
		w.logs[c.spec.Name] = logState{attempt: c.attempt, ran: c.ran}
	}
	return w
}

// restoreContainer rebuilds a container record from its API status.
func restoreContainer(pod *corev1.Pod, spec *corev1.Container, isInit bool, statuses []corev1.ContainerStatus, now time.Time) *container {
	c := &container{spec: spec, isInit: isInit}
	var st *corev1.ContainerStatus
	for i := range statuses {
		if statuses[i].Name == spec.Name {
			st = &statuses[i]
		}
	}
	if st == nil {
		return c
	}
	c.attempt = st.RestartCount
	c.containerID = st.ContainerID
	term := st.State.Terminated
	if term == nil {
		term = st.LastTerminationState.Terminated
	}
	if term != nil {
		c.ran = true
		c.last = &runtime.Result{ExitCode: term.ExitCode, Signal: term.Signal, Reason: term.Reason, Message: term.Message, StartedAt: term.StartedAt.Time, FinishedAt: term.FinishedAt.Time}
	}
	if st.State.Running != nil {
		c.ran = true
		c.last = &runtime.Result{
			ExitCode:   137,
			Reason:     ReasonContainerStatusUnknown,
			Message:    "The container's process was lost when the node agent stopped",
			StartedAt:  st.State.Running.StartedAt.Time,
			FinishedAt: now,
		}
	}
	if c.last != nil {
		c.final = !shouldRestart(pod.Spec.RestartPolicy, isInit, c.last.ExitCode)
	}
	return c
}

// all returns init containers then containers.
func (w *worker) all() []*container {
	out := make([]*container, 0, len(w.inits)+len(w.containers))
	return append(append(out, w.inits...), w.containers...)
}

// update hands the worker the latest pod.
func (w *worker) update(pod *corev1.Pod) {
	w.mu.Lock()
	w.pod = pod
	w.mu.Unlock()
	w.poke()
}

// poke wakes the worker without blocking.
func (w *worker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// currentPod returns the latest pod.
func (w *worker) currentPod() *corev1.Pod {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pod
}

// logStateOf returns the log state of a container.
func (w *worker) logStateOf(name string) (logState, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s, ok := w.logs[name]
	return s, ok
}

// run drives the pod until it is terminal or ctx is done. When ctx ends
// first (agent shutdown, pod gone) running attempts are left to the caller.
func (w *worker) run(ctx context.Context) {
	defer close(w.done)
	logger := klog.FromContext(ctx)
	for {
		next := w.advance(ctx)
		pod := w.currentPod()
		view := w.view()
		status := buildStatus(pod, view, w.agent.clock.Now())
		terminal := status.Phase == corev1.PodSucceeded || status.Phase == corev1.PodFailed
		if w.lastStatus == nil || !equality.Semantic.DeepEqual(w.lastStatus, status) {
			w.lastStatus = status
			w.agent.status.set(pod, status)
		}
		if terminal {
			logger.V(2).Info("Pod finished", "pod", klog.KObj(pod), "phase", status.Phase)
			close(w.finished)
			// Only the log state is needed from now on.
			w.lastStatus = nil
			w.agent.workerFinished(w)
			return
		}
		var timer <-chan time.Time
		stop := func() bool { return false }
		if !next.IsZero() {
			t := w.agent.clock.NewTimer(next.Sub(w.agent.clock.Now()))
			timer, stop = t.C(), t.Stop
		}
		select {
		case <-ctx.Done():
			stop()
			return
		case <-w.wake:
		case <-timer:
		}
		stop()
	}
}

// view snapshots the containers for the status.
func (w *worker) view() podView {
	v := podView{startTime: w.startTime, terminal: w.stopping && w.noneRunning(), reason: w.reason, message: w.message}
	initialized := true
	for _, c := range w.inits {
		cv := c.view()
		if !initialized && !cv.running && cv.last == nil && cv.waitReason == "" {
			cv.waitReason = ReasonPodInitializing
		}
		initialized = initialized && cv.initSucceeded()
		v.inits = append(v.inits, cv)
	}
	for _, c := range w.containers {
		cv := c.view()
		if !initialized && !cv.running && cv.last == nil && cv.waitReason == "" {
			cv.waitReason = ReasonPodInitializing
		}
		v.containers = append(v.containers, cv)
	}
	return v
}

// noneRunning reports whether no attempt runs.
func (w *worker) noneRunning() bool {
	for _, c := range w.all() {
		if c.handle != nil {
			return false
		}
	}
	return true
}

// advance moves the state machine as far as it can go without waiting and
// returns when it next needs to look again without being poked (zero: no
// timer needed).
func (w *worker) advance(ctx context.Context) time.Time {
	for {
		progress := w.collectExits()
		pod := w.currentPod()
		now := w.agent.clock.Now()
		if !w.stopping {
			if pod.DeletionTimestamp != nil {
				w.stopping = true
			} else if d := pod.Spec.ActiveDeadlineSeconds; d != nil && !now.Before(w.startTime.Add(time.Duration(*d)*time.Second)) {
				w.stopping = true
				w.reason, w.message = ReasonDeadlineExceeded, MessageDeadlineExceeded
				w.agent.event(pod, corev1.EventTypeNormal, ReasonDeadlineExceeded, MessageDeadlineExceeded)
			}
		}
		if w.stopping {
			w.stopAll(ctx, pod)
			return time.Time{}
		}
		started, next := w.startDue(ctx, pod, now)
		if !progress && !started {
			if d := pod.Spec.ActiveDeadlineSeconds; d != nil {
				deadline := w.startTime.Add(time.Duration(*d) * time.Second)
				if next.IsZero() || deadline.Before(next) {
					next = deadline
				}
			}
			return next
		}
	}
}

// collectExits records the attempts that ended and decides their restarts.
func (w *worker) collectExits() bool {
	progress := false
	pod := w.currentPod()
	for _, c := range w.all() {
		if c.handle == nil {
			continue
		}
		select {
		case <-c.handle.Done():
		default:
			continue
		}
		res := c.handle.Result()
		c.handle, c.stopping, progress = nil, false, true
		c.prev, c.last = c.last, &res
		w.setLogState(c)
		if w.stopping || !shouldRestart(pod.Spec.RestartPolicy, c.isInit, res.ExitCode) {
			c.final = true
			continue
		}
		c.notBefore = res.FinishedAt.Add(c.backoff.next(res.FinishedAt))
		c.waitReason, c.waitMessage = "", ""
		if c.notBefore.After(res.FinishedAt) {
			c.waitReason = ReasonCrashLoopBackOff
			c.waitMessage = fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", c.notBefore.Sub(res.FinishedAt), c.spec.Name, pod.Name, pod.Namespace, pod.UID)
			w.agent.event(pod, corev1.EventTypeWarning, "BackOff", fmt.Sprintf("Back-off restarting failed container %s in pod %s_%s(%s)", c.spec.Name, pod.Name, pod.Namespace, pod.UID))
		}
	}
	return progress
}

// stopAll stops every running attempt with the pod's grace period and
// marks every other container as done.
func (w *worker) stopAll(ctx context.Context, pod *corev1.Pod) {
	grace := time.Duration(corev1.DefaultTerminationGracePeriodSeconds) * time.Second
	if pod.DeletionGracePeriodSeconds != nil {
		grace = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	} else if pod.Spec.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	for _, c := range w.all() {
		if c.handle == nil {
			c.final = true
			c.waitReason, c.waitMessage = "", ""
			continue
		}
		if !c.stopping {
			c.stopping = true
			klog.FromContext(ctx).V(2).Info("Stopping container", "pod", klog.KObj(pod), "container", c.spec.Name, "gracePeriod", grace)
			w.agent.event(pod, corev1.EventTypeNormal, "Killing", fmt.Sprintf("Stopping container %s", c.spec.Name))
			c.handle.Stop(grace)
		}
	}
}

// startDue starts the containers whose turn has come: init containers one
// at a time in order, then every regular container. It returns whether it
// started (or failed to start) anything, and the earliest back-off expiry.
func (w *worker) startDue(ctx context.Context, pod *corev1.Pod, now time.Time) (bool, time.Time) {
	var next time.Time
	consider := func(c *container) (started bool, busy bool) {
		if c.handle != nil {
			return false, true
		}
		if c.final {
			return false, false
		}
		if c.notBefore.After(now) {
			if next.IsZero() || c.notBefore.Before(next) {
				next = c.notBefore
			}
			return false, true
		}
		retryAt := w.start(ctx, pod, c, now)
		if !retryAt.IsZero() && (next.IsZero() || retryAt.Before(next)) {
			next = retryAt
		}
		return retryAt.IsZero(), true
	}
	for _, c := range w.inits {
		if c.final {
			if code, _ := c.exitCode(); code != 0 {
				return false, time.Time{}
			}
			continue
		}
		started, busy := consider(c)
		if busy {
			return started, next
		}
	}
	any := false
	for _, c := range w.containers {
		started, _ := consider(c)
		any = any || started
	}
	return any, next
}

// exitCode returns the last exit code of a container.
func (c *container) exitCode() (int32, bool) {
	if c.last == nil {
		return 0, false
	}
	return c.last.ExitCode, true
}

// retryConfigError is how long a container whose env cannot be resolved
// waits before the next try.
var retryConfigError = 10 * time.Second

// start starts one attempt of c. It returns a retry time when the attempt
// could not be configured (the container stays waiting), zero otherwise
// (started, or failed to start, which counts as a finished attempt).
func (w *worker) start(ctx context.Context, pod *corev1.Pod, c *container, now time.Time) time.Time {
	logger := klog.FromContext(ctx)
	spec, err := w.agent.containerSpec(ctx, pod, c)
	if err != nil {
		c.waitReason, c.waitMessage = ReasonCreateContainerConfigError, err.Error()
		w.agent.event(pod, corev1.EventTypeWarning, "Failed", fmt.Sprintf("Error: %v", err))
		return now.Add(retryConfigError)
	}
	if c.ran {
		c.attempt++
	}
	spec.Attempt = c.attempt
	if err := w.agent.prepareAttempt(&spec, c.attempt); err != nil {
		c.waitReason, c.waitMessage = ReasonCreateContainerConfigError, err.Error()
		return now.Add(retryConfigError)
	}
	c.ran = true
	c.waitReason, c.waitMessage = "", ""
	w.agent.imageEvent(pod, c.spec)
	h, err := w.agent.runtime.Start(ctx, spec)
	if err != nil {
		var se *runtime.StartError
		res := runtime.Result{ExitCode: 128, Reason: "StartError", Message: err.Error(), FinishedAt: now}
		if errors.As(err, &se) {
			res.Reason, res.Message = se.Reason, se.Message
		}
		logger.V(2).Info("Container failed to start", "pod", klog.KObj(pod), "container", c.spec.Name, "reason", res.Reason, "message", res.Message)
		w.agent.event(pod, corev1.EventTypeWarning, "Failed", fmt.Sprintf("Error: %s: %s", res.Reason, res.Message))
		c.handle = finishedHandle{res}
		w.setLogState(c)
		return time.Time{}
	}
	c.handle = h
	c.startedAt = now
	c.containerID = fmt.Sprintf("%s://%s-%s-%d", w.agent.runtime.Name(), pod.UID, c.spec.Name, c.attempt)
	if pid := h.PID(); pid > 0 {
		c.containerID = w.agent.runtime.Name() + "://" + strconv.Itoa(pid)
	}
	w.setLogState(c)
	logger.V(2).Info("Container started", "pod", klog.KObj(pod), "container", c.spec.Name, "attempt", c.attempt, "pid", h.PID())
	w.agent.event(pod, corev1.EventTypeNormal, "Started", fmt.Sprintf("Started container %s", c.spec.Name))
	go func() {
		<-h.Done()
		w.poke()
	}()
	return time.Time{}
}

// setLogState publishes a container's state for the log endpoint.
func (w *worker) setLogState(c *container) {
	_, ended := c.handle.(finishedHandle)
	st := logState{attempt: c.attempt, ran: c.ran, running: c.handle != nil && !ended}
	if st.running {
		st.handle = c.handle
	}
	w.mu.Lock()
	w.logs[c.spec.Name] = st
	w.mu.Unlock()
}

// finishedHandle is an attempt that ended before it began.
type finishedHandle struct {
	// res is the outcome.
	res runtime.Result
}

// closedChan is always closed.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// PID implements runtime.Handle.
func (finishedHandle) PID() int { return 0 }

// Done implements runtime.Handle.
func (finishedHandle) Done() <-chan struct{} { return closedChan }

// Result implements runtime.Handle.
func (h finishedHandle) Result() runtime.Result { return h.res }

// Stop implements runtime.Handle.
func (finishedHandle) Stop(time.Duration) {}

// removePodDir deletes everything the pod left on disk.
func removePodDir(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing pod directory: %w", err)
	}
	return nil
}
