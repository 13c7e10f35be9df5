package sandbox

import (
	"reflect"
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
	cfg := Config{
		Isolate: true,
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
		{kind: opOverlay, source: "/etc", target: root + "/etc"},
		{kind: opOverlay, source: "/home", target: root + "/home"},
		{kind: opMkdir, target: root + "/proc"},
		{kind: opOverlay, source: "/tmp", target: root + "/tmp"},
		{kind: opOverlay, source: "/vmlinuz", target: root + "/vmlinuz"},
		{kind: opOverlay, source: "/etc/resolv.conf", target: root + "/etc/resolv.conf"},
		{kind: opOverlay, source: "/tmp/x", target: root + "/tmp/x"},
		{kind: opOverlay, source: "/home/u/data", target: root + "/home/u/data"},
		{kind: opRbind, source: "/dev", target: root + "/dev"},
		{kind: opRbind, source: "/proc", target: root + "/proc"},
		{kind: opRbind, source: "/sys", target: root + "/sys", readOnly: true},
		{kind: opVolume, source: "/var/lib/jk/pods/u/volumes/cache", target: "/work"},
		{kind: opVolume, source: "/etc/cfg", target: "/etc/cfg", readOnly: true},
	}
	if got := plan(host, entries, cfg); !reflect.DeepEqual(got, want) {
		t.Errorf("plan:\n got %+v\nwant %+v", got, want)
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
		if got := within(c.p, c.dir); got != c.want {
			t.Errorf("within(%q, %q) = %v, want %v", c.p, c.dir, got, c.want)
		}
	}
}
