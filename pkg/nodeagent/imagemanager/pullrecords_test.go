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

	t.Run("never pulled here: anyone", func(t *testing.T) {
		r := open(t, t.TempDir())
		if !r.MayUse(image, id, nil) {
			t.Error("a preloaded image refused")
		}
	})
	t.Run("pulled with a secret: that secret, or its credential elsewhere", func(t *testing.T) {
		r := open(t, t.TempDir())
		done, err := r.Intend(image)
		if err != nil {
			t.Fatal(err)
		}
		if r.MayUse(image, id, nil) {
			t.Error("usable by anyone while its pull is under way")
		}
		if err := r.Record(image, id, right); err != nil {
			t.Fatal(err)
		}
		done()
		for name, tc := range map[string]struct {
			creds []PullCredential
			want  bool
		}{
			"no credentials":                     {nil, false},
			"another credential":                 {[]PullCredential{secretCred("ns", "wrong", "u2", "wrong")}, false},
			"the same secret":                    {[]PullCredential{right}, true},
			"the same secret, rotated":           {[]PullCredential{secretCred("ns", "right", "u1", "new")}, true},
			"another secret with the credential": {[]PullCredential{secretCred("other", "copy", "u3", "right")}, true},
			"the credential among others":        {[]PullCredential{secretCred("ns", "wrong", "u2", "wrong"), secretCred("ns", "x", "u4", "right")}, true},
		} {
			if got := r.MayUse(image, id, tc.creds); got != tc.want {
				t.Errorf("%s: MayUse = %v, want %v", name, got, tc.want)
			}
		}
		// Another tag of the same repository shares the mapping; another
		// repository with the same image ID does not.
		if !r.MayUse("registry.example/private/app:v2", id, []PullCredential{right}) {
			t.Error("same repository, other tag refused")
		}
		if r.MayUse("registry.example/other:v1", id, []PullCredential{right}) {
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
		if !r.MayUse(image, id, nil) {
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
		if r.MayUse(image, id, []PullCredential{right}) {
			t.Error("an image whose pull was cut short usable without a record of who pulled it")
		}
		if r.MayUse("registry.example/gone:v1", "sha256:bbb", nil) {
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
		if err := r.Prune(func(ref string) bool { return ref == "sha256:kept" }, now.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		if !r.MayUse(image, id, nil) {
			t.Error("the record of a removed image kept (the image would count as pulled)")
		}
		if r.MayUse("registry.example/kept:v1", "sha256:kept", nil) {
			t.Error("the record of a kept image removed")
		}
	})
}
