package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"golang.org/x/sys/unix"

	"jobkeeper.dev/jobkeeper/internal/testimages"
)

// The escape suite: what a pod can reach of the host, tried as an attacker
// with nothing but the right to create pods would try it, against `up` run
// as root and as another user, with images and with the host's programs.
// Every attempt's outcome is asserted.

// escapeUID is the user a root test runs the second `up` as.
const escapeUID = 65534

// escapeSwapFor bounds how long the swapper races the containers' starts.
const escapeSwapFor = 20 * time.Second

// defaultCapEff is containerd's default capability set as
// /proc/self/status shows it.
const defaultCapEff = "00000000a80425fb"

// escapeRun is one `up` the suite attacks.
type escapeRun struct {
	// cred is who runs `up`; nil: this process's user.
	cred *syscall.Credential
	// image is the image pods name ("" in host mode, where the host's
	// programs run).
	image string
	// root reports that `up` runs as root.
	root bool
	// dataDir is up's data directory, secretDir a directory of the user
	// running up with a 0600 file "secret" holding secret.
	dataDir, secretDir, secret string
	// c is the admin client.
	c kubernetes.Interface
}

func TestUpEscape(t *testing.T) {
	busybox := testimages.BusyboxOrSkip(t)
	type who struct {
		name string
		cred *syscall.Credential
	}
	users := []who{{name: "user"}}
	if os.Getuid() == 0 {
		users = []who{{name: "root"}, {name: "user", cred: &syscall.Credential{Uid: escapeUID, Gid: escapeUID}}}
	}
	for _, u := range users {
		for _, mode := range []string{"oci", "host"} {
			t.Run(u.name+"/"+mode, func(t *testing.T) {
				r := startEscapeRun(t, u.cred, mode, busybox)
				t.Run("subPath and mount point swaps", r.swapRace)
				t.Run("confinement", r.confinement)
				t.Run("Pod Security baseline refuses hostPath", r.baselineHostPath)
				if r.root && r.image != "" {
					// Only root runs other users, and host mode runs every
					// container as up's user.
					t.Run("Pod Security restricted", r.restricted)
				}
			})
		}
	}
}

// startEscapeRun starts `up` as cred in mode (oci: with the busybox
// stand-in loaded as the pods' image) and makes the secret directory.
func startEscapeRun(t *testing.T, cred *syscall.Credential, mode, busybox string) *escapeRun {
	t.Helper()
	// The binary, the data directory and the secret directory are the
	// running user's.
	base := enterableDir(t, "jobkeeper-escape-")
	r := &escapeRun{cred: cred, root: os.Getuid() == 0 && cred == nil,
		dataDir: filepath.Join(base, "data"), secretDir: filepath.Join(base, "private"),
		secret: fmt.Sprintf("host secret %d", time.Now().UnixNano())}
	for _, d := range []string{r.dataDir, r.secretDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(r.secretDir, "secret"), []byte(r.secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(base, "jobkeeper")
	copyFile(t, binary, exe, 0o755)
	var env []string
	if cred != nil {
		env = []string{"HOME=" + base}
		for _, p := range []string{r.dataDir, r.secretDir, filepath.Join(r.secretDir, "secret")} {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				t.Fatal(err)
			}
		}
	}
	extra := []string{"--images=host"}
	if mode == "oci" {
		img, err := testimages.Busybox(busybox)
		if err != nil {
			t.Fatal(err)
		}
		archive := filepath.Join(base, "busybox.tar")
		if err := testimages.WriteDockerArchive(archive, map[string]v1.Image{testimages.BusyboxImage: img}); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(archive, 0o644); err != nil {
			t.Fatal(err)
		}
		load := exec.Command(exe, "image", "load", "--data-dir", r.dataDir, archive)
		load.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		load.Env = append(os.Environ(), env...)
		if out, err := load.CombinedOutput(); err != nil {
			t.Fatalf("jobkeeper image load: %v\n%s", err, out)
		}
		r.image, extra = testimages.BusyboxImage, []string{"--images=oci"}
	}
	up, c, _ := startUpAs(t, cred, env, exe, r.dataDir, extra...)
	t.Cleanup(func() { up.stop(t) })
	r.c = c
	return r
}

// enterableDir is a directory every user may enter (a test's TempDir is
// below one only its owner may), removed at the test's end.
func enterableDir(t *testing.T, prefix string) string {
	t.Helper()
	base, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	return base
}

// copyFile copies from to to with mode.
func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// container is a container of the suite's pods running script with sh.
func (r *escapeRun) container(name, script string) corev1.Container {
	image := r.image
	if image == "" {
		image = "busybox:1.36"
	}
	return corev1.Container{Name: name, Image: image, Command: []string{"sh", "-c", script}}
}

// swapRace runs the subPath symlink-swap attack of the issue (and the
// same against a mount point's parent): an init container makes, in an
// emptyDir, a directory d and a link d.link to a private directory of the
// user running up; while the pod's 16 containers start, d and d.link are
// exchanged as fast as possible (by the test, on the volume's directory,
// as a container sharing the volume would with renameat2). Ten containers
// mount the emptyDir with subPath d and print what they find there; six
// mount another emptyDir below d. None may read the secret, and nothing
// may be created in the private directory.
func (r *escapeRun) swapRace(t *testing.T) {
	ctx := context.Background()
	ns := "default"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "swap", Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Volumes: []corev1.Volume{
				{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "inner", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
			InitContainers: []corev1.Container{r.container("prepare",
				fmt.Sprintf("mkdir -p /data/d && echo inside > /data/d/inside && ln -s %s /data/d.link && sleep 2", r.secretDir))},
		},
	}
	pod.Spec.InitContainers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	for i := 0; i < 10; i++ {
		c := r.container(fmt.Sprintf("subpath-%d", i), "cat /mnt/secret 2>/dev/null; ls /mnt; true")
		c.VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/mnt", SubPath: "d"}}
		pod.Spec.Containers = append(pod.Spec.Containers, c)
	}
	for i := 0; i < 6; i++ {
		c := r.container(fmt.Sprintf("mountpoint-%d", i), "true")
		c.VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/shared"}, {Name: "inner", MountPath: "/shared/d/sub/inner"}}
		pod.Spec.Containers = append(pod.Spec.Containers, c)
	}
	created, err := r.c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vol := filepath.Join(r.dataDir, "node", "pods", string(created.UID), "volumes", "data")
	link := filepath.Join(vol, "d.link")
	deadline := time.Now().Add(90 * time.Second)
	for {
		if _, err := os.Lstat(link); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the init container did not make %s", link)
		}
		time.Sleep(time.Millisecond)
	}
	swaps := 0
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		end := time.After(escapeSwapFor)
		for {
			select {
			case <-stop:
				return
			case <-end:
				return
			default:
			}
			if unix.Renameat2(unix.AT_FDCWD, filepath.Join(vol, "d"), unix.AT_FDCWD, link, unix.RENAME_EXCHANGE) == nil {
				swaps++
			}
		}
	}()
	// The swapper stops after escapeSwapFor; containers whose start was
	// refused meanwhile are tried again, and find d a directory again.
	go func() {
		wg.Wait()
		if st, err := os.Lstat(filepath.Join(vol, "d")); err == nil && st.Mode()&os.ModeSymlink != 0 {
			_ = unix.Renameat2(unix.AT_FDCWD, filepath.Join(vol, "d"), unix.AT_FDCWD, link, unix.RENAME_EXCHANGE)
		}
	}()
	got := waitPod(t, r.c, ns, pod.Name, "finished", 3*time.Minute, finished)
	close(stop)
	wg.Wait()
	t.Logf("%d exchanges while the containers started", swaps)
	leaked := 0
	for _, c := range pod.Spec.Containers {
		b, err := r.c.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: c.Name}).DoRaw(ctx)
		if err != nil {
			t.Errorf("logs of %s: %v", c.Name, err)
			continue
		}
		if strings.Contains(string(b), r.secret) {
			leaked++
			t.Errorf("container %s read the host's secret through its volume: %q", c.Name, b)
		}
	}
	entries, err := os.ReadDir(r.secretDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("the private directory holds %v after the race, want only its secret: a mount point was created through the link", names)
	}
	if got.Status.Phase != corev1.PodSucceeded {
		t.Logf("the pod ended %s (a start refused while a path on the way changed is allowed): %s", got.Status.Phase, describePods([]corev1.Pod{*got}))
	}
	t.Logf("%d of %d containers read the secret", leaked, len(pod.Spec.Containers))
	if err := r.c.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil && !apierrors.IsNotFound(err) {
		t.Error(err)
	}
}

// confinement runs one pod whose container tries what the issue found
// open: capabilities (containerd's default set; with drop ALL none), an
// unmount of /proc, the host's processes and block devices, writes to
// /proc/sys and /sys.
func (r *escapeRun) confinement(t *testing.T) {
	script := strings.Join([]string{
		"grep CapEff /proc/self/status",
		"umount /proc 2>/dev/null && echo PROC UNMOUNTED || echo umount refused",
		"umount -l /proc 2>/dev/null && echo PROC UNMOUNTED || echo lazy umount refused",
		"mkdir -p /tmp/m && mount -t proc proc /tmp/m 2>/dev/null && echo PROC MOUNTED || echo mount refused",
		`echo "processes $(ls /proc | grep -c '^[0-9]')"`,
		`echo "block devices $(find /dev -type b | wc -l)"`,
		"(echo 1 > /proc/sys/vm/drop_caches) 2>/dev/null && echo PROC SYS WRITTEN || echo proc sys read-only",
		"(echo x > /sys/kernel/uevent_helper) 2>/dev/null && echo SYS WRITTEN || echo sys read-only",
		"if mknod /tmp/n c 1 3 2>/dev/null; then (echo x > /tmp/n) 2>/dev/null && echo DEVICE OPENED || echo device refused; else echo device refused; fi",
		`awk '$5 ~ "^/sys" {split($6, o, ","); print "sys mount", o[1]}' /proc/self/mountinfo | sort -u`,
		// The classic climb out of a chroot (CAP_SYS_CHROOT is in the
		// default set), then a look for up's kubeconfig.
		`mkdir -p /tmp/esc && perl -e 'chroot("/tmp/esc") && do { chdir("..") for 1..64; chroot(".") }; print -e $ARGV[0] ? "KUBECONFIG REACHED
" : "kubeconfig out of reach
"' ` + filepath.Join(r.dataDir, "kubeconfig") + ` 2>/dev/null || echo kubeconfig out of reach`,
		"cat /proc/kcore 2>/dev/null | head -c 1 | wc -c",
	}, "; ")
	for name, tc := range map[string]struct {
		sc     *corev1.SecurityContext
		capEff string
	}{
		"default":  {capEff: defaultCapEff},
		"drop ALL": {sc: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}, capEff: "0000000000000000"},
	} {
		t.Run(name, func(t *testing.T) {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "confined-" + strings.ReplaceAll(strings.ToLower(name), " ", "-"), Namespace: "default"},
				Spec:       corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{r.container("c", script)}},
			}
			pod.Spec.Containers[0].SecurityContext = tc.sc
			out := r.runPod(t, pod)
			want := strings.Join([]string{
				"CapEff:\t" + tc.capEff,
				"umount refused", "lazy umount refused", "mount refused",
			}, "\n")
			if !strings.HasPrefix(out, want+"\n") {
				t.Errorf("output:\n%s\nwant it to start with:\n%s", out, want)
			}
			for _, line := range strings.Split(out, "\n") {
				if n, ok := strings.CutPrefix(line, "processes "); ok {
					if k, _ := strconv.Atoi(n); k > 6 {
						t.Errorf("the container sees %d processes: the host's are not hidden", k)
					}
				}
			}
			for _, l := range []string{"block devices 0", "proc sys read-only", "sys read-only", "device refused", "sys mount ro", "kubeconfig out of reach"} {
				if !strings.Contains(out, "\n"+l+"\n") {
					t.Errorf("output lacks %q:\n%s", l, out)
				}
			}
			if !strings.HasSuffix(out, "\n0\n") {
				t.Errorf("/proc/kcore is readable:\n%s", out)
			}
			if strings.Contains(out, "sys mount rw") {
				t.Errorf("a mount under /sys is writable:\n%s", out)
			}
		})
	}
}

// runPod creates pod, waits for it to finish and returns its first
// container's log.
func (r *escapeRun) runPod(t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	ctx := context.Background()
	if _, err := r.c.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := waitPod(t, r.c, pod.Namespace, pod.Name, "finished", 2*time.Minute, finished)
	b, err := r.c.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: pod.Spec.Containers[0].Name}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != corev1.PodSucceeded {
		t.Errorf("pod %s ended %s: %s\n%s", pod.Name, got.Status.Phase, describePods([]corev1.Pod{*got}), b)
	}
	return string(b)
}

// baselineHostPath: a namespace enforcing Pod Security baseline refuses a
// pod with a hostPath volume, as on any cluster.
func (r *escapeRun) baselineHostPath(t *testing.T) {
	ctx := context.Background()
	ns := r.podSecurityNamespace(t, "baseline")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hostpath", Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Volumes:       []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}},
			Containers:    []corev1.Container{r.container("c", "cat /host/etc/shadow")},
		},
	}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "host", MountPath: "/host"}}
	_, err := r.c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "hostPath") {
		t.Errorf("a hostPath pod in a baseline namespace: %v, want Forbidden naming hostPath", err)
	}
}

// restricted: a pod admitted by a namespace enforcing Pod Security
// restricted has no capability, cannot unmount /proc, sees none of the
// host's processes or block devices and reads nothing outside its image
// and volumes (as root `up`, which can run it as uid 1000).
func (r *escapeRun) restricted(t *testing.T) {
	ns := r.podSecurityNamespace(t, "restricted")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "restricted", Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](1000),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{r.container("c", strings.Join([]string{
				"grep -E 'CapEff|CapBnd|Seccomp:' /proc/self/status",
				"umount -l /proc 2>/dev/null && echo PROC UNMOUNTED || echo umount refused",
				`echo "processes $(ls /proc | grep -c '^[0-9]')"`,
				`echo "block devices $(find /dev -type b 2>/dev/null | wc -l)"`,
				"cat " + filepath.Join(r.secretDir, "secret") + " 2>/dev/null || echo secret unreadable",
			}, "; "))},
		},
	}
	pod.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	out := r.runPod(t, pod)
	for _, l := range []string{"CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "Seccomp:\t2", "umount refused", "block devices 0", "secret unreadable"} {
		if !strings.Contains(out, l+"\n") {
			t.Errorf("restricted pod's output lacks %q:\n%s", l, out)
		}
	}
	if strings.Contains(out, r.secret) {
		t.Errorf("the restricted pod read the host's secret")
	}
}

// podSecurityNamespace creates a namespace enforcing Pod Security level.
func (r *escapeRun) podSecurityNamespace(t *testing.T, level string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "psa-" + level, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": level,
	}}}
	if _, err := r.c.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}
