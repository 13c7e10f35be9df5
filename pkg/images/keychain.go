package images

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// dockerHubHosts are the names of Docker Hub's registry that credentials
// may be filed under; they all match Docker Hub images.
var dockerHubHosts = map[string]bool{
	"docker.io": true, "index.docker.io": true, "registry-1.docker.io": true, "registry.hub.docker.com": true,
}

// SecretsKeychain returns a keychain with the credentials of image pull
// secrets: kubernetes.io/dockerconfigjson (.dockerconfigjson) and
// kubernetes.io/dockercfg (.dockercfg) secrets; other secrets and
// unreadable data are ignored, as the kubelet ignores them. Keys are
// matched to an image as the kubelet matches them: host (label by label,
// "*" globs allowed), port (equal, or both absent), and path prefix (a
// string prefix, as the kubelet's); the most
// specific key wins (longest path, then globless, then longest host), and
// Docker Hub's aliases (docker.io, index.docker.io, registry-1.docker.io,
// https://index.docker.io/v1/) are one registry. Resolve gives the most
// specific credential; Pull, as the kubelet, tries every matching one in
// turn while the registry refuses them. An image no key matches is pulled
// anonymously.
func SecretsKeychain(secrets []*corev1.Secret) authn.Keychain {
	k := &secretsKeychain{}
	for _, s := range secrets {
		if s == nil {
			continue
		}
		var auths map[string]dockerConfigEntry
		switch s.Type {
		case corev1.SecretTypeDockerConfigJson:
			var cfg struct {
				Auths map[string]dockerConfigEntry `json:"auths"`
			}
			if json.Unmarshal(s.Data[corev1.DockerConfigJsonKey], &cfg) != nil {
				continue
			}
			auths = cfg.Auths
		case corev1.SecretTypeDockercfg:
			if json.Unmarshal(s.Data[corev1.DockerConfigKey], &auths) != nil {
				continue
			}
		default:
			continue
		}
		for key, e := range auths {
			if c, ok := parseCredKey(key); ok {
				c.auth = e.authConfig()
				c.secret = SecretRef{Namespace: s.Namespace, Name: s.Name, UID: s.UID}
				k.creds = append(k.creds, c)
			}
		}
	}
	sort.SliceStable(k.creds, func(i, j int) bool { return k.creds[i].moreSpecific(k.creds[j]) })
	return k
}

// dockerConfigEntry is one registry's entry in a Docker config.
type dockerConfigEntry struct {
	Username      string `json:"username,omitempty"`
	Password      string `json:"password,omitempty"`
	Auth          string `json:"auth,omitempty"`
	IdentityToken string `json:"identitytoken,omitempty"`
	RegistryToken string `json:"registrytoken,omitempty"`
}

// authConfig converts the entry, decoding "auth" (base64 "user:password")
// when no username is given.
func (e dockerConfigEntry) authConfig() authn.AuthConfig {
	c := authn.AuthConfig{Username: e.Username, Password: e.Password, IdentityToken: e.IdentityToken, RegistryToken: e.RegistryToken}
	if c.Username == "" && e.Auth != "" {
		if raw, err := base64.StdEncoding.DecodeString(e.Auth); err == nil {
			c.Username, c.Password, _ = strings.Cut(string(raw), ":")
		}
	}
	return c
}

// secretsKeychain is the keychain SecretsKeychain returns.
type secretsKeychain struct {
	// creds are ordered most specific first.
	creds []credential
}

// credential is one key of a Docker config and its credentials.
type credential struct {
	// host is the registry host, possibly with "*" globs in labels;
	// Docker Hub's aliases are "index.docker.io".
	host string
	// port is the key's port, "" for none.
	port string
	// path is the repository path prefix, "" for the whole registry.
	path string
	// auth is what is sent.
	auth authn.AuthConfig
	// secret is the pull secret it came from.
	secret SecretRef
}

// SecretRef names an image pull secret.
type SecretRef struct {
	Namespace, Name string
	UID             types.UID
}

// SecretCredential is a credential of an image pull secret, as the
// keychain of SecretsKeychain gives it: what the registry is sent, the
// secret it came from, and a digest of the credential (CredentialHash) by
// which two secrets holding the same credential are known to be equal.
type SecretCredential struct {
	authn.Authenticator
	// Secret is where it came from.
	Secret SecretRef
	// Hash is CredentialHash of what is sent.
	Hash string
}

// CredentialHash is a digest of a registry credential: equal for equal
// credentials, whatever secret holds them.
func CredentialHash(c authn.AuthConfig) string {
	data, _ := json.Marshal(c)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// parseCredKey parses a Docker config key: "host[:port][/path]", with or
// without a scheme; a trailing /v1/ or /v2/ (as docker login writes for
// Docker Hub) names the whole registry.
func parseCredKey(key string) (credential, bool) {
	s := key
	for _, p := range []string{"https://", "http://"} {
		s = strings.TrimPrefix(s, p)
	}
	u, err := url.Parse("https://" + s)
	if err != nil || u.Hostname() == "" {
		return credential{}, false
	}
	c := credential{host: strings.ToLower(u.Hostname()), port: u.Port(), path: strings.Trim(u.Path, "/")}
	if c.path == "v1" || c.path == "v2" {
		c.path = ""
	}
	if dockerHubHosts[c.host] {
		c.host = name.DefaultRegistry
	}
	return c, true
}

// moreSpecific orders credentials: longer path, then no glob, then longer
// host, then with a port.
func (c credential) moreSpecific(o credential) bool {
	if len(c.path) != len(o.path) {
		return len(c.path) > len(o.path)
	}
	cg, og := strings.Contains(c.host, "*"), strings.Contains(o.host, "*")
	if cg != og {
		return !cg
	}
	if len(c.host) != len(o.host) {
		return len(c.host) > len(o.host)
	}
	return c.port != "" && o.port == ""
}

// Resolve returns the credentials of the most specific key that matches
// the resource ("registry/repository" or "registry"), else anonymous.
func (k *secretsKeychain) Resolve(res authn.Resource) (authn.Authenticator, error) {
	all, err := k.resolveAll(res)
	if err != nil || len(all) == 0 {
		return authn.Anonymous, err
	}
	return all[0], nil
}

// resolveAll returns the credentials of every key that matches the
// resource, most specific first, each distinct credential once.
func (k *secretsKeychain) resolveAll(res authn.Resource) ([]authn.Authenticator, error) {
	target := res.String()
	hostPort, repo, _ := strings.Cut(target, "/")
	host, port := hostPort, ""
	if i := strings.LastIndex(hostPort, ":"); i >= 0 {
		host, port = hostPort[:i], hostPort[i+1:]
	}
	host = strings.ToLower(host)
	if dockerHubHosts[host] {
		host = name.DefaultRegistry
	}
	var (
		out  []authn.Authenticator
		seen []authn.AuthConfig
	)
	for _, c := range k.creds {
		if c.port != port || !hostMatches(c.host, host) {
			continue
		}
		if !strings.HasPrefix(repo, c.path) || slices.Contains(seen, c.auth) {
			continue
		}
		seen = append(seen, c.auth)
		out = append(out, &SecretCredential{Authenticator: authn.FromConfig(c.auth), Secret: c.secret, Hash: CredentialHash(c.auth)})
	}
	return out, nil
}

// SecretCredentials returns the credentials secrets hold for ref's
// repository, most specific first (none: the pod would pull anonymously).
func SecretCredentials(secrets []*corev1.Secret, ref string) ([]*SecretCredential, error) {
	r, err := parseReference(ref)
	if err != nil {
		return nil, err
	}
	all, err := SecretsKeychain(secrets).(*secretsKeychain).resolveAll(r.Context())
	if err != nil {
		return nil, err
	}
	out := make([]*SecretCredential, 0, len(all))
	for _, a := range all {
		out = append(out, a.(*SecretCredential))
	}
	return out, nil
}

// hostMatches matches a host to a key's host, label by label, each label
// of the key a glob.
func hostMatches(pattern, host string) bool {
	pl, hl := strings.Split(pattern, "."), strings.Split(host, ".")
	if len(pl) != len(hl) {
		return false
	}
	for i := range pl {
		if ok, err := filepath.Match(pl[i], hl[i]); err != nil || !ok {
			return false
		}
	}
	return true
}

// allResolver is a keychain that gives every credential matching a
// resource, in the order to try them (none: pull anonymously).
type allResolver interface {
	resolveAll(authn.Resource) ([]authn.Authenticator, error)
}

var (
	_ allResolver = (*secretsKeychain)(nil)
	_ allResolver = multiKeychain(nil)
)

// MultiKeychain is authn.NewMultiKeychain for Pull: Resolve gives the
// first keychain's credentials that are not anonymous, and Pull tries
// every credential of every keychain in turn (all the matching keys of a
// SecretsKeychain, most specific first), as the kubelet tries the pod's
// pull secrets and then the node's credentials.
func MultiKeychain(keychains ...authn.Keychain) authn.Keychain {
	return multiKeychain(keychains)
}

// multiKeychain is the keychain MultiKeychain returns.
type multiKeychain []authn.Keychain

// Resolve returns the first credentials that are not anonymous.
func (m multiKeychain) Resolve(res authn.Resource) (authn.Authenticator, error) {
	all, err := m.resolveAll(res)
	if err != nil || len(all) == 0 {
		return authn.Anonymous, err
	}
	return all[0], nil
}

// resolveAll returns the credentials of each keychain in order.
func (m multiKeychain) resolveAll(res authn.Resource) ([]authn.Authenticator, error) {
	var out []authn.Authenticator
	for _, kc := range m {
		all, err := credentials(kc, res)
		if err != nil {
			return nil, err
		}
		out = append(out, all...)
	}
	return out, nil
}

// credentials returns what kc gives for res, in the order to try it;
// none means anonymous.
func credentials(kc authn.Keychain, res authn.Resource) ([]authn.Authenticator, error) {
	if ar, ok := kc.(allResolver); ok {
		return ar.resolveAll(res)
	}
	auth, err := kc.Resolve(res)
	if err != nil {
		return nil, err
	}
	if auth == authn.Anonymous {
		return nil, nil
	}
	return []authn.Authenticator{auth}, nil
}
