package volume

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// isolatingRuntime is a runtime that reports a fixed isolation.
type isolatingRuntime struct {
	runtime.Runtime
	// ok and why are what Isolation reports.
	ok  bool
	why string
}

func (r isolatingRuntime) Isolation() (bool, string) { return r.ok, r.why }
func (isolatingRuntime) Name() string                { return "test" }

// t0 is the tests' fake now.
var t0 = time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)

// testAgent is what a volume manager needs of an agent, as tests give it.
type testAgent struct {
	// client is the fake apiserver.
	client kubernetes.Interface
	// clock is the fake clock.
	clock clock.WithTicker
	// dataDir holds the pods' directories.
	dataDir string
	// volumes is the manager under test.
	volumes *Manager
}

// podDir is the pod's directory under the data dir, as the agent's.
func (a *testAgent) podDir(uid types.UID) string {
	return filepath.Join(a.dataDir, "pods", string(uid))
}

// volumeAgent is a volume manager with a fake client holding objs, events
// recorded by the returned recorder.
func volumeAgent(t *testing.T, isolated bool, objs ...any) (*testAgent, *record.FakeRecorder) {
	t.Helper()
	client := fake.NewClientset()
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.ConfigMap:
			_, _ = client.CoreV1().ConfigMaps(o.Namespace).Create(context.Background(), o, metav1.CreateOptions{})
		case *corev1.Secret:
			_, _ = client.CoreV1().Secrets(o.Namespace).Create(context.Background(), o, metav1.CreateOptions{})
		}
	}
	rec := record.NewFakeRecorder(10)
	a := &testAgent{client: client, clock: testingclock.NewFakeClock(t0), dataDir: t.TempDir()}
	rt := isolatingRuntime{ok: isolated, why: "no namespaces here"}
	a.volumes = New(Config{
		Client:  client,
		Clock:   a.clock,
		PodDir:  a.podDir,
		Event:   func(pod *corev1.Pod, eventType, reason, message string) { rec.Event(pod, eventType, reason, message) },
		Runtime: func() runtime.Runtime { return rt },
	})
	return a, rec
}

// volumeFile is a file of a volume as a container reads it.
type volumeFile struct {
	content string
	mode    os.FileMode
}

// volumeFiles returns the files under vols as a container sees them: by
// "<volume>/<path>", through the links of the atomic layout (the version
// directories' names left out).
func volumeFiles(t *testing.T, vols string) map[string]volumeFile {
	t.Helper()
	out := map[string]volumeFile{}
	_ = filepath.Walk(vols, func(p string, info os.FileInfo, err error) error {
		if err != nil || !info.Mode().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(vols, p)
		var parts []string
		for _, part := range strings.Split(rel, string(filepath.Separator)) {
			if !strings.HasPrefix(part, "..") {
				parts = append(parts, part)
			}
		}
		name := filepath.Join(parts...)
		b, err := os.ReadFile(filepath.Join(vols, name))
		if err != nil {
			t.Errorf("%s is not reachable through the volume's links: %v", name, err)
		}
		out[name] = volumeFile{content: string(b), mode: info.Mode().Perm()}
		return nil
	})
	return out
}

func TestVolumeFiles(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg", Namespace: "ns"}, Data: map[string]string{"a": "1", "b": "2"}}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sec", Namespace: "ns"}, Data: map[string][]byte{"token": []byte("t")}}
	a, rec := volumeAgent(t, true, cm, sec)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1", Labels: map[string]string{"b": "x\"y", "a": "1"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", VolumeMounts: []corev1.VolumeMount{
				{Name: "cfg", MountPath: "/etc/cfg"},
				{Name: "one", MountPath: "/etc/one"},
				{Name: "sec", MountPath: "/etc/sec", ReadOnly: false},
				{Name: "info", MountPath: "/etc/info"},
				{Name: "work", MountPath: "/work", SubPathExpr: "$(POD)"},
			}}},
			Volumes: []corev1.Volume{
				{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, DefaultMode: ptr.To[int32](0o640)}}},
				{Name: "one", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"},
					Items: []corev1.KeyToPath{{Key: "b", Path: "sub/dir/b.txt", Mode: ptr.To[int32](0o600)}}}}},
				{Name: "sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "sec"}}},
				{Name: "info", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
					{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
					{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}},
				}}}},
				{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	}
	env := func(name string) (string, bool) { return map[string]string{"POD": "p"}[name], name == "POD" }
	mounts, err := a.volumes.Mounts(context.Background(), pod, &pod.Spec.Containers[0], env)
	if err != nil {
		t.Fatal(err)
	}
	vols := filepath.Join(a.podDir(pod.UID), "volumes")
	want := []runtime.Mount{
		{Source: filepath.Join(vols, "cfg"), Target: "/etc/cfg", ReadOnly: true},
		{Source: filepath.Join(vols, "one"), Target: "/etc/one", ReadOnly: true},
		{Source: filepath.Join(vols, "sec"), Target: "/etc/sec", ReadOnly: true},
		{Source: filepath.Join(vols, "info"), Target: "/etc/info", ReadOnly: true},
		{Source: filepath.Join(vols, "work"), SubPath: "p", Target: "/work"},
	}
	if !reflect.DeepEqual(mounts, want) {
		t.Errorf("mounts:\n got %+v\nwant %+v", mounts, want)
	}
	files := map[string]string{}
	modes := map[string]os.FileMode{}
	for name, f := range volumeFiles(t, vols) {
		files[name], modes[name] = f.content, f.mode
	}
	wantFiles := map[string]string{
		"cfg/a": "1", "cfg/b": "2", "one/sub/dir/b.txt": "2", "sec/token": "t",
		"info/labels": "a=\"1\"\nb=\"x\\\"y\"", "info/name": "p",
	}
	if !reflect.DeepEqual(files, wantFiles) {
		t.Errorf("files:\n got %q\nwant %q", files, wantFiles)
	}
	if modes["cfg/a"] != 0o640 || modes["one/sub/dir/b.txt"] != 0o600 || modes["sec/token"] != 0o644 {
		t.Errorf("modes %v", modes)
	}
	// The runtime resolves the subPath inside the volume, by handle, and
	// creates it there: the agent does not, since a container sharing the
	// volume could swap a link in between.
	if _, err := os.Lstat(filepath.Join(vols, "work", "p")); err == nil {
		t.Errorf("the agent created the subPathExpr directory on the host")
	}
	if len(rec.Events) != 0 {
		t.Errorf("unexpected event %s", <-rec.Events)
	}
}

func TestVolumeFailures(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg", Namespace: "ns"}, Data: map[string]string{"a": "1"}}
	cases := []struct {
		name   string
		volume corev1.VolumeSource
		mount  corev1.VolumeMount
		want   string
	}{
		{name: "missing configmap", volume: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "nope"}}},
			want: `MountVolume.SetUp failed for volume "v" : configmap "nope" not found`},
		{name: "missing key", volume: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Items: []corev1.KeyToPath{{Key: "zz", Path: "zz"}}}},
			want: "configmap references non-existent configmap key: zz"},
		{name: "missing secret", volume: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "nope"}}, want: `secret "nope" not found`},
		{name: "hostPath not a directory", volume: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/etc/hostname", Type: ptr.To(corev1.HostPathDirectory)}},
			want: "hostPath type check failed: /etc/hostname is not a directory"},
		{name: "hostPath missing", volume: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/no/such/path", Type: ptr.To(corev1.HostPathFile)}},
			want: "hostPath type check failed: /no/such/path does not exist"},
		{name: "subPath escapes", volume: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}, mount: corev1.VolumeMount{SubPath: "../x"},
			want: "must be a relative path without '..'"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, rec := volumeAgent(t, true, cm)
			m := tc.mount
			m.Name, m.MountPath = "v", "/v"
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", VolumeMounts: []corev1.VolumeMount{m}}}, Volumes: []corev1.Volume{{Name: "v", VolumeSource: tc.volume}}},
			}
			_, err := a.volumes.Mounts(context.Background(), pod, &pod.Spec.Containers[0], func(string) (string, bool) { return "", false })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if strings.HasPrefix(err.Error(), "MountVolume") {
				if ev := <-rec.Events; !strings.HasPrefix(ev, "Warning FailedMount MountVolume.SetUp failed") {
					t.Errorf("event %q", ev)
				}
			}
		})
	}
	// Optional sources that are missing are no error.
	a, _ := volumeAgent(t, true)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"},
		Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "nope"}, Optional: ptr.To(true)}}}}, Containers: []corev1.Container{{Name: "c"}}},
	}
	if _, err := a.volumes.Mounts(context.Background(), pod, &pod.Spec.Containers[0], nil); err != nil {
		t.Errorf("optional missing configmap: %v", err)
	}
}
