package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"jobkeeper.dev/jobkeeper/pkg/images"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/imagemanager"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/lifecycle"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/podconfig"
)

// pullRetryAfterError is how soon after a failed pull the container is
// looked at again: it then reports ImagePullBackOff until the back-off ends,
// as a kubelet's pod worker resyncs shortly after an error.
const pullRetryAfterError = 2 * time.Second

// imageWait says why a container cannot start yet: the lifecycle shows
// reason and message while it waits, and looks again at retry (zero: when
// the pull in flight pokes the worker).
type imageWait struct {
	reason, message string
	retry           time.Time
}

// pullTarget is what an image is resolved for: a container (its image)
// or an image volume of the pod.
type pullTarget struct {
	// requested is the image reference as the spec gives it.
	requested string
	// policy is the spec's pull policy ("": the default for requested).
	policy corev1.PullPolicy
	// pull is the pull in flight for it, if any.
	pull **imagemanager.PullState
	// held is the image it holds a store reference on.
	held *runImage
	// event records an event about it: a container's carries its field
	// path; an image volume's is the pod's, as the kubelet records it.
	event func(eventType, reason, message string)
	// volume is set for an image volume: its "Error: ..." events are the
	// container's that mounts it (imagevolumes.go), not the pod's.
	volume bool
}

// errorEvent records the "Error: <reason>" event of a container that
// cannot get its image.
func (t pullTarget) errorEvent(reason string) {
	if !t.volume {
		t.event(corev1.EventTypeWarning, imagemanager.EventFailed, "Error: "+reason)
	}
}

// imageFor returns the image container c runs, pulling it as its policy
// says, with the kubelet's events; or, when c must wait, why. In host mode
// (or with no image store) there is no image to resolve.
func (w *worker) imageFor(ctx context.Context, pod *corev1.Pod, c *container, now time.Time) (*images.Image, *imageWait) {
	if !w.agent.imageMode() || w.agent.puller == nil {
		return nil, nil
	}
	return w.resolveImage(ctx, pod, pullTarget{
		requested: c.spec.Image, policy: c.spec.ImagePullPolicy, pull: &c.pull, held: &c.image,
		event: func(eventType, reason, message string) {
			w.agent.containerEvent(pod, c.info, eventType, reason, message)
		},
	}, now)
}

// resolveImage returns the image of t, pulling it as its policy says, with
// the kubelet's events; or, when t must wait, why.
func (w *worker) resolveImage(ctx context.Context, pod *corev1.Pod, t pullTarget, now time.Time) (*images.Image, *imageWait) {
	p := w.agent.puller
	requested := t.requested
	// The kubelet names the image with its default tag in pull events.
	image := podconfig.WithDefaultTag(requested)
	if st := *t.pull; st != nil {
		select {
		case <-st.Done:
		default:
			return nil, &imageWait{reason: lifecycle.ReasonContainerCreating, retry: now.Add(imagemanager.PullWaitCheck)}
		}
		*t.pull = nil
		if st.Err == nil {
			p.Forget(pod.UID, image)
			waited := w.agent.clock.Since(st.Asked).Truncate(time.Millisecond)
			t.event(corev1.EventTypeNormal, imagemanager.EventPulled, fmt.Sprintf("Successfully pulled image %q in %v (%v including waiting). Image size: %v bytes.",
				image, st.Took.Truncate(time.Millisecond), waited, st.Img.Size))
			return w.hold(t.held, st.Img, st.Ref, now)
		}
		if ctx.Err() != nil {
			return nil, &imageWait{reason: lifecycle.ReasonContainerCreating, retry: now.Add(imagemanager.PullWaitCheck)}
		}
		msg := st.Err.Error()
		t.event(corev1.EventTypeWarning, imagemanager.EventFailed, fmt.Sprintf("Failed to pull image %q: %s", image, imagemanager.PullAdvice(msg)))
		t.errorEvent(imagemanager.ReasonErrImagePull)
		p.Failed(pod.UID, image, imagemanager.ReasonErrImagePull+": "+msg, now)
		return nil, &imageWait{reason: imagemanager.ReasonErrImagePull, message: msg, retry: now.Add(pullRetryAfterError)}
	}
	ref, err := images.Normalize(requested)
	if err != nil {
		msg := fmt.Sprintf("Failed to apply default image tag %q: %v", requested, err)
		t.event(corev1.EventTypeWarning, imagemanager.EventInspectFailed, msg)
		t.errorEvent(imagemanager.ReasonInvalidImageName)
		return nil, &imageWait{reason: imagemanager.ReasonInvalidImageName, message: msg, retry: now.Add(lifecycle.RetryConfigError)}
	}
	local, err := p.Store.Lookup(ref)
	if err != nil && !errors.Is(err, images.ErrNotFound) {
		msg := fmt.Sprintf("Failed to inspect image %q: %v", requested, err)
		t.event(corev1.EventTypeWarning, imagemanager.EventInspectFailed, msg)
		t.errorEvent("ImageInspectError")
		return nil, &imageWait{reason: "ImageInspectError", message: msg, retry: now.Add(lifecycle.RetryConfigError)}
	}
	policy := t.policy
	if policy == "" {
		policy = podconfig.DefaultPullPolicy(requested)
	}
	// An image the agent pulled is there only for the pods that could
	// pull it (KubeletEnsureSecretPulledImages): for the others it is as
	// if absent, so they pull it with their own credentials, or, under
	// Never, cannot have it.
	present := local != nil && (policy == corev1.PullAlways || p.MayUse(ctx, pod, image, ref, local))
	switch podconfig.DecidePull(policy, present) {
	case podconfig.UseLocal:
		t.event(corev1.EventTypeNormal, imagemanager.EventPulled, fmt.Sprintf("Container image %q already present on machine%s", requested, p.AccessNote()))
		return w.hold(t.held, local, ref, now)
	case podconfig.NeverPulled:
		msg := fmt.Sprintf("Container image %q is not present with pull policy of Never", requested)
		t.event(corev1.EventTypeWarning, imagemanager.ReasonErrImageNeverPull, msg+" (load it with `jobkeeper image load`)")
		t.errorEvent(imagemanager.ReasonErrImageNeverPull)
		return nil, &imageWait{reason: imagemanager.ReasonErrImageNeverPull, message: msg, retry: now.Add(lifecycle.RetryConfigError)}
	}
	if b := p.InBackoff(pod.UID, image, now); b != nil {
		t.event(corev1.EventTypeNormal, imagemanager.EventBackOff, fmt.Sprintf("Back-off pulling image %q", image))
		t.errorEvent(imagemanager.ReasonImagePullBackOff)
		return nil, &imageWait{reason: imagemanager.ReasonImagePullBackOff, message: fmt.Sprintf("Back-off pulling image %q: %s", image, b.Message), retry: b.Until}
	}
	t.event(corev1.EventTypeNormal, imagemanager.EventPulling, fmt.Sprintf("Pulling image %q", image))
	*t.pull = p.Start(ctx, pod, image, ref, w.poke)
	return nil, &imageWait{reason: lifecycle.ReasonContainerCreating, retry: now.Add(imagemanager.PullWaitCheck)}
}

// collectPulls makes the containers whose pull ended due at once (they
// waited for the pull's poke); one waiting for its pod's network waits
// for that retry instead. It reports whether one changed.
func (w *worker) collectPulls() bool {
	progress := false
	now := w.agent.clock.Now()
	volumes := w.volumePullsDone()
	for _, c := range w.all() {
		if !c.state.NotBefore.After(now) || c.waitsForSandbox {
			continue
		}
		if c.waitsForVolume != "" && volumes[c.waitsForVolume] {
			c.state.NotBefore = now
			progress = true
			continue
		}
		if c.pull == nil {
			continue
		}
		select {
		case <-c.pull.Done:
			c.state.NotBefore = now
			progress = true
		default:
		}
	}
	return progress
}

// runImage is the image a container runs and the store reference held for
// it: from the image's resolution until the pod's worker ends, so that image
// garbage collection and `jobkeeper image rm` leave the image of a pod that
// may restart alone (the kubelet's image GC counts the images of exited
// containers as used, too).
type runImage struct {
	// name is the normalized reference, id the imageID; empty in host mode.
	name, id string
	// storeID is the image's ID in the store.
	storeID string
	// done releases the store reference; nil when none is held.
	done func()
}

// statusName is the image containerStatuses[].image reports.
func (r runImage) statusName(spec string) string {
	if r.name == "" {
		return spec
	}
	return r.name
}

// release gives the store reference back (the attempt ended).
func (r *runImage) release() {
	if r.done != nil {
		r.done()
		r.done = nil
	}
}

// hold makes img the image held (a container's or an image volume's),
// holding a store reference on it for the container's or the pod's life,
// and checks that the store still has it (an `image rm` or a garbage
// collection may have come between the look-up and the reference). When
// it is gone, the container waits a moment and the image is resolved
// again, pulled as its policy says.
func (w *worker) hold(held *runImage, img *images.Image, ref string, now time.Time) (*images.Image, *imageWait) {
	store := w.agent.puller.Store
	if held.storeID != img.ID || held.done == nil {
		release := store.Use(img.ID)
		if got, err := store.Lookup(ref); err != nil || got.ID != img.ID {
			release()
			return nil, &imageWait{reason: lifecycle.ReasonContainerCreating, retry: now}
		}
		held.release()
		*held = runImage{name: ref, id: imagemanager.ImageIDOf(img, ref), storeID: img.ID, done: release}
	}
	return img, nil
}

// releaseImages gives back the store references of the pod's containers,
// cancels their pulls in flight and forgets the pod's pull back-offs (the
// worker is ending: the pod finished, was deleted, or the agent stops).
func (w *worker) releaseImages() {
	for _, c := range w.all() {
		c.image.release()
		if c.pull != nil {
			c.pull.Cancel()
		}
	}
	w.releaseVolumeImages()
	if p := w.agent.puller; p != nil {
		p.Forget(w.currentPod().UID, "")
	}
}

// defaultsOf converts an image's config.
func defaultsOf(img *images.Image) podconfig.ImageDefaults {
	if img == nil {
		return podconfig.ImageDefaults{}
	}
	cfg := img.Config
	return podconfig.ImageDefaults{Entrypoint: cfg.Entrypoint, Cmd: cfg.Cmd, Env: cfg.Env, WorkingDir: cfg.WorkingDir, User: cfg.User}
}
