package imagemanager

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"k8s.io/apimachinery/pkg/types"

	"jobkeeper.dev/jobkeeper/pkg/images"
)

func secretCred(ns, name, uid, password string) PullCredential {
	auth := authn.AuthConfig{Username: "user", Password: password}
	return &images.SecretCredential{Authenticator: authn.FromConfig(auth), Secret: images.SecretRef{Namespace: ns, Name: name, UID: types.UID(uid)}, Hash: images.CredentialHash(auth)}
}

func TestPullRecords(t *testing.T) {
	now := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	open := func(t *testing.T, dir string) *PullRecords {
		t.Helper()
		r, err := OpenPullRecords(dir, func() time.Time { return now })
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	const image, id = "registry.example/private/app:v1", "sha256:aaa"
	right := secretCred("ns", "right", "u1", "right")
	with := func(creds ...PullCredential) func() []PullCredential { return func() []PullCredential { return creds } }
	asked := func(t *testing.T) func() []PullCredential {
		return func() []PullCredential { t.Error("the pod's credentials asked for when not needed"); return nil }
	}

	t.Run("never pulled here: anyone", func(t *testing.T) {
		r := open(t, t.TempDir())
		if !r.MayUse(image, id, asked(t)) {
			t.Error("a preloaded image refused")
		}
	})
	t.Run("pulled with a secret: that secret, or its credential elsewhere", func(t *testing.T) {
		r := open(t, t.TempDir())
		done, err := r.Intend(image)
		if err != nil {
			t.Fatal(err)
		}
		again, err := r.Intend(image)
		if err != nil {
			t.Fatal(err)
		}
		if r.MayUse(image, id, asked(t)) {
			t.Error("usable by anyone while its pull is under way")
		}
		done()
		if r.MayUse(image, id, asked(t)) {
			t.Error("usable by anyone while a second pull of it is under way")
		}
		if err := r.Record(image, id, right); err != nil {
			t.Fatal(err)
		}
		again()
		for _, tc := range []struct {
			name  string
			creds []PullCredential
			want  bool
		}{
			{"no credentials", nil, false},
			{"another credential", []PullCredential{secretCred("ns", "wrong", "u2", "wrong")}, false},
			{"the same name in another namespace", []PullCredential{secretCred("other", "right", "u9", "wrong")}, false},
			{"the same secret", []PullCredential{right}, true},
			{"the same secret, rotated", []PullCredential{secretCred("ns", "right", "u1", "new")}, true},
			{"another secret with the credential", []PullCredential{secretCred("other", "copy", "u3", "right")}, true},
			{"the credential among others", []PullCredential{secretCred("ns", "wrong", "u2", "wrong"), secretCred("ns", "x", "u4", "right")}, true},
		} {
			if got := r.MayUse(image, id, with(tc.creds...)); got != tc.want {
				t.Errorf("%s: MayUse = %v, want %v", tc.name, got, tc.want)
			}
		}
		// Another tag of the same repository shares the mapping; another
		// repository with the same image ID does not.
		if !r.MayUse("registry.example/private/app:v2", id, with(right)) {
			t.Error("same repository, other tag refused")
		}
		if r.MayUse("registry.example/other:v1", id, with(right)) {
			t.Error("another repository with no record of its own allowed")
		}
	})
	t.Run("pulled anonymously: anyone, even after a secret's pull", func(t *testing.T) {
		r := open(t, t.TempDir())
		if err := r.Record(image, id, right); err != nil {
			t.Fatal(err)
		}
		if err := r.Record(image, id, nil); err != nil {
			t.Fatal(err)
		}
		if err := r.Record(image, id, right); err != nil {
			t.Fatal(err)
		}
		if !r.MayUse(image, id, asked(t)) {
			t.Error("an anonymously pulled image refused")
		}
	})
	t.Run("an intent left by a stopped agent: the image must be proven", func(t *testing.T) {
		dir := t.TempDir()
		r := open(t, dir)
		if _, err := r.Intend(image); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Intend("registry.example/gone:v1"); err != nil {
			t.Fatal(err)
		}
		// The agent stops; a new one opens the records.
		r = open(t, dir)
		if err := r.Recover(func(img string) (string, bool) { return id, img == image }); err != nil {
			t.Fatal(err)
		}
		if r.MayUse(image, id, with(right)) {
			t.Error("an image whose pull was cut short usable without a record of who pulled it")
		}
		if r.MayUse("registry.example/gone:v1", "sha256:bbb", asked(t)) {
			t.Error("an image whose intent stays (not in the store) counts as preloaded")
		}
		left, _ := os.ReadDir(filepath.Join(dir, "pulling"))
		if len(left) != 1 {
			t.Errorf("%d intents left, want the absent image's only", len(left))
		}
	})
	t.Run("prune: records of images gone", func(t *testing.T) {
		dir := t.TempDir()
		r := open(t, dir)
		if err := r.Record(image, id, right); err != nil {
			t.Fatal(err)
		}
		if err := r.Record("registry.example/kept:v1", "sha256:kept", right); err != nil {
			t.Fatal(err)
		}
		if err := r.Prune(func(ref string) bool { return ref == "sha256:kept" }, now); err != nil {
			t.Fatal(err)
		}
		if r.MayUse(image, id, with()) {
			t.Error("a record updated after the cut-off removed")
		}
		if err := r.Prune(func(ref string) bool { return ref == "sha256:kept" }, now.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		if !r.MayUse(image, id, with()) {
			t.Error("the record of a removed image kept (the image would count as pulled)")
		}
		if r.MayUse("registry.example/kept:v1", "sha256:kept", with()) {
			t.Error("the record of a kept image removed")
		}
	})
	t.Run("a record that cannot be written denies the image until one is", func(t *testing.T) {
		dir := t.TempDir()
		r := open(t, dir)
		pulled := filepath.Join(dir, "pulled")
		if err := os.RemoveAll(pulled); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(pulled, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := r.Record(image, id, nil); err == nil {
			t.Fatal("Record wrote into a file")
		}
		if r.MayUse(image, id, with(right)) {
			t.Error("an image whose record failed usable")
		}
		if err := os.Remove(pulled); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(pulled, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := r.Record(image, id, nil); err != nil {
			t.Fatal(err)
		}
		if !r.MayUse(image, id, asked(t)) {
			t.Error("still denied once its record is written")
		}
	})
	t.Run("a record cut short is written anew", func(t *testing.T) {
		dir := t.TempDir()
		r := open(t, dir)
		if err := os.WriteFile(r.fileName("pulled", id), []byte(`{"imageRef":`), 0o600); err != nil {
			t.Fatal(err)
		}
		if r.MayUse(image, id, with(right)) {
			t.Error("an unreadable record allowed")
		}
		if err := r.Record(image, id, right); err != nil {
			t.Fatal(err)
		}
		if !r.MayUse(image, id, with(right)) {
			t.Error("the secret that pulled it refused after the record was rewritten")
		}
	})
}
