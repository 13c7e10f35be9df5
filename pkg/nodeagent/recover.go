package nodeagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/lifecycle"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// A restarted agent is a restarted kubelet, not a rebooted node: the
// containers of a runtime whose attempts outlive the agent
// (runtime.Adopter: the process runtime's durable sandboxes) ran on while
// it was away. Each attempt has a state directory,
// <pod dir>/runtime/<container>/<attempt>; when the worker of a pod starts
// it looks there for the attempts the API may not know about, and decides
// per container (decideRecovery) between taking the running attempt over,
// recording the end of one that exited meanwhile, and, as after a node
// reboot, declaring lost an attempt the API shows running that left
// nothing behind.

// apiRun is what the API showed of a container's running attempt when the
// worker was created.
type apiRun struct {
	// attempt is its restart count.
	attempt int32
	// containerID and startedAt are as the API shows them.
	containerID string
	startedAt   time.Time
	// started and ready are the API's.
	started, ready bool
}

// foundAttempt is one attempt the runtime found on disk.
type foundAttempt struct {
	// attempt is its number (restart count).
	attempt int32
	// adopted is what the runtime found.
	adopted runtime.Adopted
}

// recoveryKind is what happens to a container after an agent restart.
type recoveryKind int

const (
	// recoverNothing: nothing ran that the API does not know about.
	recoverNothing recoveryKind = iota
	// recoverAdopt: the attempt still runs; the agent takes it over.
	recoverAdopt
	// recoverEnded: the attempt ended while the agent was away; its
	// recorded result is the container's last termination.
	recoverEnded
	// recoverLost: the API shows the attempt running but nothing of it is
	// left (a runtime that cannot be re-adopted, a node reboot): it is
	// terminated with ContainerStatusUnknown, as the kubelet reports it.
	recoverLost
)

// recovery is decideRecovery's answer for one container.
type recovery struct {
	// kind is what happens.
	kind recoveryKind
	// ended are the attempts that ended while the agent was away, oldest
	// first, to be recorded before the adoption (recoverAdopt) or as the
	// container's last terminations (recoverEnded).
	ended []foundAttempt
	// adopt is the running attempt (recoverAdopt).
	adopt foundAttempt
	// stale are running attempts older than the newest one: they cannot
	// be (one attempt runs at a time) and are stopped.
	stale []foundAttempt
}

// decideRecovery decides what a restarted agent does with one container.
// api is the running attempt the API shows (nil when it shows none), next
// the first attempt the API does not know about (the running one's number
// when it shows one running, else the number of the attempt after its
// last). found are the attempts from next on that the runtime found, in
// any order. now is when the agent noticed.
func decideRecovery(api *apiRun, found []foundAttempt, now time.Time) recovery {
	var usable []foundAttempt
	for _, f := range found {
		if f.adopted.Found {
			usable = append(usable, f)
		}
	}
	sort.Slice(usable, func(i, j int) bool { return usable[i].attempt < usable[j].attempt })
	if len(usable) == 0 {
		if api != nil {
			return recovery{kind: recoverLost}
		}
		return recovery{kind: recoverNothing}
	}
	newest := usable[len(usable)-1]
	var r recovery
	for _, f := range usable[:len(usable)-1] {
		if f.adopted.Handle != nil {
			r.stale = append(r.stale, f)
			continue
		}
		r.ended = append(r.ended, f)
	}
	if api != nil && usable[0].attempt != api.attempt {
		// The attempt the API shows running left nothing; later ones did.
		r.ended = append([]foundAttempt{{attempt: api.attempt, adopted: runtime.Adopted{Found: true, Result: lostResult(api.startedAt, now)}}}, r.ended...)
	}
	if newest.adopted.Handle != nil {
		r.kind, r.adopt = recoverAdopt, newest
		return r
	}
	r.kind = recoverEnded
	r.ended = append(r.ended, newest)
	return r
}

// ReasonSandboxChanged is the kubelet's event of a pod whose sandbox is
// gone: its containers are killed and started again in a new one.
const ReasonSandboxChanged = "SandboxChanged"

// sandboxChangedMessage is the kubelet's message of ReasonSandboxChanged.
const sandboxChangedMessage = "Pod sandbox changed, it will be killed and re-created."

// networkLostResult is the termination of a running attempt killed because
// its pod's network namespace ended with the agent: SIGKILL's exit code.
func networkLostResult(startedAt, now time.Time) runtime.Result {
	return runtime.Result{
		ExitCode:   137,
		Reason:     runtime.ReasonFor(137),
		Message:    "The container was killed: its pod's network namespace ended with the node agent",
		StartedAt:  startedAt,
		FinishedAt: now,
	}
}

// lostNetworkKillWait bounds the wait for a killed container without its
// network (its sandbox falls back to killing its session after 5 s).
const lostNetworkKillWait = 30 * time.Second

// networkKept says whether a running container found after a restart is
// still in the network namespace its pod has on this agent: the pod's own
// (pinned) one, or for a hostNetwork pod the agent's. netPID is a process
// that stays in the container's namespace (its sandbox's: the container's
// own command may enter another). Without a pod network, or without such
// a process, there is nothing to check; a pod whose namespace is gone has
// lost it.
func (a *Agent) networkKept(pod *corev1.Pod, netPID int) bool {
	if a.opts.PodNetwork == nil || netPID <= 0 {
		return true
	}
	want := a.netNS
	if !pod.Spec.HostNetwork {
		path, _, ok := a.opts.PodNetwork.Lookup(string(pod.UID))
		if !ok {
			return false
		}
		want = a.statNetNS(path)
	}
	if !want.ok {
		// What it should be in cannot be read: nothing to compare with.
		return true
	}
	// A process of another node's user namespace (the last rootless
	// node's) cannot be read: not ours.
	return a.statNetNS("/proc/"+strconv.Itoa(netPID)+"/ns/net") == want
}

// netNSID identifies a network namespace: its nsfs device and inode (as
// lsns and ip netns identify compare them).
type netNSID struct {
	dev, ino uint64
	ok       bool
}

// statNetNS identifies the network namespace of the file at path (a
// /proc/<pid>/ns/net link or a pinned namespace).
func (a *Agent) statNetNS(path string) netNSID {
	if a.opts.statNetNS != nil {
		return a.opts.statNetNS(path)
	}
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return netNSID{}
	}
	return netNSID{dev: st.Dev, ino: st.Ino, ok: true}
}

// ownNetNS identifies the agent's network namespace, read on a thread of
// its own: a thread that entered a pod's namespace and was left so
// (startIn) may be the process's main thread, which /proc/self shows.
func (a *Agent) ownNetNS() netNSID {
	got := make(chan netNSID, 1)
	go func() {
		goruntime.LockOSThread()
		defer goruntime.UnlockOSThread()
		got <- a.statNetNS("/proc/thread-self/ns/net")
	}()
	return <-got
}

// lostResult is the termination of an attempt that vanished with the node.
func lostResult(startedAt, now time.Time) runtime.Result {
	return runtime.Result{
		ExitCode:   137,
		Reason:     lifecycle.ReasonContainerStatusUnknown,
		Message:    "The container's process was lost when the node agent stopped",
		StartedAt:  startedAt,
		FinishedAt: now,
	}
}

// attemptStateDir is the state directory of one attempt of a container.
func (a *Agent) attemptStateDir(uid types.UID, container string, attempt int32) string {
	return filepath.Join(a.podDir(uid), "runtime", container, strconv.Itoa(int(attempt)))
}

// findAttempts asks the runtime about the attempts of a container from
// next on: each state directory there, in order, until one is missing.
func (a *Agent) findAttempts(ctx context.Context, ad runtime.Adopter, uid types.UID, container string, next int32) []foundAttempt {
	var out []foundAttempt
	for n := next; ; n++ {
		dir := a.attemptStateDir(uid, container, n)
		if _, err := os.Stat(dir); err != nil {
			return out
		}
		got, err := ad.Adopt(ctx, dir)
		if err != nil {
			klog.FromContext(ctx).Info("Could not look at a container attempt left by the previous run", "dir", dir, "err", err)
			continue
		}
		out = append(out, foundAttempt{attempt: n, adopted: got})
	}
}

// recover applies decideRecovery to every container of the pod: it runs
// once, when the worker starts.
func (w *worker) recover(ctx context.Context) {
	pod := w.currentPod()
	now := w.agent.clock.Now()
	ad, _ := w.agent.runtime.(runtime.Adopter)
	logger := klog.FromContext(ctx)
	// A container no longer in its pod's network namespace (the rootless
	// node's namespaces end with up) is not adopted: as the kubelet does
	// when a pod's sandbox changed, it is killed, and restarted in a new
	// one as the restart policy says.
	changed := false
	for _, c := range w.all() {
		next := c.state.NextAttempt()
		if c.api != nil {
			next = c.api.attempt
		}
		var found []foundAttempt
		if ad != nil {
			found = w.agent.findAttempts(ctx, ad, pod.UID, c.spec.Name, next)
		}
		r := decideRecovery(c.api, found, now)
		for _, f := range r.stale {
			f.adopted.Handle.Stop(0)
		}
		for _, f := range r.ended {
			id := w.idOf(c, f)
			res := f.adopted.Result
			if res.Reason != lifecycle.ReasonContainerStatusUnknown {
				res = w.agent.terminationMessageOf(ctx, pod, c, f.attempt, res)
			}
			w.apply(ctx, pod, c, lifecycle.Event{Kind: lifecycle.EvEndedAway, At: now, Attempt: f.attempt, ContainerID: id, Result: res})
		}
		switch r.kind {
		case recoverLost:
			res := lostResult(c.api.startedAt, now)
			w.apply(ctx, pod, c, lifecycle.Event{Kind: lifecycle.EvEndedAway, At: now, Attempt: c.api.attempt, ContainerID: c.api.containerID, Result: res})
			logger.V(2).Info("Container lost while the agent was away", "pod", klog.KObj(pod), "container", c.spec.Name)
		case recoverAdopt:
			h := r.adopt.adopted.Handle
			if w.agent.networkKept(pod, r.adopt.adopted.NetPID) {
				w.adopt(ctx, pod, c, r.adopt)
				break
			}
			if !changed {
				changed = true
				w.agent.event(pod, corev1.EventTypeNormal, ReasonSandboxChanged, sandboxChangedMessage)
			}
			h.Stop(0)
			select {
			case <-h.Done():
			case <-ctx.Done():
			case <-time.After(lostNetworkKillWait):
				logger.Info("A container without its network did not end when killed; reported ended", "pod", klog.KObj(pod), "container", c.spec.Name, "pid", h.PID())
			}
			res := networkLostResult(r.adopt.adopted.StartedAt, w.agent.clock.Now())
			w.apply(ctx, pod, c, lifecycle.Event{Kind: lifecycle.EvEndedAway, At: res.FinishedAt, Attempt: r.adopt.attempt, ContainerID: w.idOf(c, r.adopt), Result: res})
			logger.Info("Container killed: its pod's network namespace ended with the node agent", "pod", klog.KObj(pod), "container", c.spec.Name)
		case recoverEnded:
			logger.V(2).Info("Container ended while the agent was away", "pod", klog.KObj(pod), "container", c.spec.Name, "exitCode", c.state.Last.ExitCode)
		}
		c.api = nil
		w.setLogState(c)
	}
}

// idOf is the container ID of a found attempt: the API's for the attempt it
// shows running, else the runtime's name for it.
func (w *worker) idOf(c *container, f foundAttempt) string {
	if c.api != nil && c.api.attempt == f.attempt && c.api.containerID != "" {
		return c.api.containerID
	}
	return runtimeContainerID(w.agent.runtime.Name(), w.currentPod().UID, c.spec.Name, f.attempt, f.adopted.PID)
}

// runtimeContainerID names an attempt as the API shows it.
func runtimeContainerID(rt string, uid types.UID, container string, attempt int32, pid int) string {
	if pid > 0 {
		return rt + "://" + strconv.Itoa(pid)
	}
	return fmt.Sprintf("%s://%s-%s-%d", rt, uid, container, attempt)
}

// adopt takes over a running attempt: the container runs on under the same
// ID and start time, its probes resume, and its end is collected as that
// of an attempt this agent started.
func (w *worker) adopt(ctx context.Context, pod *corev1.Pod, c *container, f foundAttempt) {
	h := f.adopted.Handle
	startedAt := f.adopted.StartedAt
	started, ready := false, false
	if c.api != nil && c.api.attempt == f.attempt {
		startedAt, started, ready = c.api.startedAt, c.api.started, c.api.ready
	}
	w.holdAdoptedImage(pod, c)
	w.agent.volumes.TakeOver(pod)
	c.handle, c.user = h, userOf(h)
	klog.FromContext(ctx).V(2).Info("Container adopted", "pod", klog.KObj(pod), "container", c.spec.Name, "attempt", f.attempt, "pid", h.PID())
	w.apply(ctx, pod, c, lifecycle.Event{Kind: lifecycle.EvAdopted, At: startedAt, Attempt: f.attempt, ContainerID: w.idOf(c, f),
		Probes: w.probesOf(pod, c, h), Hooks: w.hooksOf(pod, c, h), OK: started, Ready: ready})
	go func() {
		<-h.Done()
		w.poke()
	}()
}

// holdAdoptedImage takes a store reference on the image an adopted
// container runs (image mode), as its start did, so that the image's
// garbage collection leaves it alone.
func (w *worker) holdAdoptedImage(pod *corev1.Pod, c *container) {
	p := w.agent.puller
	if p == nil {
		return
	}
	w.holdAdoptedVolumeImages(pod, c)
	if !w.agent.imageMode() {
		// Host mode: the container runs no image.
		return
	}
	for _, st := range append(append([]corev1.ContainerStatus(nil), pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...) {
		if st.Name != c.spec.Name || st.Image == "" {
			continue
		}
		img, err := p.Store.Lookup(st.Image)
		if err != nil {
			return
		}
		c.image.release()
		c.image = runImage{name: st.Image, id: st.ImageID, storeID: img.ID, done: p.Store.Use(img.ID)}
		return
	}
}

// stopLeftovers stops the attempts left running in the directory of a pod
// that is gone from the API, before the directory is removed.
func (a *Agent) stopLeftovers(ctx context.Context, podDir string) {
	ad, ok := a.runtime.(runtime.Adopter)
	if !ok {
		return
	}
	dirs, _ := filepath.Glob(filepath.Join(podDir, "runtime", "*", "*"))
	for _, dir := range dirs {
		got, err := ad.Adopt(ctx, dir)
		if err != nil || got.Handle == nil {
			continue
		}
		klog.FromContext(ctx).V(2).Info("Stopping a container of a pod gone from the API", "dir", dir)
		got.Handle.Stop(0)
		select {
		case <-got.Handle.Done():
		case <-time.After(10 * time.Second):
		}
	}
}
