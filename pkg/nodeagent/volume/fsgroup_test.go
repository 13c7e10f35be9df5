package volume

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/podconfig"
)

// requireRoot skips a test that changes files' groups, which only root
// may do to any group.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("giving files another group needs root")
	}
}

// groupAndMode returns a file's group and mode (without following a link).
func groupAndMode(t *testing.T, p string) (uint32, os.FileMode) {
	t.Helper()
	info, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return info.Sys().(*syscall.Stat_t).Gid, info.Mode()
}

func TestSetVolumeOwnership(t *testing.T) {
	requireRoot(t)
	for _, readOnly := range []bool{false, true} {
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "sub", "f"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("sub/f", filepath.Join(dir, "link")); err != nil {
			t.Fatal(err)
		}
		if err := setVolumeOwnership(dir, 2000, readOnly, nil); err != nil {
			t.Fatal(err)
		}
		wantDir, wantFile := os.ModeDir|os.ModeSetgid|0o770, os.FileMode(0o660)
		if readOnly {
			wantDir, wantFile = os.ModeDir|os.ModeSetgid|0o750, 0o640
		}
		for p, want := range map[string]os.FileMode{dir: wantDir, filepath.Join(dir, "sub"): wantDir, filepath.Join(dir, "sub", "f"): wantFile} {
			g, mode := groupAndMode(t, p)
			if g != 2000 || mode != want {
				t.Errorf("readOnly %v: %s: group %d mode %v, want 2000 %v", readOnly, p, g, mode, want)
			}
		}
		if g, mode := groupAndMode(t, filepath.Join(dir, "link")); g != 2000 || mode&os.ModeSymlink == 0 {
			t.Errorf("link: group %d mode %v, want group 2000 and still a link", g, mode)
		}
	}
}

func TestSetVolumeOwnershipOnRootMismatch(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	onMismatch := ptr.To(corev1.FSGroupChangeOnRootMismatch)
	// The root does not match: everything is walked.
	if err := setVolumeOwnership(dir, 2000, false, onMismatch); err != nil {
		t.Fatal(err)
	}
	if g, _ := groupAndMode(t, f); g != 2000 {
		t.Fatalf("file group %d after a mismatch, want 2000", g)
	}
	// The root matches: a file changed since is left alone.
	if err := os.Chown(f, -1, 0); err != nil {
		t.Fatal(err)
	}
	if err := setVolumeOwnership(dir, 2000, false, onMismatch); err != nil {
		t.Fatal(err)
	}
	if g, _ := groupAndMode(t, f); g != 0 {
		t.Errorf("file group %d: OnRootMismatch walked a volume whose root matched", g)
	}
	// Always walks.
	if err := setVolumeOwnership(dir, 2000, false, ptr.To(corev1.FSGroupChangeAlways)); err != nil {
		t.Fatal(err)
	}
	if g, _ := groupAndMode(t, f); g != 2000 {
		t.Errorf("file group %d after Always, want 2000", g)
	}
}

func TestFSGroupOnVolumes(t *testing.T) {
	requireRoot(t)
	cm := &corev1.ConfigMap{}
	cm.Name, cm.Namespace, cm.Data = "cfg", "ns", map[string]string{"a": "1"}
	a, _ := volumeAgent(t, true, cm)
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		SecurityContext: &corev1.PodSecurityContext{FSGroup: ptr.To[int64](3000)},
		Volumes: []corev1.Volume{
			{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}},
		},
	}}
	pod.Name, pod.Namespace, pod.UID = "p", "ns", "uid-fsgroup"
	if err := a.volumes.Prepare(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, v := range []string{"work", "cfg"} {
		dir := a.volumes.source(pod, &corev1.Volume{Name: v})
		g, mode := groupAndMode(t, dir)
		got[v] = mode.String()
		if g != 3000 {
			t.Errorf("volume %s: group %d, want 3000", v, g)
		}
	}
	if g, _ := groupAndMode(t, filepath.Join(a.volumes.source(pod, &corev1.Volume{Name: "cfg"}), "..data", "a")); g != 3000 {
		t.Errorf("configMap file: group %d, want 3000", g)
	}
	want := map[string]string{"work": "dgrwxrwxrwx", "cfg": "dgrwxr-xr-x"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("modes (-want +got):\n%s", diff)
	}
}

func TestFSGroupIsASupplementalGroup(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{SupplementalGroups: []int64{10}, FSGroup: ptr.To[int64](3000)}}}
	u, err := podconfig.ContainerUser(pod, &corev1.Container{Name: "c"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int64{10, 3000}, u.SupplementalGroups); diff != "" {
		t.Errorf("supplemental groups (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int64{10}, pod.Spec.SecurityContext.SupplementalGroups); diff != "" {
		t.Errorf("the pod's groups changed (-want +got):\n%s", diff)
	}
}
