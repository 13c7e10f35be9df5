package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"jobkeeper.dev/jobkeeper/pkg/images"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/allocation"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/binder"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/imagemanager"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/lifecycle"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/podconfig"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/status"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/volume"
)

// container is the worker's record of one container. It is owned by the
// worker goroutine, except what setLogState copies into logState.
type container struct {
	// spec is the container's spec.
	spec *corev1.Container
	// info are the fixed facts transition needs.
	info lifecycle.ContainerInfo
	// state is the lifecycle state; only apply changes it.
	state lifecycle.ContainerState
	// handle is the running attempt, nil when none runs.
	handle runtime.Handle
	// user is who the running or last attempt runs as, as the runtime
	// reported it; nil when it did not.
	user *runtime.ContainerUser
	// stopProbe ends the running attempt's probes; nil when none run.
	stopProbe context.CancelFunc
	// stopHook ends the running attempt's lifecycle hook; nil when none
	// runs.
	stopHook context.CancelFunc
	// pull is the image pull the container waits for; nil when none.
	pull *imagemanager.PullState
	// image is the image of the running or last attempt (image mode).
	image runImage
	// volumeLayers are the layers of the image volumes it mounts, by
	// volume name, for the attempt being started (imagevolumes.go);
	// waitsForVolume names the image volume it waits for, if any.
	volumeLayers   map[string][]string
	waitsForVolume string
	// waitsForSandbox is set while its pod's network could not be made:
	// it waits for the retry, even if a pull of its finishes meanwhile.
	waitsForSandbox bool
	// api is the running attempt the API showed when the worker was
	// created, until recover has decided what became of it.
	api *apiRun
}

// view returns the status view of the container. While its postStart hook
// runs the container shows as it did before the attempt started: the
// kubelet writes no status while its sync waits for the hook.
func (c *container) view() status.ContainerView {
	s := c.state
	if s.Phase == lifecycle.PhaseStarting {
		s.Phase, s.Started, s.Ready, s.ContainerID, s.Ran = lifecycle.PhaseWaiting, false, false, "", s.Last != nil
		switch {
		case s.Last != nil && s.Last.Reason == lifecycle.ReasonRestartingAllContainers:
			// Restarted in place: the restart was counted already.
			s.ContainerID = ""
		case s.Last != nil:
			s.Attempt, s.ContainerID = s.Attempt-1, s.Last.ContainerID
		}
	}
	return status.ContainerView{
		Name:         c.spec.Name,
		Image:        c.image.statusName(c.spec.Image),
		ImageID:      c.image.id,
		Kind:         c.info.Kind,
		Running:      s.Active(),
		Started:      s.Started,
		Ready:        s.Ready,
		StartedAt:    s.StartedAt,
		ContainerID:  s.ContainerID,
		RestartCount: s.RestartCount(),
		Last:         s.Last,
		Prev:         s.Prev,
		Final:        s.Phase == lifecycle.PhaseExited,
		EverRan:      s.Ran,
		WaitReason:   s.WaitReason,
		WaitMessage:  s.WaitMessage,
		User:         c.user,
		Resources:    c.spec.Resources,
		Allocated:    c.spec.Resources.Requests,
	}
}

// userOf is who h's attempt runs as, if its runtime says.
func userOf(h runtime.Handle) *runtime.ContainerUser {
	if r, ok := h.(runtime.UserReporter); ok {
		return r.User()
	}
	return nil
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

// worker runs one pod: it gathers what happened to the pod's containers
// (exits, probe results, deletion, deadline), feeds it to the lifecycle
// (transition, planPod) and carries out the resulting actions. The worker
// goroutine alone mutates the containers; other goroutines only hand it
// the latest pod and poke it. The lifecycle is drawn in doc.go.
type worker struct {
	// agent gives access to the runtime, the status manager and the clock.
	agent *Agent

	// mu guards pod, logs, probeResults and hookResults.
	mu sync.Mutex
	// pod is the latest pod seen in the API.
	pod *corev1.Pod
	// logs is the per-container state for the log endpoint.
	logs map[string]logState
	// probeResults are probe outcomes not yet applied, by container and
	// probe.
	probeResults map[probeKey]probeResult
	// hookResults are hook outcomes not yet applied, by container.
	hookResults map[string]hookResult

	// wake is poked whenever something may have changed.
	wake chan struct{}
	// cancel stops the worker (pod removed from the API, agent stopping).
	cancel context.CancelFunc
	// done is closed when the worker goroutine returned.
	done chan struct{}
	// finished is closed when the pod reached a terminal state here.
	finished chan struct{}

	// inits and containers are the pod's containers, ephemerals its
	// ephemeral containers as far as the worker has seen them (worker
	// goroutine only).
	inits, containers, ephemerals []*container
	// startTime is when the pod was accepted.
	startTime time.Time
	// stopping is set when the pod must stop for good (deletion, deadline).
	stopping bool
	// stopDeadline is when the grace period of a finishing pod runs out;
	// zero until the pod finishes.
	stopDeadline time.Time
	// reason and message explain why the pod stopped.
	reason, message string
	// restartingAll is set while the pod restarts its containers in place
	// (restartall.go); resumeRestartAll when the API showed it restarting
	// as the worker was made (the agent restarted meanwhile).
	restartingAll, resumeRestartAll bool
	// restartAt is when the restart in place may start the containers
	// again (the back-off of the container that asked for it).
	restartAt time.Time
	// showThenGoOn makes run write the status advance left and call
	// advance again at once: a state that must reach the API even when
	// the next step follows without waiting.
	showThenGoOn bool
	// nodeShutdown is the node shutdown asked of the worker (guarded by
	// mu), nil if none; disrupted is set once the worker acts on it, and
	// graceCap then caps the pod's grace period.
	nodeShutdown *shutdownPlan
	disrupted    bool
	graceCap     time.Duration
	// lastStatus is the last status handed to the status manager.
	lastStatus *corev1.PodStatus
	// volImages are the pod's image volumes' images, by volume name
	// (worker goroutine only; imagevolumes.go).
	volImages map[string]*volumeImage

	// resizes are the pod's allocation and its in-place resizes
	// (resize.go).
	resizes resizeState
	// requests is what the pod is allocated of the node (guarded by the
	// agent's mu: the binder reads it).
	requests binder.Requests
	// reserved is what the pod counts for when the binder places others
	// (binder.BoundPodRequests, at least requests; guarded by the agent's
	// mu).
	reserved binder.Requests
	// released is true once the pod no longer counts against the node's
	// capacity (guarded by the agent's mu).
	released bool
	// netns and podIP are the pod's network namespace file and address,
	// once it has them (a pod with a network of its own, podnetwork.go);
	// portsMapped once its host ports are.
	netns, podIP string
	portsMapped  bool
}

// uid is the worker's pod's UID.
func (w *worker) uid() types.UID { return w.currentPod().UID }

// newWorker creates the worker of pod, restoring state from the pod's
// status. What became of the containers the API shows running (the agent
// restarted) is decided when the worker starts (recover).
func newWorker(a *Agent, pod *corev1.Pod) *worker {
	w := &worker{
		agent:        a,
		pod:          pod,
		logs:         map[string]logState{},
		probeResults: map[probeKey]probeResult{},
		hookResults:  map[string]hookResult{},
		wake:         make(chan struct{}, 1),
		done:         make(chan struct{}),
		finished:     make(chan struct{}),
		resizes:      restoreResize(pod),
	}
	// The containers run with what they are allocated, which a pending
	// resize does not change.
	spec := pod
	if !allocation.FromSpec(pod).Equal(w.resizes.alloc) {
		spec = w.resizes.alloc.Apply(pod)
	}
	w.requests = binder.PodRequests(spec)
	w.reserved = binder.BoundPodRequests(pod).Max(w.requests)
	now := a.clock.Now()
	w.startTime = now
	if pod.Status.StartTime != nil {
		w.startTime = pod.Status.StartTime.Time
	}
	mainRan := false
	for _, st := range pod.Status.ContainerStatuses {
		if wt := st.State.Waiting; wt != nil && wt.Reason == lifecycle.ReasonRestartingAllContainers {
			// Reset by a restart in place: it runs again after the
			// init containers.
			continue
		}
		mainRan = mainRan || st.RestartCount > 0 || st.State.Running != nil || st.State.Terminated != nil || st.LastTerminationState.Terminated != nil
	}
	for i := range spec.Spec.InitContainers {
		w.inits = append(w.inits, restoreContainer(pod, &spec.Spec.InitContainers[i], true, pod.Status.InitContainerStatuses, mainRan, now))
	}
	for i := range spec.Spec.Containers {
		w.containers = append(w.containers, restoreContainer(pod, &spec.Spec.Containers[i], false, pod.Status.ContainerStatuses, mainRan, now))
	}
	w.addEphemerals(pod, now)
	w.resumeRestartAll = restartingInAPI(pod)
	for _, c := range w.all() {
		w.logs[c.spec.Name] = logState{attempt: c.state.Attempt, ran: c.state.Ran}
	}
	return w
}

// restoreContainer rebuilds a container record from its API status. A
// sidecar of a pod whose main containers ran counts as initialized.
func restoreContainer(pod *corev1.Pod, spec *corev1.Container, isInit bool, statuses []corev1.ContainerStatus, mainRan bool, now time.Time) *container {
	return restoreContainerOfKind(pod, spec, lifecycle.KindOf(spec, isInit), statuses, mainRan, now)
}

// restoreContainerOfKind is restoreContainer for a container of a known
// kind.
func restoreContainerOfKind(pod *corev1.Pod, spec *corev1.Container, kind lifecycle.ContainerKind, statuses []corev1.ContainerStatus, mainRan bool, now time.Time) *container {
	c := &container{spec: spec, info: lifecycle.ContainerInfo{
		Name:    spec.Name,
		Kind:    kind,
		Restart: lifecycle.RestartPolicyOf(pod, spec),
		PodRef:  fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID),
	}}
	c.state.Initialized = c.info.Kind == lifecycle.KindSidecar && mainRan
	var st *corev1.ContainerStatus
	for i := range statuses {
		if statuses[i].Name == spec.Name {
			st = &statuses[i]
		}
	}
	if st == nil {
		return c
	}
	s := &c.state
	s.Attempt, s.ContainerID = st.RestartCount, st.ContainerID
	term := st.State.Terminated
	if term == nil {
		term = st.LastTerminationState.Terminated
	}
	if term != nil {
		s.Ran = true
		s.Last = &lifecycle.AttemptResult{ContainerID: term.ContainerID, Result: runtime.Result{ExitCode: term.ExitCode, Signal: term.Signal, Reason: term.Reason, Message: term.Message, StartedAt: term.StartedAt.Time, FinishedAt: term.FinishedAt.Time}}
	}
	if st.State.Running != nil {
		c.api = &apiRun{attempt: st.RestartCount, containerID: st.ContainerID, startedAt: st.State.Running.StartedAt.Time, started: st.Started != nil && *st.Started, ready: st.Ready}
		// Until recover decides, the attempt before it is the last.
		s.Attempt = st.RestartCount - 1
		s.Ran = s.Attempt >= 0
	}
	if wt := st.State.Waiting; wt != nil && wt.Reason == lifecycle.ReasonRestartingAllContainers {
		// Reset by a restart in place, not started since.
		*s = lifecycle.RestoreReset(*s, st.RestartCount)
		return c
	}
	if s.Last != nil {
		s.Phase = lifecycle.PhaseBackOff
		if !lifecycle.ShouldRestart(c.info.Restart, c.info.Kind, s.Last.ExitCode) {
			s.Phase = lifecycle.PhaseExited
		}
	}
	return c
}

// all returns init containers, containers, then ephemeral containers.
func (w *worker) all() []*container {
	out := make([]*container, 0, len(w.inits)+len(w.containers)+len(w.ephemerals))
	return append(append(append(out, w.inits...), w.containers...), w.ephemerals...)
}

// addEphemerals takes on the ephemeral containers of pod the worker has not
// seen yet (kubectl debug adds them to a running pod), restoring each from
// the pod's status as restoreContainer does, and reports whether there were
// any. Ephemeral containers are never removed from a pod's spec.
func (w *worker) addEphemerals(pod *corev1.Pod, now time.Time) bool {
	added := false
	for i := len(w.ephemerals); i < len(pod.Spec.EphemeralContainers); i++ {
		spec := (*corev1.Container)(&pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
		c := restoreContainerOfKind(pod, spec, lifecycle.KindEphemeral, pod.Status.EphemeralContainerStatuses, false, now)
		w.ephemerals = append(w.ephemerals, c)
		w.setLogState(c)
		added = true
	}
	return added
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
	defer w.stopProbes()
	defer w.stopHooks()
	defer w.releaseImages()
	logger := klog.FromContext(ctx)
	w.recover(ctx)
	for {
		next := w.advance(ctx)
		pod := w.currentPod()
		view := w.view()
		st := status.BuildStatus(pod, view, w.agent.clock.Now())
		terminal := status.IsTerminalPhase(st.Phase)
		if w.lastStatus == nil || !equality.Semantic.DeepEqual(w.lastStatus, st) {
			w.lastStatus = st
			w.agent.status.Set(pod, st)
		}
		if w.showThenGoOn && !terminal && ctx.Err() == nil {
			w.showThenGoOn = false
			continue
		}
		if terminal {
			logger.V(2).Info("Pod finished", "pod", klog.KObj(pod), "phase", st.Phase)
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

// view snapshots the containers for the status. A container held up by an
// init container that is not through yet waits with PodInitializing.
func (w *worker) view() status.PodView {
	pod := w.currentPod()
	v := status.PodView{OwnNetwork: w.agent.ownNetwork(pod), PodIP: w.knownPodIP(pod), NodeIP: w.agent.opts.NodeIP, StartTime: w.startTime, Terminal: w.stopping && w.noneRunning(), Reason: w.reason, Message: w.message, Disrupted: w.disrupted,
		RecursiveReadOnly: volume.SupportsRecursiveReadOnly(w.agent.runtime), RestartingAll: w.restartingAll}
	through := true
	hold := func(cv status.ContainerView) status.ContainerView {
		if !through && !cv.Running && cv.Last == nil && cv.WaitReason == "" {
			cv.WaitReason = lifecycle.ReasonPodInitializing
		}
		return cv
	}
	// A running attempt has what was actuated for it, which differs from
	// what is allocated while a resize is in progress.
	actual := func(c *container, cv status.ContainerView) status.ContainerView {
		if r, ok := w.resizes.actuated[c.spec.Name]; ok && c.handle != nil {
			cv.Resources = r
		}
		return cv
	}
	v.ResizeConditions = w.resizes.conditions()
	if w.resizes.alloc.Pod != nil {
		v.PodResources, v.PodAllocated = w.resizes.actuatedPod, w.resizes.alloc.Pod.Requests
	}
	for _, c := range w.inits {
		v.Inits = append(v.Inits, hold(actual(c, c.view())))
		switch c.info.Kind {
		case lifecycle.KindSidecar:
			through = through && c.state.Initialized
		default:
			through = through && c.view().InitSucceeded()
		}
	}
	for _, c := range w.containers {
		v.Containers = append(v.Containers, hold(actual(c, c.view())))
	}
	for _, c := range w.ephemerals {
		v.Ephemerals = append(v.Ephemerals, c.view())
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

// podGrace is the grace period of the pod's termination: the deletion's,
// else the spec's, else the default.
func podGrace(pod *corev1.Pod) time.Duration {
	switch {
	case pod.DeletionGracePeriodSeconds != nil:
		return time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		return time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	default:
		return time.Duration(corev1.DefaultTerminationGracePeriodSeconds) * time.Second
	}
}

// grace is the grace period of the pod's termination (podGrace), capped
// by a node shutdown.
func (w *worker) grace(pod *corev1.Pod) time.Duration {
	if w.disrupted {
		return shutdownGrace(pod, w.graceCap)
	}
	return podGrace(pod)
}

// advance moves the pod as far as it can go without waiting and returns
// when it next needs to look again without being poked (zero: no timer
// needed).
func (w *worker) advance(ctx context.Context) time.Time {
	for {
		progress := w.collectExits(ctx)
		progress = w.collectPulls() || progress
		progress = w.collectProbes(ctx) || progress
		progress = w.collectHooks(ctx) || progress
		pod := w.currentPod()
		now := w.agent.clock.Now()
		progress = w.addEphemerals(pod, now) || progress
		progress = w.resize(ctx, pod, now) || progress
		if p := w.shutdownRequested(); p != nil && !w.disrupted {
			// The node shuts down, or evicts the pod: it stops for
			// good, as a disruption (shutdown.go, eviction.go).
			w.disrupted, w.graceCap, w.stopping = true, p.grace, true
			w.reason, w.message = p.reason, p.message
			if end := now.Add(w.grace(pod)); w.stopDeadline.IsZero() || end.Before(w.stopDeadline) {
				w.stopDeadline = end
			}
		}
		if !w.stopping {
			if pod.DeletionTimestamp != nil {
				w.stopping = true
				if end := now.Add(w.grace(pod)); !w.stopDeadline.IsZero() && end.Before(w.stopDeadline) {
					w.stopDeadline = end
				}
			} else if d := pod.Spec.ActiveDeadlineSeconds; d != nil && !now.Before(w.startTime.Add(time.Duration(*d)*time.Second)) {
				w.stopping = true
				w.reason, w.message = lifecycle.ReasonDeadlineExceeded, lifecycle.MessageDeadlineExceeded
				w.agent.event(pod, corev1.EventTypeNormal, lifecycle.ReasonDeadlineExceeded, lifecycle.MessageDeadlineExceeded)
			}
		}
		if w.stopping {
			// A pod stopping for good does not restart.
			w.restartingAll = false
		} else if underway, begun, at := w.restartAll(ctx, pod, now); begun {
			// The status shows the restart before anything starts
			// again, even when every container had stopped.
			w.showThenGoOn = true
			return time.Time{}
		} else if underway {
			// Nothing starts until every container stopped and the
			// back-off allows.
			if !progress {
				return w.earlierDeadline(pod, at)
			}
			continue
		}
		all := w.all()
		in := lifecycle.PlanInput{Kinds: make([]lifecycle.ContainerKind, len(all)), States: make([]lifecycle.ContainerState, len(all)), Now: now}
		for i, c := range all {
			in.Kinds[i], in.States[i] = c.info.Kind, c.state
		}
		in.Finishing = lifecycle.PodFinishing(in.Kinds, in.States, w.stopping)
		if in.Finishing && w.stopDeadline.IsZero() {
			w.stopDeadline = now.Add(w.grace(pod))
		}
		in.StopDeadline = w.stopDeadline
		plan := lifecycle.PlanPod(in)
		for _, i := range plan.Stop {
			grace := w.grace(pod)
			if all[i].info.Kind == lifecycle.KindSidecar {
				grace = w.stopDeadline.Sub(now)
				if pg := w.grace(pod); grace < lifecycle.MinStopGrace {
					grace = min(lifecycle.MinStopGrace, pg)
				}
			}
			w.apply(ctx, pod, all[i], lifecycle.Event{Kind: lifecycle.EvStop, At: now, Grace: grace})
		}
		for _, i := range plan.Start {
			w.start(ctx, pod, all[i], now)
		}
		if !progress && len(plan.Stop) == 0 && len(plan.Start) == 0 {
			return w.earlierDeadline(pod, plan.Next)
		}
	}
}

// earlierDeadline is next, or the pod's activeDeadlineSeconds if that
// comes first while the pod is not stopping (zero next: none).
func (w *worker) earlierDeadline(pod *corev1.Pod, next time.Time) time.Time {
	if d := pod.Spec.ActiveDeadlineSeconds; d != nil && !w.stopping {
		deadline := w.startTime.Add(time.Duration(*d) * time.Second)
		if next.IsZero() || deadline.Before(next) {
			next = deadline
		}
	}
	return next
}

// apply feeds one event to a container's lifecycle and carries out the
// actions it returns.
func (w *worker) apply(ctx context.Context, pod *corev1.Pod, c *container, ev lifecycle.Event) {
	next, actions := lifecycle.Transition(c.state, c.info, ev)
	c.state = next
	for _, act := range actions {
		switch act.Kind {
		case lifecycle.ActStop:
			if c.handle != nil {
				klog.FromContext(ctx).V(2).Info("Stopping container", "pod", klog.KObj(pod), "container", c.spec.Name, "gracePeriod", act.Grace)
				c.handle.Stop(act.Grace)
			}
		case lifecycle.ActRecord:
			w.agent.containerEvent(pod, c.info, act.EventType, act.Reason, act.Message)
		case lifecycle.ActProbe:
			w.startProbes(ctx, c)
		case lifecycle.ActPostStart:
			w.startHook(ctx, pod, c, lifecycle.HookPostStart, 0)
		case lifecycle.ActPreStop:
			klog.FromContext(ctx).V(2).Info("Running preStop hook", "pod", klog.KObj(pod), "container", c.spec.Name, "gracePeriod", act.Grace)
			w.startHook(ctx, pod, c, lifecycle.HookPreStop, act.Grace)
		}
	}
	if !c.state.Active() {
		w.endProbe(c)
	}
	if c.state.Hook == lifecycle.HookNone {
		w.endHook(c)
	}
	w.setLogState(c)
}

// collectExits delivers the ends of running attempts.
func (w *worker) collectExits(ctx context.Context) bool {
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
		res := w.agent.terminationMessage(ctx, pod, c, c.handle.Result())
		c.handle, progress = nil, true
		w.apply(ctx, pod, c, lifecycle.Event{Kind: lifecycle.EvExited, At: res.FinishedAt, Result: res})
	}
	return progress
}

// start starts one attempt of c and feeds the outcome to its lifecycle:
// evConfigFailed when the attempt cannot be configured (the container stays
// waiting and retries), evStartFailed when the runtime cannot start it
// (a finished attempt), evStarted otherwise.
func (w *worker) start(ctx context.Context, pod *corev1.Pod, c *container, now time.Time) {
	logger := klog.FromContext(ctx)
	// As the kubelet: the pod's sandbox (its network, so that it has its
	// address even while an image cannot be pulled), the image volumes,
	// then the container's image.
	c.waitsForVolume = ""
	c.waitsForSandbox = !w.ensureNetwork(ctx, pod, c, now)
	if c.waitsForSandbox {
		return
	}
	var img *images.Image
	var wait *imageWait
	c.volumeLayers, wait = w.imageVolumesFor(ctx, pod, c, now)
	if wait == nil {
		img, wait = w.imageFor(ctx, pod, c, now)
	}
	if wait != nil {
		w.apply(ctx, pod, c, lifecycle.Event{Kind: lifecycle.EvImageWait, At: now, Reason: wait.reason, Message: wait.message, Retry: wait.retry})
		return
	}
	if reason, msg := w.agent.ephemeralRefusal(pod, c); reason != "" {
		// Added after the pod was admitted (kubectl debug --profile):
		// it never runs, and never restarts.
		w.apply(ctx, pod, c, lifecycle.Event{Kind: lifecycle.EvStartFailed, At: now, Result: runtime.Result{ExitCode: 128, Reason: reason, Message: msg, FinishedAt: now}})
		return
	}
	attempt := c.state.NextAttempt()
	// The container runs with what it is allocated (a pending resize
	// changes nothing yet), and with its pod's address.
	allocated := w.withPodIP(w.resizes.alloc.Apply(pod))
	spec, err := w.agent.containerSpec(ctx, allocated, c, img)
	if err == nil && w.agent.ownNetwork(pod) {
		spec.NetworkNamespace = w.netns
	}
	if err == nil {
		spec.PIDNamespace, spec.PIDTarget, err = w.pidNamespaceFor(pod, c)
	}
	if err == nil {
		spec.Attempt, spec.GracePeriod = attempt, podGrace(pod)
		err = w.agent.prepareAttempt(&spec, attempt)
	}
	if err == nil {
		err = w.agent.cgroupFor(allocated, c.spec, &spec)
	}
	if err == nil {
		var m *runtime.Mount
		if m, err = w.agent.terminationMount(&spec, c.spec); m != nil {
			spec.Mounts = append(spec.Mounts, *m)
		}
	}
	if err != nil {
		ev := lifecycle.Event{Kind: lifecycle.EvConfigFailed, At: now, Message: err.Error()}
		var ce *podconfig.CreateError
		if errors.As(err, &ce) {
			ev.Reason = podconfig.ReasonCreateContainerError
		}
		w.apply(ctx, pod, c, ev)
		return
	}
	if img == nil {
		w.agent.imageEvent(pod, c)
	}
	h, err := w.agent.runtime.Start(ctx, spec)
	if err != nil {
		var se *runtime.StartError
		res := runtime.Result{ExitCode: 128, Reason: "StartError", Message: err.Error(), FinishedAt: now}
		if errors.As(err, &se) {
			res.Reason, res.Message = se.Reason, se.Message
		}
		if res.Reason == lifecycle.ReasonCreateContainerConfigError {
			// A volume mount the runtime could not resolve inside its
			// volume: the container waits, as for any configuration
			// error, and is tried again.
			w.apply(ctx, pod, c, lifecycle.Event{Kind: lifecycle.EvConfigFailed, At: now, Message: res.Message})
			return
		}
		logger.V(2).Info("Container failed to start", "pod", klog.KObj(pod), "container", c.spec.Name, "reason", res.Reason, "message", res.Message)
		w.apply(ctx, pod, c, lifecycle.Event{Kind: lifecycle.EvStartFailed, At: now, Result: res})
		return
	}
	id := runtimeContainerID(w.agent.runtime.Name(), pod.UID, c.spec.Name, attempt, h.PID())
	probes, hooks := w.probesOf(pod, c, h), w.hooksOf(pod, c, h)
	c.handle, c.user = h, userOf(h)
	w.resizeStarted(c)
	logger.V(2).Info("Container started", "pod", klog.KObj(pod), "container", c.spec.Name, "attempt", attempt, "pid", h.PID())
	w.apply(ctx, pod, c, lifecycle.Event{Kind: lifecycle.EvStarted, At: now, ContainerID: id, Probes: probes, Hooks: hooks})
	go func() {
		<-h.Done()
		w.poke()
	}()
}

// setLogState publishes a container's state for the log endpoint.
func (w *worker) setLogState(c *container) {
	st := logState{attempt: c.state.Attempt, ran: c.state.Ran, running: c.handle != nil}
	if st.running {
		st.handle = c.handle
	}
	w.mu.Lock()
	w.logs[c.spec.Name] = st
	w.mu.Unlock()
}

// removePodDir deletes everything the pod left on disk.
func removePodDir(dir string) error {
	// A memory-backed emptyDir is a tmpfs mounted there.
	if err := volume.UnmountVolumes(dir); err != nil {
		return fmt.Errorf("removing pod directory: %w", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing pod directory: %w", err)
	}
	return nil
}

// terminationMessage completes the result of c's attempt that just ended
// with its termination message (withTerminationMessage), read from the
// files of that attempt (c.state.attempt) on a runtime that keeps them on
// this host.
func (a *Agent) terminationMessage(ctx context.Context, pod *corev1.Pod, c *container, res runtime.Result) runtime.Result {
	return a.terminationMessageOf(ctx, pod, c, c.state.Attempt, res)
}

// terminationMessageOf is terminationMessage for attempt of c (one that
// ended while the agent was away included).
func (a *Agent) terminationMessageOf(ctx context.Context, pod *corev1.Pod, c *container, attempt int32, res runtime.Result) runtime.Result {
	if _, host := a.runtime.(runtime.HostDirs); !host {
		return res
	}
	file := ""
	if c.spec.TerminationMessagePath != "" && a.isolated() {
		file = a.terminationFile(pod.UID, c.spec.Name, attempt)
	}
	logPath := a.logPath(pod.UID, c.spec.Name, attempt)
	return status.WithTerminationMessage(res, c.spec, file, func() (string, error) { return status.LogTail(ctx, logPath) })
}
