package nodeagent

import (
	"context"
	"encoding/base64"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	testingclock "k8s.io/utils/clock/testing"

	"jobkeeper.dev/jobkeeper/internal/testimages"
	"jobkeeper.dev/jobkeeper/pkg/images"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/imagemanager"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/podconfig"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
	"jobkeeper.dev/jobkeeper/test/builder"
)

// startAgentWithImages runs an agent whose fake runtime runs images from a
// store of its own, and returns the store.
func startAgentWithImages(t *testing.T, objs ...kruntime.Object) (*testAgent, *fakeRuntime, *images.Store) {
	t.Helper()
	return startAgentWithImagesOn(t, func(rt *fakeRuntime) runtime.Runtime { return rt }, objs...)
}

// startAgentWithImagesOn is startAgentWithImages with the fake runtime
// wrapped by wrap (one that isolates, say).
func startAgentWithImagesOn(t *testing.T, wrap func(*fakeRuntime) runtime.Runtime, objs ...kruntime.Object) (*testAgent, *fakeRuntime, *images.Store) {
	t.Helper()
	store, err := images.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	var rt *fakeRuntime
	ta := startAgentOn(t, Options{MaxPods: 10, Runtime: "simulated", imageStore: store}, func(clk *testingclock.FakeClock) runtime.Runtime {
		rt = newFakeRuntime(clk)
		return wrap(rt)
	}, objs...)
	return ta, rt, store
}

// imagePod is a pod running image with the given policy and args only.
func imagePod(name, image string, policy corev1.PullPolicy, args ...string) *corev1.Pod {
	p := builder.MakePod(name, "ns").UID(name).Obj()
	c := &p.Spec.Containers[0]
	c.Image, c.ImagePullPolicy, c.Command, c.Args = image, policy, nil, args
	return p
}

// eventWith reports whether an event with reason and a message containing
// text appears in "ns" (events are recorded asynchronously: it polls).
func (ta *testAgent) eventWith(t *testing.T, reason, text string) bool {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := ta.client.CoreV1().Events("ns").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, e := range evs.Items {
			if e.Reason == reason && strings.Contains(e.Message, text) {
				return true, nil
			}
		}
		return false, nil
	})
	return err == nil
}

// waitingReason returns the main container's waiting reason.
func waitingReason(p *corev1.Pod) string {
	if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Waiting == nil {
		return ""
	}
	return p.Status.ContainerStatuses[0].State.Waiting.Reason
}

func TestImagePulledAndRun(t *testing.T) {
	img, err := testimages.Static(map[string][]byte{"/bin/app": []byte("#!not really\n")}, "/bin/app", "--serve")
	if err != nil {
		t.Fatal(err)
	}
	img, err = testimages.WithWhiteout(img, "/bin/gone")
	if err != nil {
		t.Fatal(err)
	}
	host := testimages.Serve(t, map[string]v1.Image{"test/app:v1": img})
	ref := host + "/test/app:v1"
	ta, rt, store := startAgentWithImages(t, imagePod("p", ref, corev1.PullIfNotPresent, "once"))

	h := rt.attempt(t, "main", 0)
	if want := []string{"/bin/app", "--serve", "once"}; !reflect.DeepEqual(h.spec.Command, want) {
		t.Errorf("argv = %q, want the image's entrypoint with the container's args %q", h.spec.Command, want)
	}
	local, err := store.Lookup(ref)
	if err != nil {
		t.Fatalf("the pulled image is not in the store: %v", err)
	}
	if h.spec.Rootfs == nil || !reflect.DeepEqual(h.spec.Rootfs.Layers, local.Layers) {
		t.Errorf("rootfs = %+v, want the stored layers %q", h.spec.Rootfs, local.Layers)
	}
	targets := map[string]bool{}
	for _, m := range h.spec.Mounts {
		targets[m.Target] = true
	}
	for _, f := range []string{"/etc/hosts", "/etc/hostname", "/etc/resolv.conf"} {
		if !targets[f] {
			t.Errorf("no managed %s among the mounts %+v", f, h.spec.Mounts)
		}
	}
	if h.spec.User == nil {
		t.Error("no user for an image container")
	}
	p := ta.waitPod(t, "p", phaseIs(corev1.PodRunning))
	cs := p.Status.ContainerStatuses[0]
	if cs.Image != ref || !strings.HasPrefix(cs.ImageID, host+"/test/app@sha256:") {
		t.Errorf("status image %q, imageID %q: want %q and its repository digest", cs.Image, cs.ImageID, ref)
	}
	if !ta.eventWith(t, "Pulling", `Pulling image "`+ref+`"`) || !ta.eventWith(t, "Pulled", "Successfully pulled image") {
		t.Error("no Pulling and Pulled events")
	}
	// Container events name their container, as the kubelet's.
	for _, reason := range []string{"Pulled", "Created", "Started"} {
		if e := ta.waitEvent(t, reason); e.InvolvedObject.FieldPath != "spec.containers{main}" || e.InvolvedObject.Name != "p" {
			t.Errorf("%s event on %s %q, want pod p's spec.containers{main}", reason, e.InvolvedObject.Name, e.InvolvedObject.FieldPath)
		}
	}

	// A second pod of the image finds it present.
	if _, err := ta.client.CoreV1().Pods("ns").Create(t.Context(), imagePod("q", ref, corev1.PullIfNotPresent), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ta.waitPod(t, "q", phaseIs(corev1.PodRunning))
	if !ta.eventWith(t, "Pulled", "already present on machine") {
		t.Error("no \"already present\" event for the second pod")
	}
}

func TestImagePullFailuresBackOff(t *testing.T) {
	host := testimages.Serve(t, nil)
	ref := host + "/test/missing:v1"
	ta, rt, _ := startAgentWithImages(t, imagePod("p", ref, corev1.PullIfNotPresent))

	p := ta.waitPod(t, "p", func(p *corev1.Pod) bool { return waitingReason(p) == imagemanager.ReasonErrImagePull })
	if msg := p.Status.ContainerStatuses[0].State.Waiting.Message; msg == "" {
		t.Error("ErrImagePull without a message")
	}
	if p.Status.Phase != corev1.PodPending {
		t.Errorf("phase %s, want Pending while the image cannot be pulled", p.Status.Phase)
	}
	if !ta.eventWith(t, "Failed", "jobkeeper image load") {
		t.Error("the Failed event does not say how to get the image without a registry")
	}
	ta.stepUntil(t, time.Second, func() bool {
		p, _ := ta.client.CoreV1().Pods("ns").Get(t.Context(), "p", metav1.GetOptions{})
		return waitingReason(p) == imagemanager.ReasonImagePullBackOff
	})
	p = ta.waitPod(t, "p", func(p *corev1.Pod) bool { return waitingReason(p) == imagemanager.ReasonImagePullBackOff })
	if msg := p.Status.ContainerStatuses[0].State.Waiting.Message; !strings.HasPrefix(msg, `Back-off pulling image "`+ref+`": ErrImagePull: `) {
		t.Errorf("back-off message %q", msg)
	}
	if !ta.eventWith(t, "BackOff", `Back-off pulling image "`+ref+`"`) {
		t.Error("no BackOff event")
	}
	if n := rt.count("main"); n != 0 {
		t.Errorf("%d attempts ran without an image", n)
	}
}

func TestImageNeverPulledAndInvalidName(t *testing.T) {
	ta, rt, _ := startAgentWithImages(t,
		imagePod("never", "example.invalid/app:v1", corev1.PullNever),
		imagePod("bad", "UPPER/Case:v1", corev1.PullIfNotPresent))
	p := ta.waitPod(t, "never", func(p *corev1.Pod) bool { return waitingReason(p) == imagemanager.ReasonErrImageNeverPull })
	if want := `Container image "example.invalid/app:v1" is not present with pull policy of Never`; p.Status.ContainerStatuses[0].State.Waiting.Message != want {
		t.Errorf("message %q, want %q", p.Status.ContainerStatuses[0].State.Waiting.Message, want)
	}
	ta.waitPod(t, "bad", func(p *corev1.Pod) bool { return waitingReason(p) == imagemanager.ReasonInvalidImageName })
	if !ta.eventWith(t, "InspectFailed", `Failed to apply default image tag "UPPER/Case:v1"`) {
		t.Error("no InspectFailed event")
	}
	if n := rt.count("main"); n != 0 {
		t.Errorf("%d attempts ran", n)
	}
}

// dockerConfigSecret is a kubernetes.io/dockerconfigjson secret for host.
func dockerConfigSecret(name, host, user, password string) *corev1.Secret {
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"` + host + `":{"auth":"` + auth + `"}}}`)},
	}
}

func TestImagePullSecrets(t *testing.T) {
	img, err := testimages.Static(map[string][]byte{"/app": []byte("x")}, "/app")
	if err != nil {
		t.Fatal(err)
	}
	host := testimages.Serve(t, map[string]v1.Image{"private/app:v1": img}, testimages.WithBasicAuth("user", "right"))
	ref := host + "/private/app:v1"
	withSecret := func(name, secret string) *corev1.Pod {
		p := imagePod(name, ref, corev1.PullIfNotPresent)
		p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: secret}}
		return p
	}
	ta, rt, _ := startAgentWithImages(t,
		dockerConfigSecret("wrong", host, "user", "wrong"),
		withSecret("refused", "wrong"),
		withSecret("missing", "absent"))

	p := ta.waitPod(t, "refused", func(p *corev1.Pod) bool { return waitingReason(p) == imagemanager.ReasonErrImagePull })
	if msg := p.Status.ContainerStatuses[0].State.Waiting.Message; !strings.Contains(msg, "unauthorized") {
		t.Errorf("refused credentials: waiting message %q does not say unauthorized", msg)
	}
	ta.waitPod(t, "missing", func(p *corev1.Pod) bool { return waitingReason(p) == imagemanager.ReasonErrImagePull })
	if !ta.eventWith(t, "FailedToRetrieveImagePullSecret", `Unable to retrieve some image pull secrets ("absent")`) {
		t.Error("no event for the missing pull secret")
	}
	if n := rt.count("main"); n != 0 {
		t.Fatalf("%d attempts ran without the image", n)
	}

	if _, err := ta.client.CoreV1().Secrets("ns").Create(t.Context(), dockerConfigSecret("right", host, "user", "right"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ta.client.CoreV1().Pods("ns").Create(t.Context(), withSecret("allowed", "right"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ta.waitPod(t, "allowed", phaseIs(corev1.PodRunning))
}

func TestImageWithoutCommandIsACreateError(t *testing.T) {
	img, err := testimages.Static(map[string][]byte{"/app": []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	host := testimages.Serve(t, map[string]v1.Image{"test/nocmd:v1": img})
	ta, rt, _ := startAgentWithImages(t, imagePod("p", host+"/test/nocmd:v1", corev1.PullIfNotPresent))
	p := ta.waitPod(t, "p", func(p *corev1.Pod) bool { return waitingReason(p) == podconfig.ReasonCreateContainerError })
	if msg := p.Status.ContainerStatuses[0].State.Waiting.Message; !strings.HasPrefix(msg, "no command specified") {
		t.Errorf("message %q", msg)
	}
	if n := rt.count("main"); n != 0 {
		t.Errorf("%d attempts ran", n)
	}
}

func TestImageHeldWhileThePodMayRestart(t *testing.T) {
	img, err := testimages.Static(map[string][]byte{"/app": []byte("x")}, "/app")
	if err != nil {
		t.Fatal(err)
	}
	host := testimages.Serve(t, map[string]v1.Image{"test/app:v1": img})
	ref := host + "/test/app:v1"
	pod := imagePod("p", ref, corev1.PullIfNotPresent)
	pod.Spec.RestartPolicy = corev1.RestartPolicyAlways
	ta, rt, store := startAgentWithImages(t, pod)
	rt.attempt(t, "main", 0).exit(1)
	ta.waitPod(t, "p", func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].LastTerminationState.Terminated != nil
	})
	// Between attempts (back-off) the image is still the pod's.
	if err := store.Remove(ref); !errors.Is(err, images.ErrInUse) {
		t.Fatalf("removing the image of a restarting pod: %v, want ErrInUse", err)
	}
	if err := ta.client.CoreV1().Pods("ns").Delete(t.Context(), "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ta.waitGone(t, "p")
	if err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return store.Remove(ref) == nil, nil
	}); err != nil {
		t.Errorf("the image stayed in use after its pod was gone: %v", store.Remove(ref))
	}
}
