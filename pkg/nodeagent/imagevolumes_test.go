package nodeagent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	testingclock "k8s.io/utils/clock/testing"

	"jobkeeper.dev/jobkeeper/internal/testimages"
	"jobkeeper.dev/jobkeeper/pkg/images"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/imagemanager"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// imageVolumePod runs image with an image volume of volImage mounted at
// /data, and its "models" directory at /models.
func imageVolumePod(name, image, volImage string) *corev1.Pod {
	p := imagePod(name, image, corev1.PullIfNotPresent)
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{
		Image: &corev1.ImageVolumeSource{Reference: volImage, PullPolicy: corev1.PullIfNotPresent},
	}})
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{
		{Name: "data", MountPath: "/data"},
		{Name: "data", MountPath: "/models", SubPath: "models"},
	}
	return p
}

// TestImageVolumePulledAndMounted: an image volume's image is pulled as
// the kubelet pulls it (events on the pod) and the container gets it as
// read-only mounts of the image's layers, whole and by subPath; an image
// volume that cannot be pulled keeps the container waiting with the
// pull's reason, and nothing runs.
func TestImageVolumePulledAndMounted(t *testing.T) {
	app, err := testimages.Static(map[string][]byte{"/bin/app": []byte("#!not really\n")}, "/bin/app")
	if err != nil {
		t.Fatal(err)
	}
	data, err := testimages.Static(map[string][]byte{"/models/m.bin": []byte("weights")}, "/models/m.bin")
	if err != nil {
		t.Fatal(err)
	}
	host := testimages.Serve(t, map[string]v1.Image{"test/app:v1": app, "test/data:v1": data})
	appRef, dataRef := host+"/test/app:v1", host+"/test/data:v1"

	ta, rt, store := startAgentWithImagesOn(t, func(rt *fakeRuntime) runtime.Runtime { return isolatingRuntime{Runtime: rt, ok: true} },
		imageVolumePod("p", appRef, dataRef), imageVolumePod("missing", appRef, host+"/test/absent:v1"))

	h := rt.attempt(t, "main", 0)
	local, err := store.Lookup(dataRef)
	if err != nil {
		t.Fatalf("the image volume's image is not in the store: %v", err)
	}
	var got []runtime.Mount
	for _, m := range h.spec.Mounts {
		if m.ImageVolume != "" {
			got = append(got, m)
		}
	}
	want := []runtime.Mount{
		{Target: "/data", ReadOnly: true, ImageVolume: "data", Layers: local.Layers},
		{Target: "/models", SubPath: "models", ReadOnly: true, ImageVolume: "data", Layers: local.Layers},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("image volume mounts %+v, want %+v", got, want)
	}
	ta.waitPod(t, "p", phaseIs(corev1.PodRunning))
	if !ta.eventWith(t, "Pulling", `Pulling image "`+dataRef+`"`) {
		t.Error("no Pulling event for the image volume")
	}
	// Pull events of an image volume are the pod's, as the kubelet's.
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := ta.client.CoreV1().Events("ns").List(ctx, metav1.ListOptions{})
		for _, e := range evs.Items {
			if e.Reason == "Pulling" && e.InvolvedObject.Name == "p" && e.InvolvedObject.FieldPath == "" {
				return true, nil
			}
		}
		return false, err
	}); err != nil {
		t.Error("no Pulling event on the pod itself for the image volume")
	}

	m := ta.waitPod(t, "missing", func(p *corev1.Pod) bool { return waitingReason(p) == imagemanager.ReasonErrImagePull })
	if m.Status.Phase != corev1.PodPending {
		t.Errorf("phase %s, want Pending while the image volume cannot be pulled", m.Status.Phase)
	}
	if !ta.eventWith(t, "Failed", "Error: "+imagemanager.ReasonErrImagePull) {
		t.Error("no Failed event for the container whose image volume cannot be pulled")
	}
	// As the kubelet: the "Error:" event is the container's, once, not
	// the pod's as well.
	evs, err := ta.client.CoreV1().Events("ns").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.InvolvedObject.Name == "missing" && e.Message == "Error: "+imagemanager.ReasonErrImagePull && e.InvolvedObject.FieldPath != "spec.containers{main}" {
			t.Errorf("an %q event on %q, want it on the container only", e.Message, e.InvolvedObject.FieldPath)
		}
	}
	if n := rt.count("main"); n != 1 {
		t.Errorf("%d attempts of main ran, want pod p's only (pod missing's waits for its image volume)", n)
	}
}

// TestAdoptedContainerHoldsItsImageVolume: a restarted agent that takes
// over a running container holds the image of the image volume it mounts,
// so that garbage collection and `image rm` leave the layers it uses.
func TestAdoptedContainerHoldsItsImageVolume(t *testing.T) {
	data, err := testimages.Static(map[string][]byte{"/models/m.bin": []byte("weights")}, "/models/m.bin")
	if err != nil {
		t.Fatal(err)
	}
	store, err := images.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	archive := filepath.Join(t.TempDir(), "data.tar")
	if err := testimages.WriteDockerArchive(archive, map[string]v1.Image{"example.com/data:1": data}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := store.Load(context.Background(), f); err != nil {
		t.Fatal(err)
	}
	started := t0.Add(-time.Minute).Truncate(time.Second)
	h := &fakeHandle{pid: 42, started: started, done: make(chan struct{})}
	pod := runningPod("p", "u1", started)
	pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "example.com/data:1"}}}}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	dataDir := t.TempDir()
	prev := &Agent{opts: Options{DataDir: dataDir}}
	dir := prev.attemptStateDir("u1", "main", 0)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	rt := &adoptingRuntime{left: map[string]runtime.Adopted{dir: {Found: true, Handle: h, PID: 42, StartedAt: started}}}
	ta := startAgentOn(t, Options{MaxPods: 10, Runtime: "simulated", DataDir: dataDir, Images: ImagesHost, imageStore: store}, func(clk *testingclock.FakeClock) runtime.Runtime {
		rt.fakeRuntime = newFakeRuntime(clk)
		return isolatingAdopter{rt}
	}, pod)
	h.rt = rt.fakeRuntime
	ta.waitPod(t, "p", func(p *corev1.Pod) bool { return getCondition(p, corev1.PodReady) != nil })
	img, err := store.Lookup("example.com/data:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Remove(img.ID); !errors.Is(err, images.ErrInUse) {
		t.Error("the image of an adopted container's image volume was removed while the container runs")
	}
	if n := rt.count("main"); n != 0 {
		t.Errorf("%d attempts started, want none", n)
	}
}
