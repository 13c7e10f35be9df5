package podconfig

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

func TestProcessArgs(t *testing.T) {
	img := ImageDefaults{Entrypoint: []string{"/entry", "-x"}, Cmd: []string{"serve", "--port=1"}}
	for _, tc := range []struct {
		name          string
		command, args []string
		img           ImageDefaults
		want          []string
	}{
		{name: "neither: entrypoint then cmd", img: img, want: []string{"/entry", "-x", "serve", "--port=1"}},
		{name: "command drops cmd", command: []string{"sh"}, img: img, want: []string{"sh"}},
		{name: "command and args", command: []string{"sh"}, args: []string{"-c", "true"}, img: img, want: []string{"sh", "-c", "true"}},
		{name: "args replace cmd, keep entrypoint", args: []string{"once"}, img: img, want: []string{"/entry", "-x", "once"}},
		{name: "args without entrypoint", args: []string{"sh", "-c", "true"}, img: ImageDefaults{Cmd: []string{"sh"}}, want: []string{"sh", "-c", "true"}},
		{name: "cmd only", img: ImageDefaults{Cmd: []string{"sh"}}, want: []string{"sh"}},
		{name: "nothing to run", img: ImageDefaults{}, want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ProcessArgs(tc.command, tc.args, tc.img); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("processArgs = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestImageEnv(t *testing.T) {
	got := ImageEnv(ImageDefaults{Env: []string{"PATH=/opt/bin:/bin", "LANG=C", "EMPTY="}}, []string{"HOSTNAME=p", "LANG=C.UTF-8"})
	want := []string{"PATH=/opt/bin:/bin", "LANG=C.UTF-8", "EMPTY=", "HOSTNAME=p"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("imageEnv = %q, want %q", got, want)
	}
	got = ImageEnv(ImageDefaults{}, []string{"A=1"})
	want = []string{"PATH=" + defaultPath, "A=1"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("imageEnv without PATH = %q, want %q", got, want)
	}
}

func TestImageWorkingDir(t *testing.T) {
	if got := ImageWorkingDir(&corev1.Container{WorkingDir: "/w"}, ImageDefaults{WorkingDir: "/img"}); got != "/w" {
		t.Errorf("spec's workingDir: got %q", got)
	}
	if got := ImageWorkingDir(&corev1.Container{}, ImageDefaults{WorkingDir: "/img"}); got != "/img" {
		t.Errorf("image's workingDir: got %q", got)
	}
	if got := ImageWorkingDir(&corev1.Container{}, ImageDefaults{}); got != "/" {
		t.Errorf("default workingDir: got %q", got)
	}
}

func TestDefaultPullPolicy(t *testing.T) {
	for image, want := range map[string]corev1.PullPolicy{
		"busybox":                      corev1.PullAlways,
		"busybox:latest":               corev1.PullAlways,
		"busybox:1.36":                 corev1.PullIfNotPresent,
		"localhost:5000/app":           corev1.PullAlways,
		"localhost:5000/app:v1":        corev1.PullIfNotPresent,
		"registry.k8s.io/pause:3.10.2": corev1.PullIfNotPresent,
		"busybox@sha256:aa":            corev1.PullIfNotPresent,
	} {
		if got := DefaultPullPolicy(image); got != want {
			t.Errorf("defaultPullPolicy(%q) = %s, want %s", image, got, want)
		}
	}
}

func TestDecidePull(t *testing.T) {
	for _, tc := range []struct {
		policy  corev1.PullPolicy
		present bool
		want    PullStep
	}{
		{corev1.PullAlways, true, PullImage},
		{corev1.PullAlways, false, PullImage},
		{corev1.PullIfNotPresent, true, UseLocal},
		{corev1.PullIfNotPresent, false, PullImage},
		{corev1.PullNever, true, UseLocal},
		{corev1.PullNever, false, NeverPulled},
	} {
		if got := DecidePull(tc.policy, tc.present); got != tc.want {
			t.Errorf("decidePull(%s, present=%v) = %d, want %d", tc.policy, tc.present, got, tc.want)
		}
	}
}

func TestWithDefaultTag(t *testing.T) {
	for image, want := range map[string]string{
		"busybox":                   "busybox:latest",
		"busybox:1.36":              "busybox:1.36",
		"localhost:5000/app":        "localhost:5000/app:latest",
		"localhost:5000/app:v1":     "localhost:5000/app:v1",
		"busybox@sha256:abc":        "busybox@sha256:abc",
		"registry.k8s.io/pause:3.9": "registry.k8s.io/pause:3.9",
	} {
		if got := WithDefaultTag(image); got != want {
			t.Errorf("withDefaultTag(%q) = %q, want %q", image, got, want)
		}
	}
}

func TestByDepth(t *testing.T) {
	got := ByDepth([]runtime.Mount{
		{Target: "/etc/hosts"}, {Target: "/data"}, {Target: "/etc"}, {Target: "/etc/hostname"}, {Target: "/a/b/c"}, {Target: "/b"},
	})
	var order []string
	for _, m := range got {
		order = append(order, m.Target)
	}
	want := []string{"/data", "/etc", "/b", "/etc/hosts", "/etc/hostname", "/a/b/c"}
	if !reflect.DeepEqual(order, want) {
		t.Errorf("byDepth = %q, want %q (parents first, equal depths in their order)", order, want)
	}
}
