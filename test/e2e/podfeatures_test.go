package e2e

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/internal/testimages"
)

// shellImageIn is the image of a shell for up's image mode: the host's
// programs in host mode ("busybox" names none), the shell image pushed to
// reg in oci mode.
func shellImageIn(t *testing.T, reg *testimages.Registry, mode string) string {
	t.Helper()
	if mode != "oci" {
		return "busybox"
	}
	ref, err := reg.Push("e2e/shell:1", shellImage(t))
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

// TestUpRestartAllContainersAndEnvFiles runs two of v1.36's default-on pod
// features on up, in both image modes, as upstream's e2e specs do:
//   - RestartAllContainers ("should restart all containers on regular
//     container exit"): a source container exits 42 once (a marker in an
//     emptyDir says it ran); every container, init and sidecar included,
//     restarts in place and keeps running;
//   - EnvFiles (FileKeyRef "should be consumable via FileKeyRef"): an init
//     container writes an env file into an emptyDir; the main container's
//     variables come from it.
func TestUpRestartAllContainersAndEnvFiles(t *testing.T) {
	reg := testimages.NewRegistry()
	defer reg.Close()
	for _, mode := range []string{"oci", "host"} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			up, c, _ := startUp(t, t.TempDir(), "--images="+mode)
			defer up.stop(t)
			image := shellImageIn(t, reg, mode)
			waitDefaultServiceAccount(t, c, "default")
			data := []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
			volumes := []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
			sh := func(name, script string) corev1.Container {
				return corev1.Container{Name: name, Image: image, Command: []string{"sh", "-c", script}, VolumeMounts: data}
			}

			source := sh("source", "if [ -f /data/marker ]; then exec sleep 3600; fi; touch /data/marker; exit 42")
			source.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyNever)
			source.RestartPolicyRules = []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestartAllContainers,
				ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
			sidecar := sh("sidecar", "exec sleep 3600")
			sidecar.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
			restartAll := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "restart-all", Namespace: "default"},
				Spec: corev1.PodSpec{
					RestartPolicy:                 corev1.RestartPolicyNever,
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Volumes:                       volumes,
					InitContainers:                []corev1.Container{sh("init", "true"), sidecar},
					Containers:                    []corev1.Container{source, sh("regular", "exec sleep 3600")},
				},
			}
			fileKey := func(name, key string) corev1.EnvVar {
				return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FileKeyRef: &corev1.FileKeySelector{VolumeName: "data", Path: "config.env", Key: key}}}
			}
			use := sh("use-envfile", `echo "$CONFIG_1|$CONFIG_2"`)
			use.Env = []corev1.EnvVar{fileKey("CONFIG_1", "CONFIG_1"), fileKey("CONFIG_2", "CONFIG_2")}
			envFile := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "env-file", Namespace: "default"},
				Spec: corev1.PodSpec{
					RestartPolicy:  corev1.RestartPolicyNever,
					Volumes:        volumes,
					InitContainers: []corev1.Container{sh("setup", `printf "# written by setup\nCONFIG_1='value1'\nCONFIG_2='two\nlines'\n" > /data/config.env`)},
					Containers:     []corev1.Container{use},
				},
			}
			// Whether the restart showed in the API (logged: the status
			// manager may coalesce it with the next status, as the
			// kubelet's may).
			w, err := c.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=restart-all"})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			shown := make(chan string, 1)
			go func() {
				seen := ""
				for ev := range w.ResultChan() {
					if p, ok := ev.Object.(*corev1.Pod); ok {
						for _, cond := range p.Status.Conditions {
							if cond.Type == corev1.AllContainersRestarting && cond.Status == corev1.ConditionTrue && seen == "" {
								seen = cond.Reason + ": " + cond.Message
							}
						}
					}
				}
				shown <- seen
			}()
			for _, p := range []*corev1.Pod{restartAll, envFile} {
				if _, err := c.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}

			got := waitPod(t, c, "default", "env-file", "finished", 2*time.Minute, func(p *corev1.Pod) bool {
				return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
			})
			if got.Status.Phase != corev1.PodSucceeded {
				t.Errorf("env-file pod %s: %+v", got.Status.Phase, got.Status.ContainerStatuses)
			}
			logs, err := c.CoreV1().Pods("default").GetLogs("env-file", &corev1.PodLogOptions{}).DoRaw(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if want := "value1|two\nlines\n"; string(logs) != want {
				t.Errorf("env-file logs %q, want %q", logs, want)
			}

			// As upstream's validateAllContainersRestarted: every container
			// restarted, with a last termination, the source and regular
			// ones running again.
			got = waitPod(t, c, "default", "restart-all", "restarted in place", 2*time.Minute, func(p *corev1.Pod) bool {
				if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
					return true
				}
				all := append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
				if len(all) != 4 {
					return false
				}
				for _, s := range all {
					if s.RestartCount == 0 || s.LastTerminationState.Terminated == nil {
						return false
					}
					if s.Name != "init" && s.State.Running == nil {
						return false
					}
				}
				return true
			})
			if got.Status.Phase != corev1.PodRunning {
				t.Fatalf("restart-all pod %s, want Running: %+v", got.Status.Phase, got.Status)
			}
			for _, s := range append(got.Status.InitContainerStatuses, got.Status.ContainerStatuses...) {
				if s.RestartCount != 1 || s.LastTerminationState.Terminated.Reason != "RestartingAllContainers" {
					t.Errorf("%s: restartCount %d, lastState %+v; want 1, RestartingAllContainers", s.Name, s.RestartCount, s.LastTerminationState.Terminated)
				}
			}
			w.Stop()
			t.Logf("AllContainersRestarting True seen in the API: %q", <-shown)
			for _, cond := range got.Status.Conditions {
				if cond.Type == corev1.AllContainersRestarting && cond.Status != corev1.ConditionFalse {
					t.Errorf("AllContainersRestarting %+v, want False once restarted", cond)
				}
			}
		})
	}
}

// TestUpEnsureSecretPulledImages: with KubeletEnsureSecretPulledImages (beta
// and on in v1.36), once a pod pulled a private image with its pull secret,
// another pod may use the node's copy only with that credential: without
// it, IfNotPresent pulls again and the registry refuses, Never cannot have
// it; with it, Never runs from the copy.
func TestUpEnsureSecretPulledImages(t *testing.T) {
	reg := testimages.NewRegistry(testimages.WithBasicAuth("user", "s3cret"))
	defer reg.Close()
	ref, err := reg.Push("private/shell:1", shellImage(t))
	if err != nil {
		t.Fatal(err)
	}
	host, _, _ := strings.Cut(ref, "/")
	ctx := context.Background()
	up, c, _ := startUp(t, t.TempDir(), "--images=oci")
	defer up.stop(t)
	waitDefaultServiceAccount(t, c, "default")
	auth := base64.StdEncoding.EncodeToString([]byte("user:s3cret"))
	if _, err := c.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "registry"},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"` + host + `":{"auth":"` + auth + `"}}}`)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := func(name string, policy corev1.PullPolicy, secret bool) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{
				Name: "c", Image: ref, ImagePullPolicy: policy, Command: []string{"sh", "-c", "echo ran"}}}},
		}
		if secret {
			p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "registry"}}
		}
		return p
	}
	create := func(p *corev1.Pod) {
		t.Helper()
		if _, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create(pod("first", corev1.PullAlways, true))
	waitPod(t, c, "default", "first", "succeeded", 2*time.Minute, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	for _, p := range []*corev1.Pod{pod("no-secret", corev1.PullIfNotPresent, false), pod("never-no-secret", corev1.PullNever, false), pod("never-with-secret", corev1.PullNever, true)} {
		create(p)
	}
	waitPod(t, c, "default", "never-with-secret", "succeeded", 2*time.Minute, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	waiting := func(p *corev1.Pod) string {
		if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Waiting == nil {
			return ""
		}
		return p.Status.ContainerStatuses[0].State.Waiting.Reason
	}
	got := waitPod(t, c, "default", "no-secret", "refused by the registry", 2*time.Minute, func(p *corev1.Pod) bool {
		return waiting(p) == "ErrImagePull" || waiting(p) == "ImagePullBackOff"
	})
	if got.Status.Phase != corev1.PodPending {
		t.Errorf("no-secret: phase %s, want Pending", got.Status.Phase)
	}
	waitPod(t, c, "default", "never-no-secret", "refused", 2*time.Minute, func(p *corev1.Pod) bool { return waiting(p) == "ErrImageNeverPull" })
}
