package view

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
)

func TestPlan(t *testing.T) {
	host := []*mountinfo.Info{
		{Mountpoint: "/", FSType: "ext4"},
		{Mountpoint: "/proc", FSType: "proc"},
		{Mountpoint: "/home/u/data", FSType: "xfs"},
		{Mountpoint: "/home", FSType: "ext4"},
		{Mountpoint: "/dev/shm", FSType: "tmpfs"},
		{Mountpoint: "/etc/resolv.conf", FSType: "ext4"},
		{Mountpoint: "/tmp", FSType: "tmpfs"},
		{Mountpoint: "/tmp/x", FSType: "ext4"},
		{Mountpoint: "/run/netns/a", FSType: "nsfs"},
		{Mountpoint: "/var/lib/jk/pods/u/c/scratch/root", FSType: "overlay"},
		{Mountpoint: "/home", FSType: "ext4"},
	}
	cfg := Spec{

		Scratch: "/var/lib/jk/pods/u/c/scratch",
		Mounts:  []Mount{{Source: "/var/lib/jk/pods/u/volumes/cache", Target: "/work/"}, {Source: "/etc/cfg", Target: "/etc/cfg", ReadOnly: true}},
	}
	entries := []rootEntry{
		{name: "bin", symlink: true, link: "usr/bin"},
		{name: "dev", dir: true},
		{name: "etc", dir: true},
		{name: "home", dir: true},
		{name: "proc", dir: true},
		{name: "tmp", dir: true},
		{name: "vmlinuz", link: ""},
	}
	root := "/var/lib/jk/pods/u/c/scratch/root"
	want := []op{
		{kind: opTmpfs, target: cfg.Scratch, mode: "0700"},
		{kind: opMkdir, target: root},
		{kind: opSymlink, source: "usr/bin", target: root + "/bin"},
		{kind: opMkdir, target: root + "/dev"},
		{kind: opOverlay, source: "/etc", target: root + "/etc", nodev: true},
		{kind: opOverlay, source: "/home", target: root + "/home", nodev: true},
		{kind: opMkdir, target: root + "/proc"},
		{kind: opOverlay, source: "/tmp", target: root + "/tmp", nodev: true},
		{kind: opOverlay, source: "/vmlinuz", target: root + "/vmlinuz", nodev: true},
		{kind: opOverlay, source: "/etc/resolv.conf", target: root + "/etc/resolv.conf", nodev: true},
		{kind: opOverlay, source: "/tmp/x", target: root + "/tmp/x", nodev: true},
		{kind: opOverlay, source: "/home/u/data", target: root + "/home/u/data", nodev: true},
		{kind: opMinimalDev, target: root + "/dev"},
		{kind: opProc, target: root + "/proc"},
		{kind: opRbind, source: "/sys", target: root + "/sys", readOnly: true},
		{kind: opMask, target: root + "/proc/kcore"},
		{kind: opMask, target: root + "/sys/firmware"},
		{kind: opReadOnlyPath, target: root + "/proc/bus"},
		{kind: opReadOnlyPath, target: root + "/proc/fs"},
		{kind: opReadOnlyPath, target: root + "/proc/irq"},
		{kind: opReadOnlyPath, target: root + "/proc/sys"},
		{kind: opReadOnlyPath, target: root + "/proc/sysrq-trigger"},
		{kind: opVolume, source: "/var/lib/jk/pods/u/volumes/cache", target: "/work", nodev: true},
		{kind: opVolume, source: "/etc/cfg", target: "/etc/cfg", readOnly: true, nodev: true},
	}
	masked := []string{"/proc/kcore", "/sys/firmware"}
	if got, err := plan(host, entries, cfg, masked); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("plan:\n got %+v\nwant %+v", got, want)
	}

	// readOnlyRootFilesystem: the root is a mount of its own; once the
	// view is built, the volumes' mount points and the working directory
	// are made, then every overlay and the root are made read-only, then
	// the volumes are mounted.
	cfg.ReadOnlyRoot, cfg.WorkingDir = true, "/work/sub"
	ro := append([]op{want[0], want[1], {kind: opRbind, source: root, target: root}}, want[2:22]...)
	ro = append(ro,
		op{kind: opMountPoint, source: "/var/lib/jk/pods/u/volumes/cache", target: "/work"},
		op{kind: opMountPoint, source: "/etc/cfg", target: "/etc/cfg"},
		op{kind: opMountPoint, target: "/work/sub"},
		op{kind: opReadOnly, target: root + "/etc"},
		op{kind: opReadOnly, target: root + "/home"},
		op{kind: opReadOnly, target: root + "/tmp"},
		op{kind: opReadOnly, target: root + "/vmlinuz"},
		op{kind: opReadOnly, target: root + "/etc/resolv.conf"},
		op{kind: opReadOnly, target: root + "/tmp/x"},
		op{kind: opReadOnly, target: root + "/home/u/data"},
		op{kind: opReadOnly, target: root},
	)
	ro = append(ro, want[22:]...)
	if got, err := plan(host, entries, cfg, masked); err != nil || !reflect.DeepEqual(got, ro) {
		t.Errorf("plan with ReadOnlyRoot:\n got %+v\nwant %+v", got, ro)
	}
}

func TestWithin(t *testing.T) {
	for _, c := range []struct {
		p, dir string
		want   bool
	}{
		{"/tmp", "/tmp", true},
		{"/tmp/a", "/tmp", true},
		{"/tmpx", "/tmp", false},
		{"/", "/tmp", false},
		{"/a/b", "/", true},
	} {
		if got := Within(c.p, c.dir); got != c.want {
			t.Errorf("Within(%q, %q) = %v, want %v", c.p, c.dir, got, c.want)
		}
	}
}

func TestPlanImage(t *testing.T) {
	scratch := "/var/lib/jk/scratch/c-1"
	root := scratch + "/root"
	mounts := []Mount{{Source: "/var/lib/jk/pods/u/etc-hosts", Target: "/etc/hosts", ReadOnly: true}, {Source: "/data", Target: "/work/"}}
	hostTreesIn := []op{
		{kind: opMinimalDev, target: "/dev", view: true},
		{kind: opProc, target: "/proc", view: true},
		{kind: opRbind, source: "/sys", target: "/sys", readOnly: true, view: true},
		{kind: opMask, target: "/proc/kcore", view: true},
		{kind: opReadOnlyPath, target: "/proc/bus", view: true},
		{kind: opReadOnlyPath, target: "/proc/fs", view: true},
		{kind: opReadOnlyPath, target: "/proc/irq", view: true},
		{kind: opReadOnlyPath, target: "/proc/sys", view: true},
		{kind: opReadOnlyPath, target: "/proc/sysrq-trigger", view: true},
	}
	for name, tc := range map[string]struct {
		layers   []string
		scratch  string
		readOnly bool
		want     []op
		wantErr  string
	}{
		"layers top first, then host trees and volumes": {
			layers: []string{"/img/l1", "/img/l2/", "/img/l3"},
			want: append(append([]op{
				{kind: opTmpfs, target: scratch, mode: "0700"},
				{kind: opMkdir, target: root},
				{kind: opImage, source: scratch + "/image", target: root, lowers: []string{"/img/l3", "/img/l2", "/img/l1"}, nodev: true},
			}, hostTreesIn...),
				op{kind: opVolume, source: "/var/lib/jk/pods/u/etc-hosts", target: "/etc/hosts", readOnly: true, nodev: true},
				op{kind: opVolume, source: "/data", target: "/work", nodev: true},
			),
		},
		"no layers is an empty directory": {
			layers: nil,
			want: append(append([]op{
				{kind: opTmpfs, target: scratch, mode: "0700"},
				{kind: opMkdir, target: root},
				{kind: opMkdir, target: scratch + "/empty"},
				{kind: opImage, source: scratch + "/image", target: root, lowers: []string{scratch + "/empty"}, nodev: true},
			}, hostTreesIn...),
				op{kind: opVolume, source: "/var/lib/jk/pods/u/etc-hosts", target: "/etc/hosts", readOnly: true, nodev: true},
				op{kind: opVolume, source: "/data", target: "/work", nodev: true},
			),
		},
		"read-only root": {
			layers:   []string{"/img/l1"},
			readOnly: true,
			want: append(append([]op{
				{kind: opTmpfs, target: scratch, mode: "0700"},
				{kind: opMkdir, target: root},
				{kind: opImage, source: scratch + "/image", target: root, lowers: []string{"/img/l1"}, nodev: true},
			}, hostTreesIn...),
				op{kind: opMountPoint, source: "/var/lib/jk/pods/u/etc-hosts", target: "/etc/hosts"},
				op{kind: opMountPoint, source: "/data", target: "/work"},
				op{kind: opReadOnly, target: root},
				op{kind: opVolume, source: "/var/lib/jk/pods/u/etc-hosts", target: "/etc/hosts", readOnly: true, nodev: true},
				op{kind: opVolume, source: "/data", target: "/work", nodev: true},
			),
		},
		"relative layer":              {layers: []string{"img/l1"}, wantErr: "not an absolute path"},
		"layer overlay cannot name":   {layers: []string{"/img/sha256:abc"}, wantErr: "cannot be named in overlay options"},
		"scratch overlay cannot name": {layers: []string{"/img/l1"}, scratch: "/tmp/a,b", wantErr: "scratch directory"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := Spec{Scratch: scratch, Mounts: mounts, Rootfs: &Rootfs{Layers: tc.layers}, ReadOnlyRoot: tc.readOnly}
			if tc.scratch != "" {
				cfg.Scratch = tc.scratch
			}
			got, err := planImage(cfg, []string{"/proc/kcore"})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("planImage error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("planImage:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestImageOptions(t *testing.T) {
	long := func(n int) []string {
		var out []string
		for i := n; i > 0; i-- {
			out = append(out, fmt.Sprintf("/var/lib/jobkeeper/images/layers/%064d/fs", i))
		}
		return out
	}
	for name, tc := range map[string]struct {
		lowers  []string
		want    string
		wantCwd string
		wantErr bool
	}{
		"absolute paths fit": {
			lowers: []string{"/l/2", "/l/1"},
			want:   "lowerdir=/l/2:/l/1,upperdir=/s/image/upper,workdir=/s/image/work",
		},
		"relative to the common parent when too long": {
			lowers:  long(40),
			wantCwd: "/var/lib/jobkeeper/images/layers",
			want: "lowerdir=" + strings.Join(func() []string {
				var out []string
				for i := 40; i > 0; i-- {
					out = append(out, fmt.Sprintf("%064d/fs", i))
				}
				return out
			}(), ":") + ",upperdir=/s/image/upper,workdir=/s/image/work",
		},
		"too long even relative": {lowers: long(70), wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			got, cwd, err := imageOptions(tc.lowers, "/s/image/upper", "/s/image/work", 4096)
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), "more than the kernel takes") {
					t.Errorf("imageOptions error = %v, want too long", err)
				}
				return
			}
			if err != nil || got != tc.want || cwd != tc.wantCwd {
				t.Errorf("imageOptions = %q, %q, %v; want %q, %q", got, cwd, err, tc.want, tc.wantCwd)
			}
		})
	}
}

// TestSystemTrees: a privileged container gets the host's devices, a
// writable /sys and nothing masked; procMount Unmasked masks nothing and
// leaves /proc writable; every other container gets a runtime's /dev and
// the masked and read-only paths; the container's own cgroups are bound
// over their hierarchies once /sys is there.
func TestSystemTrees(t *testing.T) {
	at := func(p string) string { return "/r" + p }
	masked := []string{"/proc/kcore", "/sys/firmware"}
	base := []op{
		{kind: opMinimalDev, target: "/r/dev"},
		{kind: opProc, target: "/r/proc"},
		{kind: opRbind, source: "/sys", target: "/r/sys", readOnly: true},
	}
	for name, tc := range map[string]struct {
		cfg  Spec
		want []op
	}{
		"default": {want: append(slices.Clone(base),
			op{kind: opMask, target: "/r/proc/kcore"},
			op{kind: opMask, target: "/r/sys/firmware"},
			op{kind: opReadOnlyPath, target: "/r/proc/bus"},
			op{kind: opReadOnlyPath, target: "/r/proc/fs"},
			op{kind: opReadOnlyPath, target: "/r/proc/irq"},
			op{kind: opReadOnlyPath, target: "/r/proc/sys"},
			op{kind: opReadOnlyPath, target: "/r/proc/sysrq-trigger"},
		)},
		"procMount Unmasked": {cfg: Spec{UnmaskedProc: true}, want: base},
		"own cgroups (v1): only those, on a tmpfs, after /sys": {cfg: Spec{UnmaskedProc: true, Cgroups: []CgroupBind{
			{Source: "/sys/fs/cgroup/memory/k/c-0", Target: "/sys/fs/cgroup/memory"},
			{Source: "/sys/fs/cgroup/cpu,cpuacct/k/c-0", Target: "/sys/fs/cgroup/cpu,cpuacct"}}},
			want: append(slices.Clone(base),
				op{kind: opDetach, target: "/r/sys/fs/cgroup"},
				op{kind: opHide, target: "/r/sys/fs/cgroup"},
				op{kind: opRbind, source: "/sys/fs/cgroup/memory/k/c-0", target: "/r/sys/fs/cgroup/memory", readOnly: true},
				op{kind: opRbind, source: "/sys/fs/cgroup/cpu,cpuacct/k/c-0", target: "/r/sys/fs/cgroup/cpu,cpuacct", readOnly: true},
				op{kind: opSymlink, source: "cpu,cpuacct", target: "/r/sys/fs/cgroup/cpu"},
				op{kind: opSymlink, source: "cpu,cpuacct", target: "/r/sys/fs/cgroup/cpuacct"},
				op{kind: opReadOnly, target: "/r/sys/fs/cgroup"})},
		"own cgroup (v2): over the hierarchy": {cfg: Spec{UnmaskedProc: true, Cgroups: []CgroupBind{{Source: "/sys/fs/cgroup/k/c-0", Target: "/sys/fs/cgroup"}}},
			want: append(slices.Clone(base), op{kind: opDetach, target: "/r/sys/fs/cgroup"},
				op{kind: opRbind, source: "/sys/fs/cgroup/k/c-0", target: "/r/sys/fs/cgroup", readOnly: true})},
		"privileged": {cfg: Spec{Privileged: true}, want: []op{
			{kind: opDev, source: "/dev", target: "/r/dev"},
			{kind: opProc, target: "/r/proc"},
			{kind: opRbind, source: "/sys", target: "/r/sys"},
		}},
	} {
		t.Run(name, func(t *testing.T) {
			if got := systemTrees(tc.cfg, masked, at, false); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("systemTrees:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestImageVolumes: an image volume is assembled on the scratch tmpfs, a
// read-only overlay of its layers (top first), before anything else of
// the view, and its mount then binds it read-only like any volume; other
// mounts are left as they are, and bad layer paths are refused.
func TestImageVolumes(t *testing.T) {
	cfg := Spec{Scratch: "/s", Mounts: []Mount{
		{Source: "/v/a", Target: "/a"},
		{Image: true, Layers: []string{"/img/l1", "/img/l2"}, SubPath: "models", Target: "/models"},
		{Image: true, Target: "/empty"},
	}}
	ops, err := imageVolumes(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := []op{
		{kind: opMkdir, target: "/s/imagevolumes/1/root"},
		{kind: opImage, source: "/s/imagevolumes/1", target: "/s/imagevolumes/1/root", lowers: []string{"/img/l2", "/img/l1"}, readOnly: true, nodev: true},
		{kind: opMkdir, target: "/s/imagevolumes/2/empty"},
		{kind: opMkdir, target: "/s/imagevolumes/2/root"},
		{kind: opImage, source: "/s/imagevolumes/2", target: "/s/imagevolumes/2/root", lowers: []string{"/s/imagevolumes/2/empty"}, readOnly: true, nodev: true},
	}
	if !reflect.DeepEqual(ops, want) {
		t.Errorf("steps:\n got %+v\nwant %+v", ops, want)
	}
	wantMounts := []Mount{
		{Source: "/v/a", Target: "/a"},
		{Source: "/s/imagevolumes/1/root", Image: true, Layers: []string{"/img/l1", "/img/l2"}, SubPath: "models", Target: "/models", ReadOnly: true},
		{Source: "/s/imagevolumes/2/root", Image: true, Target: "/empty", ReadOnly: true},
	}
	if !reflect.DeepEqual(cfg.Mounts, wantMounts) {
		t.Errorf("mounts:\n got %+v\nwant %+v", cfg.Mounts, wantMounts)
	}
	bad := Spec{Scratch: "/s", Mounts: []Mount{{Image: true, Layers: []string{"/img/a:b"}, Target: "/x"}}}
	if _, err := imageVolumes(&bad); err == nil {
		t.Error("a layer path with ':' was accepted")
	}
}
