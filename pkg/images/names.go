package images

import (
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// dockerHub is how Normalize writes Docker Hub's registry (as containerd
// and the kubelet do); go-containerregistry calls it index.docker.io.
const dockerHub = "docker.io"

// Normalize returns the fully qualified form of an image reference, the
// form the store records names in: "busybox" is
// "docker.io/library/busybox:latest", "x@sha256:..." keeps the digest (and
// drops a tag given with it, which a digest makes moot). An invalid
// reference is an error that wraps ErrInvalidName and gives the parser's
// reason.
func Normalize(ref string) (string, error) {
	r, err := parseReference(ref)
	if err != nil {
		return "", err
	}
	return normalized(r), nil
}

// parseReference parses ref as Normalize does.
func parseReference(ref string) (name.Reference, error) {
	if ref == "" {
		return nil, newError(ErrInvalidName, `invalid image name "": empty`)
	}
	if strings.TrimSpace(ref) != ref {
		return nil, newError(ErrInvalidName, fmt.Sprintf("invalid image name %q: leading or trailing space", ref))
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, wrapError(ErrInvalidName, err, fmt.Sprintf("invalid image name %q: %v", ref, err))
	}
	if t, ok := r.(name.Tag); ok {
		// The distribution grammar (which the kubelet applies) also wants
		// a tag to start with a letter, digit or '_'.
		if tag := t.TagStr(); tag[0] == '.' || tag[0] == '-' {
			return nil, newError(ErrInvalidName, fmt.Sprintf("invalid image name %q: tag %q must start with a letter, digit or '_'", ref, tag))
		}
	}
	return r, nil
}

// normalized writes r as Normalize does.
func normalized(r name.Reference) string {
	repo := repository(r.Context())
	if d, ok := r.(name.Digest); ok {
		return repo + "@" + d.DigestStr()
	}
	return repo + ":" + r.Identifier()
}

// repository writes a repository as Normalize does: "docker.io/library/x".
func repository(r name.Repository) string {
	reg := r.RegistryStr()
	if reg == name.DefaultRegistry {
		reg = dockerHub
	}
	return reg + "/" + r.RepositoryStr()
}

// splitName splits a normalized tag "registry/repo:tag" into its repository
// and tag. A name without a tag yields tag "".
func splitName(n string) (repo, tag string) {
	slash := strings.LastIndex(n, "/")
	if i := strings.LastIndex(n, ":"); i > slash {
		return n[:i], n[i+1:]
	}
	return n, ""
}

// splitDigestName splits "registry/repo@sha256:..." into repository and
// digest; ok is false without a digest.
func splitDigestName(n string) (repo, digest string, ok bool) {
	return strings.Cut(n, "@")
}
