package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"jobkeeper.dev/jobkeeper/pkg/images"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/lifecycle"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/podconfig"
)

// The kubelet's waiting reasons and event reasons of images.
const (
	// ReasonErrImagePull: the last pull failed.
	ReasonErrImagePull = "ErrImagePull"
	// ReasonImagePullBackOff: pulls failed and the next one waits.
	ReasonImagePullBackOff = "ImagePullBackOff"
	// ReasonErrImageNeverPull: the image is absent and the policy is Never.
	ReasonErrImageNeverPull = "ErrImageNeverPull"
	// ReasonInvalidImageName: the image reference cannot be parsed.
	ReasonInvalidImageName = "InvalidImageName"
	// eventPulling, eventPulled, eventFailed, eventBackOff and
	// eventInspectFailed are the kubelet's image event reasons.
	eventPulling, eventPulled, eventFailed, eventBackOff, eventInspectFailed = "Pulling", "Pulled", "Failed", "BackOff", "InspectFailed"
	// eventFailedSecret is the kubelet's event when a pull secret is missing.
	eventFailedSecret = "FailedToRetrieveImagePullSecret"
)

// Image pull back-off, as the kubelet's: 10s doubling to 5m per pod and image.
var (
	// PullBackoffInitial is the wait after the first failed pull.
	PullBackoffInitial = 10 * time.Second
	// PullBackoffMax caps the wait.
	PullBackoffMax = 300 * time.Second
)

// pullRetryAfterError is how soon after a failed pull the container is
// looked at again: it then reports ImagePullBackOff until the back-off ends,
// as a kubelet's pod worker resyncs shortly after an error.
const pullRetryAfterError = 2 * time.Second

// pullWaitCheck is when a container waiting for a pull is looked at again
// if no poke came (the pull's end pokes the worker; this is a safety net).
const pullWaitCheck = time.Minute

// maxParallelPulls bounds the pulls running at once (the kubelet serializes
// them by default; a few at a time keep one slow registry from holding up
// every pod).
const maxParallelPulls = 3

// imagePuller is the agent's image manager: it pulls images into the store
// for pod workers, one pull per reference at a time, and keeps the per pod
// and image pull back-off.
type imagePuller struct {
	// store holds the images.
	store *images.Store
	// agent gives the client, clock and events.
	agent *Agent
	// slots bounds concurrent pulls.
	slots chan struct{}
	// userKeychain is the credentials of the user running the agent (their
	// Docker config), tried after the pod's pull secrets.
	userKeychain authn.Keychain

	// mu guards backoffs.
	mu sync.Mutex
	// backoffs are failed pulls by pod UID and image.
	backoffs map[string]*pullBackoff
}

// pullBackoff is the back-off of one image for one pod.
type pullBackoff struct {
	// delay is the current wait.
	delay time.Duration
	// until is when the next pull may start.
	until time.Time
	// message is the last failure ("ErrImagePull: ...").
	message string
}

// pullState is a pull a container waits for; the worker goroutine owns it,
// the pull goroutine fills img or err before closing done.
type pullState struct {
	// image is the container's image as written in the spec, ref its
	// normalized reference.
	image, ref string
	// cancel ends the pull (the pod's worker ended).
	cancel context.CancelFunc
	// done is closed when the pull ended.
	done chan struct{}
	// img is the pulled image, err why the pull failed.
	img *images.Image
	err error
	// asked is when the pull was asked for; took is how long the pull
	// itself ran (without waiting for a slot).
	asked time.Time
	took  time.Duration
}

// newImagePuller returns the agent's image manager over store.
func newImagePuller(a *Agent, store *images.Store) *imagePuller {
	return &imagePuller{
		store:        store,
		agent:        a,
		slots:        make(chan struct{}, maxParallelPulls),
		userKeychain: authn.DefaultKeychain,
		backoffs:     map[string]*pullBackoff{},
	}
}

// backoffKey names a pod's back-off for an image.
func backoffKey(uid types.UID, image string) string { return string(uid) + "_" + image }

// inBackoff returns the running back-off of a pod's image, nil when none.
func (p *imagePuller) inBackoff(uid types.UID, image string, now time.Time) *pullBackoff {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.backoffs[backoffKey(uid, image)]
	if b == nil || !now.Before(b.until) {
		return nil
	}
	cp := *b
	return &cp
}

// failed records a failed pull and returns the back-off's end.
func (p *imagePuller) failed(uid types.UID, image, message string, now time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	key := backoffKey(uid, image)
	b := p.backoffs[key]
	switch {
	case b == nil:
		b = &pullBackoff{delay: PullBackoffInitial}
		p.backoffs[key] = b
	case b.delay*2 > PullBackoffMax:
		b.delay = PullBackoffMax
	default:
		b.delay *= 2
	}
	b.until, b.message = now.Add(b.delay), message
	return b.until
}

// forget drops the back-offs of a pod (it pulled, or it is gone).
func (p *imagePuller) forget(uid types.UID, image string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if image != "" {
		delete(p.backoffs, backoffKey(uid, image))
		return
	}
	prefix := string(uid) + "_"
	for k := range p.backoffs {
		if strings.HasPrefix(k, prefix) {
			delete(p.backoffs, k)
		}
	}
}

// start begins pulling image for pod in the background; poke is called
// when it ended.
func (p *imagePuller) start(ctx context.Context, pod *corev1.Pod, image, ref string, poke func()) *pullState {
	ctx, cancel := context.WithCancel(ctx)
	st := &pullState{image: image, ref: ref, cancel: cancel, done: make(chan struct{}), asked: p.agent.clock.Now()}
	go func() {
		defer cancel()
		defer poke()
		defer close(st.done)
		select {
		case p.slots <- struct{}{}:
		case <-ctx.Done():
			st.err = ctx.Err()
			return
		}
		defer func() { <-p.slots }()
		keychain := images.MultiKeychain(images.SecretsKeychain(p.pullSecrets(ctx, pod)), p.userKeychain)
		began := p.agent.clock.Now()
		st.img, st.err = p.store.Pull(ctx, ref, images.PullOptions{Keychain: keychain})
		st.took = p.agent.clock.Since(began)
		if st.err != nil {
			klog.FromContext(ctx).V(2).Info("Image pull failed", "pod", klog.KObj(pod), "image", image, "err", st.err)
		}
	}()
	return st
}

// pullSecrets reads the pod's imagePullSecrets; a missing one is an event,
// as the kubelet's, and the pull goes on without it.
func (p *imagePuller) pullSecrets(ctx context.Context, pod *corev1.Pod) []*corev1.Secret {
	var out []*corev1.Secret
	var missing []string
	for _, ref := range pod.Spec.ImagePullSecrets {
		if ref.Name == "" {
			continue
		}
		s, err := p.agent.client.CoreV1().Secrets(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			if !apierrors.IsNotFound(err) {
				klog.FromContext(ctx).Info("Reading an image pull secret failed", "pod", klog.KObj(pod), "secret", ref.Name, "err", err)
			}
			missing = append(missing, fmt.Sprintf("%q", ref.Name))
			continue
		}
		out = append(out, s)
	}
	if len(missing) > 0 {
		p.agent.event(pod, corev1.EventTypeWarning, eventFailedSecret,
			fmt.Sprintf("Unable to retrieve some image pull secrets (%s); attempting to pull the image may not succeed.", strings.Join(missing, ", ")))
	}
	return out
}

// imageWait says why a container cannot start yet: the lifecycle shows
// reason and message while it waits, and looks again at retry (zero: when
// the pull in flight pokes the worker).
type imageWait struct {
	reason, message string
	retry           time.Time
}

// imageFor returns the image container c runs, pulling it as its policy
// says, with the kubelet's events; or, when c must wait, why. In host mode
// (no store) there is no image to resolve.
func (w *worker) imageFor(ctx context.Context, pod *corev1.Pod, c *container, now time.Time) (*images.Image, *imageWait) {
	p := w.agent.puller
	if p == nil {
		return nil, nil
	}
	requested := c.spec.Image
	// The kubelet names the image with its default tag in pull events.
	image := podconfig.WithDefaultTag(requested)
	if st := c.pull; st != nil {
		select {
		case <-st.done:
		default:
			return nil, &imageWait{reason: lifecycle.ReasonContainerCreating, retry: now.Add(pullWaitCheck)}
		}
		c.pull = nil
		if st.err == nil {
			p.forget(pod.UID, image)
			waited := w.agent.clock.Since(st.asked).Truncate(time.Millisecond)
			w.agent.containerEvent(pod, c.info, corev1.EventTypeNormal, eventPulled, fmt.Sprintf("Successfully pulled image %q in %v (%v including waiting). Image size: %v bytes.",
				image, st.took.Truncate(time.Millisecond), waited, st.img.Size))
			return w.hold(c, st.img, st.ref, now)
		}
		if ctx.Err() != nil {
			return nil, &imageWait{reason: lifecycle.ReasonContainerCreating, retry: now.Add(pullWaitCheck)}
		}
		msg := st.err.Error()
		w.agent.containerEvent(pod, c.info, corev1.EventTypeWarning, eventFailed, fmt.Sprintf("Failed to pull image %q: %s", image, pullAdvice(msg)))
		w.agent.containerEvent(pod, c.info, corev1.EventTypeWarning, eventFailed, "Error: "+ReasonErrImagePull)
		p.failed(pod.UID, image, ReasonErrImagePull+": "+msg, now)
		return nil, &imageWait{reason: ReasonErrImagePull, message: msg, retry: now.Add(pullRetryAfterError)}
	}
	ref, err := images.Normalize(requested)
	if err != nil {
		msg := fmt.Sprintf("Failed to apply default image tag %q: %v", requested, err)
		w.agent.containerEvent(pod, c.info, corev1.EventTypeWarning, eventInspectFailed, msg)
		w.agent.containerEvent(pod, c.info, corev1.EventTypeWarning, eventFailed, "Error: "+ReasonInvalidImageName)
		return nil, &imageWait{reason: ReasonInvalidImageName, message: msg, retry: now.Add(lifecycle.RetryConfigError)}
	}
	local, err := p.store.Lookup(ref)
	if err != nil && !errors.Is(err, images.ErrNotFound) {
		msg := fmt.Sprintf("Failed to inspect image %q: %v", requested, err)
		w.agent.containerEvent(pod, c.info, corev1.EventTypeWarning, eventInspectFailed, msg)
		w.agent.containerEvent(pod, c.info, corev1.EventTypeWarning, eventFailed, "Error: ImageInspectError")
		return nil, &imageWait{reason: "ImageInspectError", message: msg, retry: now.Add(lifecycle.RetryConfigError)}
	}
	policy := c.spec.ImagePullPolicy
	if policy == "" {
		policy = podconfig.DefaultPullPolicy(requested)
	}
	switch podconfig.DecidePull(policy, local != nil) {
	case podconfig.UseLocal:
		// The kubelet's text without KubeletEnsureSecretPulledImages: the
		// agent does not check that this pod's credentials could pull an
		// image another pod's pulled (docs/node-agent.md).
		w.agent.containerEvent(pod, c.info, corev1.EventTypeNormal, eventPulled, fmt.Sprintf("Container image %q already present on machine", requested))
		return w.hold(c, local, ref, now)
	case podconfig.NeverPulled:
		msg := fmt.Sprintf("Container image %q is not present with pull policy of Never", requested)
		w.agent.containerEvent(pod, c.info, corev1.EventTypeWarning, ReasonErrImageNeverPull, msg+" (load it with `jobkeeper image load`)")
		w.agent.containerEvent(pod, c.info, corev1.EventTypeWarning, eventFailed, "Error: "+ReasonErrImageNeverPull)
		return nil, &imageWait{reason: ReasonErrImageNeverPull, message: msg, retry: now.Add(lifecycle.RetryConfigError)}
	}
	if b := p.inBackoff(pod.UID, image, now); b != nil {
		w.agent.containerEvent(pod, c.info, corev1.EventTypeNormal, eventBackOff, fmt.Sprintf("Back-off pulling image %q", image))
		w.agent.containerEvent(pod, c.info, corev1.EventTypeWarning, eventFailed, "Error: "+ReasonImagePullBackOff)
		return nil, &imageWait{reason: ReasonImagePullBackOff, message: fmt.Sprintf("Back-off pulling image %q: %s", image, b.message), retry: b.until}
	}
	w.agent.containerEvent(pod, c.info, corev1.EventTypeNormal, eventPulling, fmt.Sprintf("Pulling image %q", image))
	c.pull = p.start(ctx, pod, image, ref, w.poke)
	return nil, &imageWait{reason: lifecycle.ReasonContainerCreating, retry: now.Add(pullWaitCheck)}
}

// collectPulls makes the containers whose pull ended due at once (they
// waited for the pull's poke). It reports whether one changed.
func (w *worker) collectPulls() bool {
	progress := false
	now := w.agent.clock.Now()
	for _, c := range w.all() {
		if c.pull == nil || !c.state.NotBefore.After(now) {
			continue
		}
		select {
		case <-c.pull.done:
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

// hold makes img the image of c, holding a store reference on it for the
// container's life, and checks that the store still has it (an `image rm`
// or a garbage collection may have come between the look-up and the
// reference). When it is gone, c waits a moment and resolves its image
// again, pulling it as its policy says.
func (w *worker) hold(c *container, img *images.Image, ref string, now time.Time) (*images.Image, *imageWait) {
	store := w.agent.puller.store
	if c.image.storeID != img.ID || c.image.done == nil {
		release := store.Use(img.ID)
		if got, err := store.Lookup(ref); err != nil || got.ID != img.ID {
			release()
			return nil, &imageWait{reason: lifecycle.ReasonContainerCreating, retry: now}
		}
		c.image.release()
		c.image = runImage{name: ref, id: imageIDOf(img, ref), storeID: img.ID, done: release}
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
			c.pull.cancel()
		}
	}
	if p := w.agent.puller; p != nil {
		p.forget(w.currentPod().UID, "")
	}
}

// pullAdvice adds to a pull failure what a user of a machine without the
// registry can do: load the image from a file, or run the host's programs.
func pullAdvice(msg string) string {
	return msg + " (without access to the registry, load the image with `jobkeeper image load FILE`, or run `jobkeeper up --images=host` to run commands on this host instead)"
}

// defaultsOf converts an image's config.
func defaultsOf(img *images.Image) podconfig.ImageDefaults {
	if img == nil {
		return podconfig.ImageDefaults{}
	}
	cfg := img.Config
	return podconfig.ImageDefaults{Entrypoint: cfg.Entrypoint, Cmd: cfg.Cmd, Env: cfg.Env, WorkingDir: cfg.WorkingDir, User: cfg.User}
}

// imageIDOf is what containerStatuses[].imageID says of an image: its
// digest in the repository it was named from, as containerd reports it, or
// its ID for an image known by no repository digest.
func imageIDOf(img *images.Image, ref string) string {
	repo := ref
	if i := strings.LastIndex(repo, "@"); i >= 0 {
		repo = repo[:i]
	} else if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	for _, d := range img.RepoDigests {
		if strings.HasPrefix(d, repo+"@") {
			return d
		}
	}
	if len(img.RepoDigests) > 0 {
		return img.RepoDigests[0]
	}
	return img.ID
}
