package nodeagent

import (
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"jobkeeper.dev/jobkeeper/internal/testimages"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/imagemanager"
)

// TestEnsureSecretPulledImages is upstream's e2e "Ensure Credential Pulled
// Images" matrix under the default policy (NeverVerifyPreloadedImages):
// once a pod pulled a private image with a pull secret, a pod may use the
// copy on the node only with that secret or another holding the same
// credential; without one, IfNotPresent pulls again with the pod's
// credentials (and the registry refuses them) and Never cannot have it.
// An image pulled without credentials, or loaded from a file, is anyone's.
func TestEnsureSecretPulledImages(t *testing.T) {
	img, err := testimages.Static(map[string][]byte{"/app": []byte("x")}, "/app")
	if err != nil {
		t.Fatal(err)
	}
	public, err := testimages.Static(map[string][]byte{"/public": []byte("y")}, "/public")
	if err != nil {
		t.Fatal(err)
	}
	host := testimages.Serve(t, map[string]v1.Image{"private/app:v1": img}, testimages.WithBasicAuth("user", "right"))
	publicHost := testimages.Serve(t, map[string]v1.Image{"public/app:v1": public})
	ref := host + "/private/app:v1"
	pod := func(name, image string, policy corev1.PullPolicy, secret string) *corev1.Pod {
		p := imagePod(name, image, policy)
		if secret != "" {
			p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: secret}}
		}
		return p
	}
	secret := func(name, host, password string) *corev1.Secret {
		s := dockerConfigSecret(name, host, "user", password)
		s.UID = types.UID("uid-" + name)
		return s
	}
	// The first pod has a wrong credential before the right one: the
	// record must name the one the registry took.
	first := pod("first", ref, corev1.PullAlways, "wrong")
	first.Spec.ImagePullSecrets = append(first.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: "right"})
	ta, rt, store := startAgentWithImages(t,
		secret("wrong", host, "wrong"),
		secret("right", host, "right"),
		secret("same-creds", host, "right"),
		secret("elsewhere", "somerepo.com", "right"),
		first,
		pod("public-first", publicHost+"/public/app:v1", corev1.PullIfNotPresent, ""))
	ta.waitPod(t, "first", phaseIs(corev1.PodRunning))
	ta.waitPod(t, "public-first", phaseIs(corev1.PodRunning))

	// A preloaded image: in the store, never pulled by the agent.
	loaded, err := testimages.Static(map[string][]byte{"/loaded": []byte("z")}, "/loaded")
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), "loaded.tar")
	if err := testimages.WriteDockerArchive(archive, map[string]v1.Image{"private.example/loaded:v1": loaded}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	if _, err := store.Load(t.Context(), f); err != nil {
		t.Fatal(err)
	}

	for _, p := range []*corev1.Pod{
		pod("none", ref, corev1.PullIfNotPresent, ""),
		pod("invalid", ref, corev1.PullIfNotPresent, "elsewhere"),
		pod("never-none", ref, corev1.PullNever, ""),
		pod("never-wrong", ref, corev1.PullNever, "wrong"),
		pod("same", ref, corev1.PullIfNotPresent, "right"),
		pod("same-creds", ref, corev1.PullNever, "same-creds"),
		pod("public-second", publicHost+"/public/app:v1", corev1.PullNever, ""),
		pod("preloaded", "private.example/loaded:v1", corev1.PullNever, ""),
	} {
		if _, err := ta.client.CoreV1().Pods("ns").Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"same", "same-creds", "public-second", "preloaded"} {
		ta.waitPod(t, name, phaseIs(corev1.PodRunning))
	}
	if !ta.eventWith(t, "Pulled", `Container image "`+ref+`" already present on machine and can be accessed by the pod`) {
		t.Error("no Pulled event saying the pod may use the image")
	}
	for name, reason := range map[string]string{
		"none":        imagemanager.ReasonErrImagePull,
		"invalid":     imagemanager.ReasonErrImagePull,
		"never-none":  imagemanager.ReasonErrImageNeverPull,
		"never-wrong": imagemanager.ReasonErrImageNeverPull,
	} {
		got := ta.waitPod(t, name, func(p *corev1.Pod) bool { return waitingReason(p) == reason })
		if got.Status.Phase != corev1.PodPending {
			t.Errorf("%s: phase %s, want Pending", name, got.Status.Phase)
		}
	}
	never := ta.waitPod(t, "never-none", func(p *corev1.Pod) bool { return waitingReason(p) == imagemanager.ReasonErrImageNeverPull })
	if msg := never.Status.ContainerStatuses[0].State.Waiting.Message; msg != `Container image "`+ref+`" is not present with pull policy of Never` {
		t.Errorf("never-none: message %q", msg)
	}
	if n := rt.count("main"); n != 6 {
		t.Errorf("%d containers ran, want 6 (first, public-first, same, same-creds, public-second, preloaded)", n)
	}
}
