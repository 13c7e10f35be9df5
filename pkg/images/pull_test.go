package images

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestPullByTagAndDigest(t *testing.T) {
	reg := newRegistry(t)
	img := image(t, "", layer(t, dir("bin/"), file("bin/app", "hello")), layer(t, symlink("bin/link", "app")))
	reg.push(t, "test/app:1", img)
	s := openStore(t)
	ctx := context.Background()

	got, err := s.Pull(ctx, reg.host+"/test/app:1", PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := img.ConfigName()
	manifest := digestOf(t, img)
	want := &Image{
		ID:          id.String(),
		Digest:      manifest,
		Names:       []string{reg.host + "/test/app:1"},
		RepoDigests: []string{reg.host + "/test/app@" + manifest},
		Config:      Config{Entrypoint: []string{"/bin/app"}, Cmd: []string{"--flag"}, Env: []string{"PATH=/bin"}, WorkingDir: "/work", User: "1000"},
		Size:        5,
		Platform:    "linux/" + runtime.GOARCH,
	}
	if diff := cmp.Diff(want, got, cmpIgnoreLayersAndTime); diff != "" {
		t.Errorf("Pull (-want +got):\n%s", diff)
	}
	if len(got.Layers) != 2 {
		t.Fatalf("Layers = %v, want 2", got.Layers)
	}
	if b, err := os.ReadFile(filepath.Join(got.Layers[0], "bin/app")); err != nil || string(b) != "hello" {
		t.Errorf("bin/app in the bottom layer = %q, %v", b, err)
	}
	if l, err := os.Readlink(filepath.Join(got.Layers[1], "bin/link")); err != nil || l != "app" {
		t.Errorf("bin/link in the top layer -> %q, %v", l, err)
	}

	byDigest, err := s.Pull(ctx, reg.host+"/test/app@"+manifest, PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if byDigest.ID != got.ID || len(byDigest.Names) != 1 {
		t.Errorf("pull by digest: ID %s names %v, want %s and the tag kept", byDigest.ID, byDigest.Names, got.ID)
	}
	for _, ref := range []string{reg.host + "/test/app:1", reg.host + "/test/app@" + manifest, got.ID, strings.TrimPrefix(got.ID, "sha256:")[:12]} {
		if l, err := s.Lookup(ref); err != nil || l.ID != got.ID {
			t.Errorf("Lookup(%s) = %v, %v", ref, l, err)
		}
	}
	if _, err := s.Lookup(reg.host + "/test/app:2"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Lookup of a missing tag: %v, want ErrNotFound", err)
	}
	if _, err := s.Pull(ctx, reg.host+"/test/nope:1", PullOptions{}); !errors.Is(err, ErrNotFound) ||
		err.Error() != "manifest unknown: "+reg.host+"/test/nope:1 not found in registry" {
		t.Errorf("pull of a missing image: %v", err)
	}
}

// cmpIgnoreLayersAndTime leaves out what a test cannot know in advance.
var cmpIgnoreLayersAndTime = cmp.FilterPath(func(p cmp.Path) bool {
	s := p.String()
	return s == "Layers" || s == "LastUsed"
}, cmp.Ignore())

func TestPullIndexWithoutThePlatform(t *testing.T) {
	reg := newRegistry(t)
	arm := image(t, "arm64", layer(t, file("a", "arm")))
	idx := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}})
	ref := reg.host + "/test/multi:1"
	n := reg.push(t, "test/multi:1", arm)
	if err := remote.WriteIndex(n, idx); err != nil {
		t.Fatal(err)
	}
	s := openStore(t)
	_, err := s.Pull(context.Background(), ref, PullOptions{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}})
	want := "no linux/amd64 image in the index of " + ref + " (has linux/arm64)"
	if !errors.Is(err, ErrPlatform) || err == nil || err.Error() != want {
		t.Errorf("Pull = %v, want %q", err, want)
	}
	img, err := s.Pull(context.Background(), ref, PullOptions{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}})
	if err != nil {
		t.Fatal(err)
	}
	if img.Digest != digestOf(t, idx) || img.Platform != "linux/arm64" {
		t.Errorf("pull through the index: digest %s platform %s, want the index's digest %s and linux/arm64", img.Digest, img.Platform, digestOf(t, idx))
	}
	if _, err := s.Lookup(reg.host + "/test/multi@" + digestOf(t, arm)); err != nil {
		t.Errorf("Lookup by the platform manifest's digest: %v", err)
	}
}

func TestPullSingleManifestForAnotherPlatform(t *testing.T) {
	reg := newRegistry(t)
	reg.push(t, "test/arm:1", image(t, "arm64", layer(t, file("a", "arm"))))
	reg.mu.Lock()
	clear(reg.blobGets)
	reg.mu.Unlock()
	ref := reg.host + "/test/arm:1"
	s := openStore(t)
	_, err := s.Pull(context.Background(), ref, PullOptions{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}})
	want := ref + " is a linux/arm64 image; this node is linux/amd64 and cannot run it"
	if !errors.Is(err, ErrPlatform) || err.Error() != want {
		t.Errorf("Pull = %v, want ErrPlatform %q", err, want)
	}
	if n := len(reg.gets()); n != 1 {
		t.Errorf("blobs fetched: %v, want only the config", reg.gets())
	}
	if imgs, _ := s.List(); len(imgs) != 0 || len(layerDirs(t, s)) != 0 {
		t.Errorf("the store holds %v and layers %v after the refused pull", imgs, layerDirs(t, s))
	}
}

func TestPullAuth(t *testing.T) {
	reg := newRegistry(t)
	reg.push(t, "test/private:1", image(t, "", layer(t, file("secret", "s"))))
	reg.user, reg.password = "alice", "right"
	ref := reg.host + "/test/private:1"
	secret := func(password string) []*corev1.Secret {
		return []*corev1.Secret{{
			Type: corev1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"` + reg.host + `":{"username":"alice","password":"` + password + `"}}}`)},
		}}
	}
	ctx := context.Background()
	cases := map[string]struct {
		keychain []*corev1.Secret
		wantErr  string
	}{
		"no credentials": {wantErr: "unauthorized: registry " + reg.host + " requires credentials for " + ref + ", and none were found for it (give the pod imagePullSecrets, or log in with docker login)"},
		"wrong password": {keychain: secret("wrong"), wantErr: "unauthorized: registry " + reg.host + " refused the credentials for " + ref},
		"right password": {keychain: secret("right")},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := openStore(t)
			var o PullOptions
			if tc.keychain != nil {
				o.Keychain = SecretsKeychain(tc.keychain)
			}
			_, err := s.Pull(ctx, ref, o)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || err.Error() != tc.wantErr || !errors.Is(err, ErrUnauthorized) {
				t.Errorf("Pull = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestPullTriesEachMatchingCredential(t *testing.T) {
	reg := newRegistry(t)
	reg.push(t, "test/private:1", image(t, "", layer(t, file("secret", "s"))))
	reg.user, reg.password = "alice", "right"
	ref := reg.host + "/test/private:1"
	secret := func(auths string) *corev1.Secret {
		return &corev1.Secret{
			Type: corev1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{` + auths + `}}`)},
		}
	}
	entry := func(key, password string) string {
		return `"` + key + `":{"username":"alice","password":"` + password + `"}`
	}
	cases := map[string]struct {
		keychain authn.Keychain
		wantErr  string
	}{
		"the most specific key refused and the registry key right": {
			keychain: SecretsKeychain([]*corev1.Secret{secret(entry(reg.host+"/test", "stale") + "," + entry(reg.host, "right"))}),
		},
		"a pull secret refused and the node credentials right": {
			keychain: MultiKeychain(SecretsKeychain([]*corev1.Secret{secret(entry(reg.host, "stale"))}), SecretsKeychain([]*corev1.Secret{secret(entry(reg.host, "right"))})),
		},
		"every credential is refused": {
			keychain: MultiKeychain(SecretsKeychain([]*corev1.Secret{secret(entry(reg.host+"/test", "stale") + "," + entry(reg.host, "old"))})),
			wantErr:  "unauthorized: registry " + reg.host + " refused the credentials for " + ref,
		},
		"no credential matches": {
			keychain: MultiKeychain(SecretsKeychain([]*corev1.Secret{secret(entry("elsewhere.example.com", "right"))})),
			wantErr:  "unauthorized: registry " + reg.host + " requires credentials for " + ref + ", and none were found for it (give the pod imagePullSecrets, or log in with docker login)",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := openStore(t)
			_, err := s.Pull(context.Background(), ref, PullOptions{Keychain: tc.keychain})
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || err.Error() != tc.wantErr || !errors.Is(err, ErrUnauthorized) {
				t.Errorf("Pull = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestConcurrentPullsFetchEachBlobOnce(t *testing.T) {
	reg := newRegistry(t)
	img := image(t, "", layer(t, file("a", "1")), layer(t, file("b", "2")), layer(t, file("c", "3")))
	reg.push(t, "test/app:1", img)
	reg.mu.Lock()
	clear(reg.blobGets)
	reg.mu.Unlock()
	s := openStore(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.Pull(context.Background(), reg.host+"/test/app:1", PullOptions{})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for digest, n := range reg.gets() {
		if n != 1 {
			t.Errorf("blob %s fetched %d times, want once", digest, n)
		}
	}
	if len(reg.gets()) != 4 {
		t.Errorf("blobs fetched: %v, want the 3 layers and the config", reg.gets())
	}
	// Pulling an image the store has costs no blob at all.
	if _, err := s.Pull(context.Background(), reg.host+"/test/app:1", PullOptions{}); err != nil {
		t.Fatal(err)
	}
	for digest, n := range reg.gets() {
		if n != 1 {
			t.Errorf("after a second pull, blob %s fetched %d times, want once", digest, n)
		}
	}
}

func TestPullCorruptLayer(t *testing.T) {
	reg := newRegistry(t)
	good := layer(t, file("ok", "fine"))
	bad := layer(t, file("data", strings.Repeat("x", 4096)))
	reg.push(t, "test/app:1", image(t, "", good, bad))
	badDigest := digestOf(t, bad)
	rc, _ := bad.Compressed()
	raw := make([]byte, 1<<16)
	n, _ := rc.Read(raw)
	raw = raw[:n]
	flipped := append([]byte(nil), raw...)
	flipped[len(flipped)/2] ^= 0xff
	reg.corrupt[badDigest] = flipped

	s := openStore(t)
	_, err := s.Pull(context.Background(), reg.host+"/test/app:1", PullOptions{})
	if err == nil || !strings.Contains(err.Error(), badDigest) || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Pull = %v, want a corrupt-layer error naming %s", err, badDigest)
	}
	assertNoPartialLayers(t, s)
	if imgs, _ := s.List(); len(imgs) != 0 {
		t.Errorf("store lists %d images after a failed pull", len(imgs))
	}
	delete(reg.corrupt, badDigest)
	if _, err := s.Pull(context.Background(), reg.host+"/test/app:1", PullOptions{}); err != nil {
		t.Fatalf("pull once the blob is right: %v", err)
	}
}

// assertNoPartialLayers fails if the store's work directory holds
// anything or l/ holds a layer without its meta file.
func assertNoPartialLayers(t *testing.T, s *Store) {
	t.Helper()
	if entries, _ := os.ReadDir(s.work); len(entries) != 0 {
		t.Errorf("work directory holds %v after a failed pull", entries)
	}
	entries, _ := os.ReadDir(filepath.Join(s.dir, layersDir))
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(s.dir, layersDir, e.Name(), "meta.json")); err != nil {
			t.Errorf("partial layer %s left in l/", e.Name())
		}
	}
}

func TestOpenCleansWhatAKilledPullLeft(t *testing.T) {
	dir := t.TempDir()
	live, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	// What a process killed mid-pull leaves: its work directory with a
	// half-unpacked layer, and its lock file, now unlocked.
	dead := filepath.Join(dir, tmpDir, workPrefix+"dead")
	if err := os.MkdirAll(filepath.Join(dead, "layer-1", "fs", "usr"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dead+lockSuffix, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, tmpDir, "stray"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, p := range []string{dead, dead + lockSuffix, filepath.Join(dir, tmpDir, "stray")} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s survived Open: %v", p, err)
		}
	}
	if _, err := os.Stat(live.work); err != nil {
		t.Errorf("the work directory of a live store was removed: %v", err)
	}
	reg := newRegistry(t)
	reg.push(t, "test/app:1", image(t, "", layer(t, file("a", "1"))))
	if _, err := s.Pull(context.Background(), reg.host+"/test/app:1", PullOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := live.Lookup(reg.host + "/test/app:1"); err != nil {
		t.Errorf("the other store does not see the pulled image: %v", err)
	}
}

// TestPullReportsTheCredentialTaken: PullReporting names the credential the
// registry accepted, with the secret it came from, not one it refused; an
// anonymous pull reports authn.Anonymous. SecretCredentials gives a pod's
// credentials for a repository as the pull would try them.
func TestPullReportsTheCredentialTaken(t *testing.T) {
	reg := newRegistry(t)
	reg.push(t, "test/private:1", image(t, "", layer(t, file("secret", "s"))))
	reg.user, reg.password = "alice", "right"
	ref := reg.host + "/test/private:1"
	secret := func(name, password string) *corev1.Secret {
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
			Type:       corev1.SecretTypeDockerConfigJson,
			Data:       map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"` + reg.host + `":{"username":"alice","password":"` + password + `"}}}`)},
		}
	}
	secrets := []*corev1.Secret{secret("wrong", "stale"), secret("right", "right")}
	s := openStore(t)
	_, auth, err := s.PullReporting(context.Background(), ref, PullOptions{Keychain: SecretsKeychain(secrets)})
	if err != nil {
		t.Fatal(err)
	}
	got, ok := auth.(*SecretCredential)
	if !ok || got.Secret != (SecretRef{Namespace: "ns", Name: "right", UID: "uid-right"}) || got.Hash != CredentialHash(authn.AuthConfig{Username: "alice", Password: "right"}) {
		t.Errorf("reported %#v, want the secret right's credential", auth)
	}
	creds, err := SecretCredentials(secrets, ref)
	if err != nil || len(creds) != 2 || creds[0].Secret.Name != "wrong" || creds[1].Secret.Name != "right" {
		t.Errorf("SecretCredentials = %v, %v; want wrong's then right's", creds, err)
	}
	if creds, _ := SecretCredentials(secrets, "elsewhere.example.com/app:1"); len(creds) != 0 {
		t.Errorf("credentials for another registry: %v", creds)
	}

	reg.user, reg.password = "", ""
	reg.push(t, "test/public:1", image(t, "", layer(t, file("public", "p"))))
	if _, auth, err = s.PullReporting(context.Background(), reg.host+"/test/public:1", PullOptions{}); err != nil || auth != authn.Anonymous {
		t.Errorf("anonymous pull reported %v, %v; want authn.Anonymous", auth, err)
	}
}
