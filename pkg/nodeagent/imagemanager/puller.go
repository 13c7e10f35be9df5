package imagemanager

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-base/featuregate"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"jobkeeper.dev/jobkeeper/pkg/images"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/internal/periodic"
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
	// EventPulling, eventPulled, eventFailed, eventBackOff and
	// eventInspectFailed are the kubelet's image event reasons.
	EventPulling, EventPulled, EventFailed, EventBackOff, EventInspectFailed = "Pulling", "Pulled", "Failed", "BackOff", "InspectFailed"
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

// PullWaitCheck is when a container waiting for a pull is looked at again
// if no poke came (the pull's end pokes the worker; this is a safety net).
const PullWaitCheck = time.Minute

// maxParallelPulls bounds the pulls running at once (the kubelet serializes
// them by default; a few at a time keep one slow registry from holding up
// every pod).
const maxParallelPulls = 3

// Puller is the agent's image manager: it pulls images into the store
// for pod workers, one pull per reference at a time, and keeps the per pod
// and image pull back-off.
type Puller struct {
	// Store holds the images.
	Store *images.Store
	// cfg is what the puller needs from the agent.
	cfg Config
	// slots bounds concurrent pulls.
	slots chan struct{}
	// userKeychain is the credentials of the user running the agent (their
	// Docker config), tried after the pod's pull secrets.
	userKeychain authn.Keychain

	// mu guards backoffs.
	mu sync.Mutex
	// backoffs are failed pulls by pod UID and image.
	backoffs map[string]*Backoff
}

// Backoff is the back-off of one image for one pod.
type Backoff struct {
	// delay is the current wait.
	delay time.Duration
	// Until is when the next pull may start.
	Until time.Time
	// Message is the last failure ("ErrImagePull: ...").
	Message string
}

// PullState is a pull a container waits for; the worker goroutine owns it,
// the pull goroutine fills img or err before closing done.
type PullState struct {
	// image is the container's image as written in the spec, ref its
	// normalized reference.
	image, Ref string
	// Cancel ends the pull (the pod's worker ended).
	Cancel context.CancelFunc
	// Done is closed when the pull ended.
	Done chan struct{}
	// Img is the pulled image, err why the pull failed.
	Img *images.Image
	Err error
	// Asked is when the pull was asked for; took is how long the pull
	// itself ran (without waiting for a slot).
	Asked time.Time
	Took  time.Duration
}

// Config is what the image manager needs from the agent.
type Config struct {
	// Client reads the pods' image pull secrets.
	Client kubernetes.Interface
	// Clock times pulls, back-offs and garbage collection.
	Clock clock.WithTicker
	// Event records a node event on a pod.
	Event func(pod *corev1.Pod, eventType, reason, message string)
	// Records are the pulled-image records; nil when pods' access to
	// images already present is not verified (KubeletEnsureSecretPulledImages
	// off).
	Records *PullRecords
}

// NewPuller returns the agent's image manager over store.
func NewPuller(cfg Config, store *images.Store) *Puller {
	return &Puller{
		Store:        store,
		cfg:          cfg,
		slots:        make(chan struct{}, maxParallelPulls),
		userKeychain: authn.DefaultKeychain,
		backoffs:     map[string]*Backoff{},
	}
}

// backoffKey names a pod's back-off for an image.
func backoffKey(uid types.UID, image string) string { return string(uid) + "_" + image }

// InBackoff returns the running back-off of a pod's image, nil when none.
func (p *Puller) InBackoff(uid types.UID, image string, now time.Time) *Backoff {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.backoffs[backoffKey(uid, image)]
	if b == nil || !now.Before(b.Until) {
		return nil
	}
	cp := *b
	return &cp
}

// Failed records a failed pull and returns the back-off's end.
func (p *Puller) Failed(uid types.UID, image, message string, now time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	key := backoffKey(uid, image)
	b := p.backoffs[key]
	switch {
	case b == nil:
		b = &Backoff{delay: PullBackoffInitial}
		p.backoffs[key] = b
	case b.delay*2 > PullBackoffMax:
		b.delay = PullBackoffMax
	default:
		b.delay *= 2
	}
	b.Until, b.Message = now.Add(b.delay), message
	return b.Until
}

// Forget drops the back-offs of a pod (it pulled, or it is gone).
func (p *Puller) Forget(uid types.UID, image string) {
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

// Start begins pulling image for pod in the background; poke is called
// when it ended.
func (p *Puller) Start(ctx context.Context, pod *corev1.Pod, image, ref string, poke func()) *PullState {
	ctx, cancel := context.WithCancel(ctx)
	st := &PullState{image: image, Ref: ref, Cancel: cancel, Done: make(chan struct{}), Asked: p.cfg.Clock.Now()}
	go func() {
		defer cancel()
		defer poke()
		defer close(st.Done)
		select {
		case p.slots <- struct{}{}:
		case <-ctx.Done():
			st.Err = ctx.Err()
			return
		}
		defer func() { <-p.slots }()
		keychain := images.MultiKeychain(images.SecretsKeychain(p.pullSecrets(ctx, pod, true)), p.userKeychain)
		began := p.cfg.Clock.Now()
		var intended func()
		if p.cfg.Records != nil {
			var err error
			if intended, err = p.cfg.Records.Intend(image); err != nil {
				st.Err = fmt.Errorf("recording the pull of %s: %w", image, err)
				return
			}
			defer func() { intended() }()
		}
		var auth authn.Authenticator
		st.Img, auth, st.Err = p.Store.PullReporting(ctx, ref, images.PullOptions{Keychain: keychain})
		st.Took = p.cfg.Clock.Since(began)
		if st.Err != nil {
			klog.FromContext(ctx).V(2).Info("Image pull failed", "pod", klog.KObj(pod), "image", image, "err", st.Err)
			if ctx.Err() != nil {
				// Given up on (the pod went, the agent stops): a pull
				// shared with others may still store the image, so the
				// intent stays, and the image must be proven until a
				// record names who pulled it.
				intended = func() {}
			}
			return
		}
		if p.cfg.Records != nil {
			// Who pulled it: a pull secret's credential, or nobody's in
			// particular (anonymous, or the node's own credentials).
			cred, _ := auth.(*images.SecretCredential)
			if err := p.cfg.Records.Record(image, st.Img.ID, cred); err != nil {
				// The intent stays: the image then counts as pulled with
				// no credentials, so pods must prove theirs.
				klog.FromContext(ctx).Error(err, "Recording who pulled an image", "image", image)
				intended = func() {}
			}
		}
	}()
	return st
}

// MayUse reports whether pod may use img, already in the store, for image
// (ref normalized) without pulling it, as the kubelet decides with
// KubeletEnsureSecretPulledImages (beta and on since 1.35) and its default
// policy, NeverVerifyPreloadedImages (PullRecords). Only the pod's pull
// secrets with a credential for the image's registry count.
func (p *Puller) MayUse(ctx context.Context, pod *corev1.Pod, image, ref string, img *images.Image) bool {
	if p.cfg.Records == nil || !utilfeature.DefaultFeatureGate.Enabled(ensureSecretPulledImages) {
		return true
	}
	return p.cfg.Records.MayUse(image, img.ID, func() []PullCredential {
		creds, err := images.SecretCredentials(p.pullSecrets(ctx, pod, false), ref)
		if err != nil {
			return nil
		}
		return creds
	})
}

// AccessNote is what the kubelet adds to "already present on machine" when
// it checked that the pod may use the image.
func (p *Puller) AccessNote() string {
	if p.cfg.Records == nil || !utilfeature.DefaultFeatureGate.Enabled(ensureSecretPulledImages) {
		return ""
	}
	return " and can be accessed by the pod"
}

// ensureSecretPulledImages is the kubelet's feature gate.
const ensureSecretPulledImages featuregate.Feature = "KubeletEnsureSecretPulledImages"

// pullSecrets reads the pod's imagePullSecrets; a missing one is an event
// when report is set (the pull's reading, not the access check's, so it
// is told once), as the kubelet's, and the pull goes on without it.
func (p *Puller) pullSecrets(ctx context.Context, pod *corev1.Pod, report bool) []*corev1.Secret {
	var out []*corev1.Secret
	var missing []string
	for _, ref := range pod.Spec.ImagePullSecrets {
		if ref.Name == "" {
			continue
		}
		s, err := p.cfg.Client.CoreV1().Secrets(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			if !apierrors.IsNotFound(err) {
				klog.FromContext(ctx).Info("Reading an image pull secret failed", "pod", klog.KObj(pod), "secret", ref.Name, "err", err)
			}
			missing = append(missing, fmt.Sprintf("%q", ref.Name))
			continue
		}
		out = append(out, s)
	}
	if len(missing) > 0 && report {
		p.cfg.Event(pod, corev1.EventTypeWarning, eventFailedSecret,
			fmt.Sprintf("Unable to retrieve some image pull secrets (%s); attempting to pull the image may not succeed.", strings.Join(missing, ", ")))
	}
	return out
}

// PullAdvice adds to a pull failure what a user of a machine without the
// registry can do: load the image from a file, or run the host's programs.
func PullAdvice(msg string) string {
	return msg + " (without access to the registry, load the image with `jobkeeper image load FILE`, or run `jobkeeper up --images=host` to run commands on this host instead)"
}

// ImageIDOf is what containerStatuses[].imageID says of an image: its
// digest in the repository it was named from, as containerd reports it, or
// its ID for an image known by no repository digest.
func ImageIDOf(img *images.Image, ref string) string {
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

// ImageGCPolicy is when unused images are deleted, as the kubelet's image
// garbage collection defaults: above 85% use of the store's filesystem,
// least recently used first down to 80%, never an image used in the last
// two minutes. Tests may change it.
var ImageGCPolicy = images.GCPolicy{HighPercent: 85, LowPercent: 80, MinAge: 2 * time.Minute}

// imageGCPeriod is how often the store's disk use is checked (the kubelet's
// image GC period).
const imageGCPeriod = 5 * time.Minute

// CollectGarbage deletes unused images when the store's disk fills, every
// imageGCPeriod, until ctx is done.
func (p *Puller) CollectGarbage(ctx context.Context) {
	logger := klog.FromContext(ctx)
	periodic.Every(ctx, p.cfg.Clock, imageGCPeriod, func() {
		began := p.cfg.Clock.Now()
		removed, err := p.Store.CollectGarbage(ctx, ImageGCPolicy)
		if err != nil {
			logger.Error(err, "Image garbage collection failed")
		}
		if len(removed) > 0 {
			logger.Info("Removed unused images", "images", removed)
			p.PruneRecords(began)
		}
	})
}

// PruneRecords removes the pulled-image records of the images the store no
// longer has, last updated before before (a pull since then keeps its).
func (p *Puller) PruneRecords(before time.Time) {
	if p.cfg.Records == nil {
		return
	}
	list, err := p.Store.List()
	if err != nil {
		return
	}
	ids := map[string]bool{}
	for _, img := range list {
		ids[img.ID] = true
	}
	_ = p.cfg.Records.Prune(func(imageRef string) bool { return ids[imageRef] }, before)
}
