package nodeagent

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/lifecycle"
)

// envFilePod is upstream's FileKeyRef e2e pod: an init container writes
// config.env into an emptyDir, the main container takes keys from it.
func envFilePod(name string, env ...corev1.EnvVar) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Volumes:       []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			InitContainers: []corev1.Container{{Name: "setup", Image: "busybox", Command: []string{"sh", "-c", "echo CONFIG_1=\\'value1\\' > /data/config.env"},
				VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/data"}}}},
			Containers: []corev1.Container{{Name: "main", Image: "busybox", Env: env}},
		},
	}
}

func fileKeyEnv(name, path, key string, optional bool) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FileKeyRef: &corev1.FileKeySelector{VolumeName: "config", Path: path, Key: key, Optional: ptr.To(optional)}}}
}

// TestEnvFiles: a variable from a file an init container wrote, read when
// the container starts (the file does not exist before), as the kubelet's
// EnvFiles; a missing key or file leaves the container waiting with the
// kubelet's reason and message, and it starts once the file is right.
func TestEnvFiles(t *testing.T) {
	good := envFilePod("good", fileKeyEnv("CONFIG_1", "config.env", "CONFIG_1", false), fileKeyEnv("OPT", "config.env", "ABSENT", true),
		corev1.EnvVar{Name: "DERIVED", Value: "$(CONFIG_1)-x"})
	noKey := envFilePod("nokey", fileKeyEnv("MISSING", "config.env", "MISSING", false))
	escape := envFilePod("escape", fileKeyEnv("SECRET", "link/secret.env", "SECRET", false))
	fifo := envFilePod("fifo", fileKeyEnv("CONFIG_1", "config.env", "CONFIG_1", false))
	ta, rt := startAgentWithFake(t, good, noKey, escape, fifo)

	// Outside every volume, a file a symbolic link in one points to.
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret.env"), []byte("SECRET='host'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(pod *corev1.Pod, content string) {
		t.Helper()
		// The fake runtime makes no directories: the volume's is made here.
		dir := ta.agent.volumes.Source(pod, "config")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "config.env"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// What each init container writes, once its volumes are there.
	setups := []*fakeHandle{rt.podAttempt(t, "good", "setup", 0), rt.podAttempt(t, "nokey", "setup", 0), rt.podAttempt(t, "escape", "setup", 0), rt.podAttempt(t, "fifo", "setup", 0)}
	write(good, "# setup\nCONFIG_1='value1'\n")
	write(noKey, "CONFIG_1='value1'\n")
	write(escape, "")
	// A FIFO where the file should be: refused, not waited on.
	if err := os.MkdirAll(ta.agent.volumes.Source(fifo, "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(ta.agent.volumes.Source(fifo, "config"), "config.env"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(ta.agent.volumes.Source(escape, "config"), "link")); err != nil {
		t.Fatal(err)
	}
	for _, h := range setups {
		h.exit(0)
	}

	main := rt.podAttempt(t, "good", "main", 0)
	for _, want := range []string{"CONFIG_1=value1", "DERIVED=value1-x"} {
		if !slices.Contains(main.spec.Env, want) {
			t.Errorf("env %q lacks %s", main.spec.Env, want)
		}
	}
	for _, e := range main.spec.Env {
		if strings.HasPrefix(e, "OPT=") {
			t.Errorf("optional missing key set: %s", e)
		}
	}

	waiting := func(name, msg string) {
		t.Helper()
		ta.waitPod(t, name, func(p *corev1.Pod) bool {
			if len(p.Status.ContainerStatuses) != 1 {
				return false
			}
			w := p.Status.ContainerStatuses[0].State.Waiting
			return w != nil && w.Reason == lifecycle.ReasonCreateContainerConfigError && w.Message == msg
		})
	}
	waiting("nokey", `environment variable key "MISSING" not found in file "`+filepath.Join(ta.agent.volumes.Source(noKey, "config"), "config.env")+`"`)
	// The link resolves inside the volume, where there is no secret.env.
	waiting("escape", "couldn't parse env file")
	waiting("fifo", "couldn't parse env file")
	if !ta.eventWith(t, "Failed", "Error: couldn't parse env file") {
		t.Error("no Failed event for the file that cannot be parsed")
	}

	// Read again at the next try: once the key is there, the container starts.
	write(noKey, "CONFIG_1='value1'\nMISSING='found'\n")
	ta.step(t, lifecycle.RetryConfigError)
	if got := rt.podAttempt(t, "nokey", "main", 0); !slices.Contains(got.spec.Env, "MISSING=found") {
		t.Errorf("env %q lacks MISSING=found", got.spec.Env)
	}
}
