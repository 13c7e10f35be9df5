package images

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// PullOptions are the options of Pull.
type PullOptions struct {
	// Keychain gives credentials for registries; nil pulls anonymously.
	// Pull tries in turn every credential that a SecretsKeychain or a
	// MultiKeychain has for the image, while the registry refuses them.
	Keychain authn.Keychain
	// Platform is the platform to pick from an index; nil is this
	// process's (runtime.GOOS/GOARCH, and the variant on arm).
	Platform *v1.Platform
	// Transport carries the registry requests; nil is
	// go-containerregistry's default (proxy from the environment, HTTP/2).
	Transport http.RoundTripper
	// ProgressTimeout is how long a registry request may go without
	// receiving a byte (waiting for a manifest, a blob or the next bytes
	// of one) before the pull fails with ErrNoProgress; 0 is
	// DefaultProgressTimeout.
	ProgressTimeout time.Duration
}

// Pull fetches ref from its registry into the store and returns it. An
// index is resolved to o.Platform. Concurrent pulls of one reference with
// the same credentials in this process share one pull; a caller whose ctx
// ends gets ctx.Err() at once, and the shared pull is cancelled when no
// caller waits for it any more. A layer is fetched and unpacked once
// however many images or pulls need it. Blobs are verified against their
// digests. A registry request that receives nothing for o.ProgressTimeout
// fails the pull. Errors read as kubelet event messages, and are
// ErrNotFound, ErrUnauthorized, ErrPlatform, ErrInvalidName, ErrCorrupt or
// ErrNoProgress where those fit.
func (s *Store) Pull(ctx context.Context, ref string, o PullOptions) (*Image, error) {
	img, _, err := s.PullReporting(ctx, ref, o)
	return img, err
}

// PullReporting is Pull that also returns the credential the registry
// accepted: one of those o.Keychain gave (a SecretCredential for an image
// pull secret's), or authn.Anonymous when the keychain had none. The kubelet
// records it to tell later which pods may use the image
// (KubeletEnsureSecretPulledImages).
func (s *Store) PullReporting(ctx context.Context, ref string, o PullOptions) (*Image, authn.Authenticator, error) {
	r, err := parseReference(ref)
	if err != nil {
		return nil, nil, err
	}
	if o.Platform == nil {
		o.Platform = nodePlatform()
	}
	if o.Keychain == nil {
		o.Keychain = authn.NewMultiKeychain()
	}
	if o.ProgressTimeout <= 0 {
		o.ProgressTimeout = DefaultProgressTimeout
	}
	auths, err := credentials(o.Keychain, r.Context())
	if err != nil {
		return nil, nil, fmt.Errorf("finding credentials for %s: %w", normalized(r), err)
	}
	if len(auths) == 0 {
		auths = []authn.Authenticator{authn.Anonymous}
	}
	creds, err := credentialsKey(auths)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the credentials for %s: %w", normalized(r), err)
	}
	key := normalized(r) + " " + platformString(o.Platform) + " " + creds
	res, err := s.pulls.do(ctx, key, func(ctx context.Context) (pulled, error) {
		return s.pullWithEach(ctx, r, o, auths)
	})
	if err != nil {
		return nil, nil, err
	}
	// This caller's own credential: another caller sharing the pull had
	// the same credentials, but perhaps from other secrets.
	return res.img, auths[res.auth], nil
}

// pullWithEach is one Pull: with each of auths in turn (the credentials
// the keychain has for the repository, see MultiKeychain), as the kubelet,
// until one is not refused (401 or 403). The error is the last
// credential's.
func (s *Store) pullWithEach(ctx context.Context, r name.Reference, o PullOptions, auths []authn.Authenticator) (pulled, error) {
	var err error
	for i, auth := range auths {
		var img *Image
		if img, err = s.pull(ctx, r, o, auth); err == nil {
			return pulled{img: img, auth: i}, nil
		}
		if !errors.Is(err, ErrUnauthorized) {
			break
		}
	}
	return pulled{}, err
}

// pull is one Pull with one credential. Its requests go through a
// progressTransport: a stalled one fails it with ErrNoProgress.
func (s *Store) pull(ctx context.Context, r name.Reference, o PullOptions, auth authn.Authenticator) (out *Image, err error) {
	n := normalized(r)
	var img v1.Image
	defer func() { err = noProgressError(err, n, img) }()
	base := o.Transport
	if base == nil {
		base = remote.DefaultTransport
	}
	rt := &progressTransport{base: base, timeout: o.ProgressTimeout}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuth(auth), remote.WithPlatform(*o.Platform), remote.WithTransport(rt)}
	desc, err := remote.Get(r, opts...)
	if err != nil {
		return nil, registryError(err, n, r, auth)
	}
	a := addition{
		what:    n,
		digest:  desc.Digest.String(),
		digests: []string{desc.Digest.String()},
		repos:   []string{repository(r.Context())},
		want:    o.Platform,
	}
	if _, ok := r.(name.Tag); ok {
		a.names = []string{n}
	}
	switch {
	case desc.MediaType.IsIndex():
		ii, err := desc.ImageIndex()
		if err != nil {
			return nil, registryError(err, n, r, auth)
		}
		im, err := ii.IndexManifest()
		if err != nil {
			return nil, registryError(err, n, r, auth)
		}
		m, has := choosePlatform(o.Platform, im.Manifests)
		if m == nil {
			return nil, newError(ErrPlatform, fmt.Sprintf("no %s image in the index of %s (has %s)", platformString(o.Platform), n, listOrNone(has)))
		}
		a.digests = append(a.digests, m.Digest.String())
		if img, err = ii.Image(m.Digest); err != nil {
			return nil, registryError(err, n, r, auth)
		}
	case desc.MediaType.IsImage():
		if img, err = desc.Image(); err != nil {
			return nil, registryError(err, n, r, auth)
		}
	default:
		return nil, fmt.Errorf("%s is a %s, not an image", n, desc.MediaType)
	}
	if out, ok, err := s.known(a); ok || err != nil {
		return out, err
	}
	out, err = s.add(ctx, img, a)
	if err != nil {
		return nil, registryError(err, n, r, auth)
	}
	return out, nil
}

// known records the names of a and returns the image if the store already
// holds the image a's digest resolves to, so that pulling an unchanged
// image costs one manifest request.
func (s *Store) known(a addition) (*Image, bool, error) {
	idx, err := s.readIndex()
	if err != nil {
		return nil, false, err
	}
	last := a.digests[len(a.digests)-1]
	for _, rec := range idx.Images {
		if !contains(rec.Digests, last) {
			continue
		}
		for _, d := range rec.Layers {
			if _, ok, _ := s.unpackedLayer(d); !ok {
				return nil, false, nil
			}
		}
		r := &record{ID: rec.ID, Digest: a.digest, Digests: a.digests, Names: a.names, Layers: rec.Layers}
		for _, repo := range a.repos {
			r.RepoDigests = append(r.RepoDigests, repo+"@"+a.digest)
		}
		img, err := s.record(r, nil, true)
		if errors.Is(err, errLayerGone) {
			return nil, false, nil
		}
		return img, err == nil, err
	}
	return nil, false, nil
}

// registryError rewrites an error of a registry request made with auth so
// that it reads well after `Failed to pull image "x": `.
func registryError(err error, n string, r name.Reference, auth authn.Authenticator) error {
	var te *transport.Error
	if !errors.As(err, &te) {
		return err
	}
	reg := r.Context().RegistryStr()
	if reg == name.DefaultRegistry {
		reg = dockerHub
	}
	code := te.StatusCode
	for _, d := range te.Errors {
		switch d.Code {
		case transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode:
			code = http.StatusNotFound
		case transport.UnauthorizedErrorCode, transport.DeniedErrorCode:
			code = http.StatusUnauthorized
		}
	}
	switch code {
	case http.StatusNotFound:
		return wrapError(ErrNotFound, err, fmt.Sprintf("manifest unknown: %s not found in registry", n))
	case http.StatusUnauthorized, http.StatusForbidden:
		if auth == authn.Anonymous {
			return wrapError(ErrUnauthorized, err, fmt.Sprintf("unauthorized: registry %s requires credentials for %s, and none were found for it (give the pod imagePullSecrets, or log in with docker login)", reg, n))
		}
		return wrapError(ErrUnauthorized, err, fmt.Sprintf("unauthorized: registry %s refused the credentials for %s", reg, n))
	}
	return fmt.Errorf("registry %s: %w", reg, err)
}

// listOrNone joins names, or says "none".
func listOrNone(names []string) string {
	if len(names) == 0 {
		return "no image for any platform"
	}
	out := names[0]
	for _, n := range names[1:] {
		out += ", " + n
	}
	return out
}
