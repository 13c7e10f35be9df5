package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	ggcrname "github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/internal/testimages"
	"jobkeeper.dev/jobkeeper/test/builder"
)

// imageScript is the only argument of the image tests' containers: the
// image's Entrypoint (/bin/sh -c) runs it, with a test only busybox's sh has
// ([[, which the host's dash lacks), a file only the image has and a
// variable only the image's config sets.
const imageScript = `[[ -r /etc/greeting ]] && echo "$(cat /etc/greeting), $GREETING, $((6*7))"`

// imageScriptOutput is what imageScript prints inside the shell image.
const imageScriptOutput = "hello from the image, set by the image config, 42\n"

// shellImage is the busybox stand-in with /etc/greeting in a second layer,
// under a config whose Entrypoint is ["/bin/sh", "-c"], whose Cmd would
// print something else, and whose Env sets GREETING.
func shellImage(t *testing.T) v1.Image {
	t.Helper()
	busybox, err := testimages.Busybox(testimages.BusyboxOrSkip(t))
	if err != nil {
		t.Fatal(err)
	}
	img, err := testimages.WithLayer(busybox, testimages.Regular("etc/greeting", 0o644, []byte("hello from the image")))
	if err != nil {
		t.Fatal(err)
	}
	img, err = testimages.WithConfig(img, testimages.Config{
		Entrypoint: []string{"/bin/sh", "-c"},
		Cmd:        []string{"echo the image Cmd ran instead of the args"},
		Env:        []string{"GREETING=set by the image config"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// imageJob is a one-pod Job whose container runs image with no command and
// args [imageScript]: only the image's Entrypoint makes it a shell script.
func imageJob(name, image string) *batchv1.Job {
	job := builder.MakeJob(name, "default").BackoffLimit(0).Obj()
	c := &job.Spec.Template.Spec.Containers[0]
	c.Image, c.Command, c.Args = image, nil, []string{imageScript}
	return job
}

// TestUpRunsTheImage runs, on `up --images=oci`, Jobs whose pods get their
// root filesystem, entrypoint and environment from an image: one loaded
// into the running up's store with `jobkeeper image load`, one pulled from
// an in-process registry, and one whose tag the registry does not have,
// which waits in ErrImagePull or ImagePullBackOff as on a kubelet.
func TestUpRunsTheImage(t *testing.T) {
	ctx := context.Background()
	shell := shellImage(t)
	reg := testimages.NewRegistry()
	defer reg.Close()
	pulledRef, err := reg.Push("e2e/shell:1", shell)
	if err != nil {
		t.Fatal(err)
	}
	pushedDigest, err := shell.Digest()
	if err != nil {
		t.Fatal(err)
	}
	loadedRef := "jobkeeper.test/e2e/shell:1"
	missingRef := reg.Host + "/e2e/shell:nonexistent"

	dataDir := t.TempDir()
	up, c, _ := startUp(t, dataDir, "--images=oci")
	defer up.stop(t)

	// Loaded while up runs: the store is shared by the agent and the image
	// command.
	// Another image than the pushed one (a label apart): of one image, the
	// agent would let a pod use the loaded name only once the pulled name's
	// pull is not recorded yet (KubeletEnsureSecretPulledImages: a name its
	// record does not hold must be pulled, as with the kubelet), so which
	// pod the agent saw first would decide the loaded one's fate.
	cf, err := shell.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg := *cf.Config.DeepCopy()
	cfg.Labels = map[string]string{"jobkeeper.test/e2e": "loaded"}
	loaded, err := mutate.Config(shell, cfg)
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), "shell.tar")
	if err := testimages.WriteDockerArchive(archive, map[string]v1.Image{loadedRef: loaded}); err != nil {
		t.Fatal(err)
	}
	imageLoad(t, dataDir, archive)

	jobs := map[string]*batchv1.Job{
		"loaded":  imageJob("loaded-image", loadedRef),
		"pulled":  imageJob("pulled-image", pulledRef),
		"missing": imageJob("missing-image", missingRef),
	}
	for _, job := range jobs {
		if _, err := c.BatchV1().Jobs(job.Namespace).Create(ctx, job, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	for name, ref := range map[string]string{"loaded": loadedRef, "pulled": pulledRef} {
		t.Run(name, func(t *testing.T) {
			job := jobs[name]
			got := waitJob(t, c, job.Namespace, job.Name, "finished", func(j *batchv1.Job) bool {
				return hasCondition(batchv1.JobComplete)(j) || hasCondition(batchv1.JobFailed)(j)
			})
			pods := podsOf(t, c, job)
			if !hasCondition(batchv1.JobComplete)(got) || len(pods) != 1 {
				t.Fatalf("Job did not complete with one pod: conditions %+v; pods: %s", got.Status.Conditions, describePods(pods))
			}
			pod := pods[0]
			logs, err := c.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
			if err != nil {
				t.Fatalf("logs of %s: %v", pod.Name, err)
			}
			if string(logs) != imageScriptOutput {
				t.Errorf("logs %q, want %q", logs, imageScriptOutput)
			}
			if len(pod.Status.ContainerStatuses) != 1 {
				t.Fatalf("container statuses %+v, want one", pod.Status.ContainerStatuses)
			}
			cs := pod.Status.ContainerStatuses[0]
			parsed, err := ggcrname.ParseReference(ref)
			if err != nil {
				t.Fatal(err)
			}
			repo := parsed.Context().Name()
			if cs.Image != ref || !strings.HasPrefix(cs.ImageID, repo+"@sha256:") {
				t.Errorf("status image %q, imageID %q; want %q and %s@sha256:…", cs.Image, cs.ImageID, ref, repo)
			}
			if name == "pulled" && cs.ImageID != repo+"@"+pushedDigest.String() {
				t.Errorf("status imageID %q, want the pushed digest %s@%s", cs.ImageID, repo, pushedDigest)
			}
			// IfNotPresent (a tag that is not latest): the loaded image is
			// already there, the other one is pulled, once.
			want := map[string][]string{
				"loaded": {"Pulled: Container image \"" + ref + "\" already present on machine"},
				"pulled": {"Pulling: Pulling image \"" + ref + "\"", "Pulled: Successfully pulled image \"" + ref + "\""},
			}[name]
			events := podEvents(t, c, &pod, func(evs []string) bool { return len(evs) >= len(want) })
			for _, w := range want {
				if !slices.ContainsFunc(events, func(e string) bool { return strings.HasPrefix(e, w) }) {
					t.Errorf("no event %q among the pod's image events:\n%s", w, strings.Join(events, "\n"))
				}
			}
		})
	}

	t.Run("missing", func(t *testing.T) {
		job := jobs["missing"]
		var pod corev1.Pod
		var reason string
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, nodeTimeout, true, func(ctx context.Context) (bool, error) {
			pods := podsOf(t, c, job)
			if len(pods) != 1 || len(pods[0].Status.ContainerStatuses) != 1 {
				return false, nil
			}
			pod = pods[0]
			if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
				return false, fmt.Errorf("the pod ended %s", pod.Status.Phase)
			}
			if w := pod.Status.ContainerStatuses[0].State.Waiting; w != nil {
				reason = w.Reason
			}
			return reason == "ErrImagePull" || reason == "ImagePullBackOff", nil
		})
		if err != nil {
			t.Fatalf("the pod never waited in ErrImagePull or ImagePullBackOff (%v; last reason %q): %s", err, reason, describePods(podsOf(t, c, job)))
		}
		if pod.Status.Phase != corev1.PodPending {
			t.Errorf("pod phase %s, want Pending", pod.Status.Phase)
		}
		events := podEvents(t, c, &pod, func(evs []string) bool {
			return slices.ContainsFunc(evs, func(e string) bool { return strings.HasPrefix(e, "Failed: ") })
		})
		if !slices.ContainsFunc(events, func(e string) bool {
			return strings.HasPrefix(e, "Failed: ") && strings.Contains(e, missingRef)
		}) {
			t.Errorf("no Failed event naming %s among the pod's image events:\n%s", missingRef, strings.Join(events, "\n"))
		}
		got, err := c.BatchV1().Jobs(job.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Active != 1 || got.Status.Failed != 0 {
			t.Errorf("Job active %d, failed %d; want 1 and 0 (a pod waiting for its image is not failed)", got.Status.Active, got.Status.Failed)
		}
	})
}

// podEvents polls the events of pod until done holds for them (or the node
// timeout passes) and returns them as "Reason: message", oldest first.
func podEvents(t *testing.T, c kubernetes.Interface, pod *corev1.Pod, done func([]string) bool) []string {
	t.Helper()
	var out []string
	_ = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, nodeTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := c.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(pod.UID)})
		if err != nil {
			return false, nil
		}
		evs := list.Items
		slices.SortStableFunc(evs, func(a, b corev1.Event) int { return a.FirstTimestamp.Compare(b.FirstTimestamp.Time) })
		out = out[:0]
		for _, e := range evs {
			out = append(out, e.Reason+": "+e.Message)
		}
		return done(out), nil
	})
	return out
}

// imageLoad runs `jobkeeper image load --data-dir dataDir archive`.
func imageLoad(t *testing.T, dataDir, archive string) {
	t.Helper()
	if out, err := exec.Command(binary, "image", "load", "--data-dir", dataDir, archive).CombinedOutput(); err != nil {
		t.Fatalf("jobkeeper image load: %v\n%s", err, out)
	}
}

// TestUpRunsTheE2EStandIns loads the stand-ins of upstream's e2e images as
// test/conformance/run.sh does (into the data dir, before up starts) and
// runs the two pod shapes of upstream's Job fixtures that need an image's
// own command: busybox with no command (its Cmd, sh, exits at once: the
// fixtures' default behaviour) and pause ("notTerminate"), which runs until
// the Job is suspended and then stops on SIGTERM, well within its grace
// period. As root it also runs the shapes of the [sig-node] Security Context
// specs: nonewprivs's set-user-ID root program with allowPrivilegeEscalation
// unset and false, nonroot's image user, and supplementalGroupsPolicy Merge
// and Strict with a user the image puts in a group (the output of `id -G`
// and the container status's user).
func TestUpRunsTheE2EStandIns(t *testing.T) {
	ctx := context.Background()
	busybox := testimages.BusyboxOrSkip(t)
	bin := t.TempDir()
	pause, err := testimages.BuildPause(bin)
	if err != nil {
		t.Fatal(err)
	}
	nnp, err := testimages.BuildNNP(bin)
	if err != nil {
		t.Fatal(err)
	}
	standIns, err := testimages.StandIns(testimages.Sources{Busybox: busybox, Pause: pause, NNP: nnp})
	if err != nil {
		t.Fatal(err)
	}
	// An image whose /etc/group puts user 1000 in group 50000, as
	// agnhost's does, for supplementalGroupsPolicy.
	const groupsImage = "jobkeeper.test/groups:1"
	standIns[groupsImage], err = testimages.WithLayer(standIns[testimages.BusyboxImage],
		testimages.Regular("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nu:x:1000:1000::/:/bin/sh\n")),
		testimages.Regular("etc/group", 0o644, []byte("root:x:0:\nu:x:1000:\nimage-group:x:50000:u\n")))
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), "standins.tar")
	if err := testimages.WriteDockerArchive(archive, standIns); err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	imageLoad(t, dataDir, archive)
	up, c, _ := startUp(t, dataDir, "--images=oci")
	defer up.stop(t)

	fixture := func(name, image string) *batchv1.Job {
		job := builder.MakeJob(name, "default").BackoffLimit(0).Obj()
		spec := &job.Spec.Template.Spec
		spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		spec.Containers[0].Image, spec.Containers[0].Command = image, []string{}
		spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
		return job
	}
	succeeded := fixture("busybox-default", testimages.BusyboxImage)
	notTerminate := fixture("pause", testimages.PauseImage)
	// The Security Context specs' shapes: nonewprivs as uid 1000 with
	// allowPrivilegeEscalation unset (its set-user-ID root program runs
	// as root) and false (it runs as 1000), nonroot with the image's user.
	escalation := func(name string, allow *bool) *batchv1.Job {
		job := fixture(name, testimages.NonewprivsImage)
		job.Spec.Template.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{
			RunAsUser: ptr.To[int64](1000), AllowPrivilegeEscalation: allow}
		return job
	}
	nnpUnset, nnpFalse := escalation("nnp-unset", nil), escalation("nnp-false", ptr.To(false))
	nonRoot := fixture("nonroot", testimages.NonRootImage)
	nonRoot.Spec.Template.Spec.Containers[0].Command = []string{"id", "-u"}
	groups := func(name string, policy corev1.SupplementalGroupsPolicy) *batchv1.Job {
		job := fixture(name, groupsImage)
		job.Spec.Template.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000),
			SupplementalGroups: []int64{60000}, SupplementalGroupsPolicy: &policy}
		job.Spec.Template.Spec.Containers[0].Command = []string{"id", "-G"}
		return job
	}
	merge, strict := groups("groups-merge", corev1.SupplementalGroupsPolicyMerge), groups("groups-strict", corev1.SupplementalGroupsPolicyStrict)
	jobs := []*batchv1.Job{succeeded, notTerminate}
	// As a user, up runs every container as that user, and its image store
	// owns every file: no other uid, no set-user-ID root.
	asRoot := os.Geteuid() == 0
	if asRoot {
		jobs = append(jobs, nnpUnset, nnpFalse, nonRoot, merge, strict)
	}
	for _, job := range jobs {
		if _, err := c.BatchV1().Jobs(job.Namespace).Create(ctx, job, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("busybox", func(t *testing.T) {
		got := waitJob(t, c, succeeded.Namespace, succeeded.Name, "finished", func(j *batchv1.Job) bool {
			return hasCondition(batchv1.JobComplete)(j) || hasCondition(batchv1.JobFailed)(j)
		})
		if !hasCondition(batchv1.JobComplete)(got) {
			t.Fatalf("Job did not complete: conditions %+v; pods: %s", got.Status.Conditions, describePods(podsOf(t, c, succeeded)))
		}
	})

	for _, tc := range []struct {
		job  *batchv1.Job
		want string
		// user is the container status's user, when checked.
		user *corev1.LinuxContainerUser
	}{
		{job: nnpFalse, want: "Effective uid: 1000\n"},
		{job: nnpUnset, want: "Effective uid: 0\n"},
		{job: nonRoot, want: testimages.NonRootUser + "\n"},
		{job: merge, want: "1000 50000 60000\n",
			user: &corev1.LinuxContainerUser{UID: 1000, GID: 1000, SupplementalGroups: []int64{1000, 50000, 60000}}},
		{job: strict, want: "1000 60000\n",
			user: &corev1.LinuxContainerUser{UID: 1000, GID: 1000, SupplementalGroups: []int64{1000, 60000}}},
	} {
		t.Run(tc.job.Name, func(t *testing.T) {
			if !asRoot {
				t.Skip("runAsUser and a set-user-ID root program need up to run as root")
			}
			got := waitJob(t, c, tc.job.Namespace, tc.job.Name, "finished", func(j *batchv1.Job) bool {
				return hasCondition(batchv1.JobComplete)(j) || hasCondition(batchv1.JobFailed)(j)
			})
			pods := podsOf(t, c, tc.job)
			if !hasCondition(batchv1.JobComplete)(got) || len(pods) != 1 {
				t.Fatalf("Job did not complete: conditions %+v; pods: %s", got.Status.Conditions, describePods(pods))
			}
			logs, err := c.CoreV1().Pods(pods[0].Namespace).GetLogs(pods[0].Name, &corev1.PodLogOptions{}).DoRaw(ctx)
			if err != nil || string(logs) != tc.want {
				t.Errorf("output %q (%v), want %q", logs, err, tc.want)
			}
			if tc.user != nil {
				var got *corev1.ContainerUser
				if st := pods[0].Status.ContainerStatuses; len(st) == 1 {
					got = st[0].User
				}
				if diff := cmp.Diff(&corev1.ContainerUser{Linux: tc.user}, got); diff != "" {
					t.Errorf("status user (-want +got):\n%s", diff)
				}
			}
		})
	}

	t.Run("pause", func(t *testing.T) {
		waitJob(t, c, notTerminate.Namespace, notTerminate.Name, "had a ready pod", func(j *batchv1.Job) bool {
			return j.Status.Ready != nil && *j.Status.Ready == 1
		})
		pods := podsOf(t, c, notTerminate)
		if len(pods) != 1 || pods[0].Status.ContainerStatuses[0].State.Running == nil {
			t.Fatalf("want one running pause pod: %s", describePods(pods))
		}
		suspended := time.Now()
		patch := []byte(`{"spec":{"suspend":true}}`)
		if _, err := c.BatchV1().Jobs(notTerminate.Namespace).Patch(ctx, notTerminate.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		// The pod's grace period is 30s: pause must end on SIGTERM, not on
		// the SIGKILL after it.
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
			return len(podsOf(t, c, notTerminate)) == 0, nil
		})
		if err != nil {
			t.Fatalf("the pause pod still exists %v after the Job was suspended: %s", time.Since(suspended).Round(time.Second), describePods(podsOf(t, c, notTerminate)))
		}
	})
}
