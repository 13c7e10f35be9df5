package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/sandbox/imagetest"
)

// TestContainerDev: a container that is not privileged sees a runtime's
// /dev (the default devices, its own devpts and shm, the descriptor links)
// and no device of the host's beyond them; a privileged one sees the
// host's.
func TestContainerDev(t *testing.T) {
	requirePID(t)
	hostBlock := hostBlockDevices(t)
	for _, pidns := range []string{PIDHost, PIDContainer} {
		t.Run(fmt.Sprintf("pid=%q", pidns), func(t *testing.T) {
			s, _ := startTest(t, true, Config{Capabilities: DefaultCapabilities, PIDNamespace: pidns, Command: []string{"sleep", "3600"}})
			got, code := execOutput(t, s, "sh", "-c", "ls /dev | tr '\\n' ' '; echo; find /dev -type b | wc -l; readlink /dev/ptmx /dev/fd; echo x > /dev/null && head -c 4 /dev/zero | wc -c")
			if code != 0 {
				t.Fatalf("exec exited %d: %q", code, got)
			}
			want := "fd full null ptmx pts random shm stderr stdin stdout tty urandom zero \n0\npts/ptmx\n/proc/self/fd\n4\n"
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("the container's /dev (-want +got):\n%s", diff)
			}
		})
	}
	if len(hostBlock) > 0 && os.Getuid() == 0 {
		t.Run("privileged", func(t *testing.T) {
			s, _ := startTest(t, true, Config{Privileged: true, PIDNamespace: PIDContainer, Command: []string{"sleep", "3600"}})
			got, code := execOutput(t, s, "sh", "-c", "test -b /dev/"+hostBlock[0]+" && echo host device")
			if code != 0 || got != "host device\n" {
				t.Errorf("a privileged container lacks the host's /dev/%s: %d %q", hostBlock[0], code, got)
			}
		})
	}
}

// TestContainerProc: the container's /proc is a procfs of its own PID
// namespace with nothing of the host's beneath it: even a container given
// CAP_SYS_ADMIN that unmounts it finds an empty directory. Without that
// capability it cannot unmount it. The masked paths are hidden and the
// read-only ones read-only, unless procMount is Unmasked or the container
// is privileged.
func TestContainerProc(t *testing.T) {
	requirePID(t)
	for _, pidns := range []string{PIDHost, PIDContainer} {
		t.Run(fmt.Sprintf("default/pid=%q", pidns), func(t *testing.T) {
			s, _ := startTest(t, true, Config{Capabilities: DefaultCapabilities, PIDNamespace: pidns, Command: []string{"sleep", "3600"}})
			got, code := execOutput(t, s, "sh", "-c", strings.Join([]string{
				"umount /proc 2>/dev/null && echo UNMOUNTED || echo umount refused",
				"umount -l /proc 2>/dev/null && echo UNMOUNTED || echo lazy umount refused",
				"wc -c < /proc/interrupts",
				"wc -c < /proc/keys",
				"ls -A /sys/firmware | wc -l",
				"ls /proc/acpi 2>/dev/null | wc -l",
				"awk '$5 == \"/proc/sys\" || $5 == \"/proc/bus\" || $5 == \"/proc/fs\" {split($6, o, \",\"); print $5, o[1]}' /proc/self/mountinfo | sort",
			}, "; "))
			if code != 0 {
				t.Fatalf("exec exited %d: %q", code, got)
			}
			want := "umount refused\nlazy umount refused\n0\n0\n0\n0\n/proc/bus ro\n/proc/fs ro\n/proc/sys ro\n"
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("the container's /proc (-want +got):\n%s", diff)
			}
		})
		t.Run(fmt.Sprintf("with CAP_SYS_ADMIN, unmounted/pid=%q", pidns), func(t *testing.T) {
			s, _ := startTest(t, true, Config{Capabilities: ContainerCapabilities([]string{"SYS_ADMIN"}, nil), PIDNamespace: pidns, Command: []string{"sleep", "3600"}})
			// The masks and read-only binds are mounts on /proc: the
			// lazy unmount takes them with it.
			got, code := execOutput(t, s, "sh", "-c", "umount -l /proc && ls -A /proc | wc -l")
			if code != 0 {
				t.Fatalf("exec exited %d: %q", code, got)
			}
			if got != "0\n" {
				t.Errorf("beneath the container's /proc: %q entries, want an empty directory", got)
			}
		})
	}
	t.Run("procMount Unmasked", func(t *testing.T) {
		s, _ := startTest(t, true, Config{Capabilities: DefaultCapabilities, UnmaskedProc: true, PIDNamespace: PIDContainer, Command: []string{"sleep", "3600"}})
		got, code := execOutput(t, s, "sh", "-c", "awk '$5 ~ \"^/proc/\"' /proc/self/mountinfo | wc -l")
		if code != 0 || got != "0\n" {
			t.Errorf("procMount Unmasked: %d %q, want no mount below /proc", code, got)
		}
	})
}

// hostBlockDevices lists the block devices in the host's /dev.
func hostBlockDevices(t *testing.T) []string {
	t.Helper()
	des, err := os.ReadDir("/dev")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range des {
		if d.Type()&os.ModeDevice != 0 && d.Type()&os.ModeCharDevice == 0 {
			out = append(out, d.Name())
		}
	}
	return out
}

// TestHostModeHides: a host-mode view shows the directories of Hide empty
// (the agent's data directory: keys, other pods' files), while a volume
// whose source and mount point lie in one is still mounted.
func TestHostModeHides(t *testing.T) {
	requireNamespaces(t)
	hidden := t.TempDir()
	if err := os.WriteFile(filepath.Join(hidden, "ca.key"), []byte("host key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	own := filepath.Join(hidden, "pods", "c")
	if err := os.MkdirAll(own, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(own, "mine"), []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, output := startTest(t, true, Config{
		Capabilities: DefaultCapabilities,
		Hide:         []string{hidden},
		Mounts:       []Mount{{Source: own, Target: own}},
		WorkingDir:   own,
		Command:      []string{"sh", "-c", "cat " + filepath.Join(hidden, "ca.key") + " 2>/dev/null || echo key hidden; ls -A " + hidden + "; cat mine"},
	})
	if ex := waitDone(t, s); ex.Code != 0 {
		t.Errorf("exit %+v", ex)
	}
	if got, want := output(), "key hidden\npods\nmine\n"; got != want {
		t.Errorf("output %q, want %q", got, want)
	}
}

// TestHostModeNoChrootEscape: a host-mode container with CAP_SYS_CHROOT
// (in the default set) that chroots into a subdirectory and climbs out of
// it reaches the root of its view, not the host's: the directory Hide
// keeps from it stays hidden.
func TestHostModeNoChrootEscape(t *testing.T) {
	requirePID(t)
	hidden := t.TempDir()
	if err := os.WriteFile(filepath.Join(hidden, "ca.key"), []byte("host key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	escape := `mkdir -p /tmp/esc && perl -e 'chroot("/tmp/esc") or die "chroot: $!"; chdir("..") for 1..64; chroot(".") or die; open(my $f, "<", $ARGV[0]) ? print "READ: ", <$f> : print "hidden\n"' ` + filepath.Join(hidden, "ca.key")
	for _, pidns := range []string{PIDHost, PIDContainer} {
		t.Run("pid="+pidns, func(t *testing.T) {
			s, output := startTest(t, true, Config{Capabilities: DefaultCapabilities, Hide: []string{hidden}, PIDNamespace: pidns, Command: []string{"sh", "-c", escape}})
			if ex := waitDone(t, s); ex.Code != 0 {
				t.Errorf("exit %+v: %q", ex, output())
			}
			if got := output(); got != "hidden\n" {
				t.Errorf("after climbing out of a chroot: %q, want the hidden file still hidden", got)
			}
		})
	}
}

// TestNoDevicesMade: a container keeps CAP_MKNOD (containerd's default
// set) but, with no device cgroup here, every filesystem it can write is
// nodev: a node it makes of the host's null device cannot be opened, in
// its root, in /dev or in a volume. Privileged keeps device nodes usable.
func TestNoDevicesMade(t *testing.T) {
	requirePID(t)
	if os.Getuid() != 0 {
		t.Skip("making a device node needs CAP_MKNOD in the host's user namespace")
	}
	script := `for d in /tmp /dev /vol; do mknod $d/n c 1 3 && { (echo x > $d/n) 2>/dev/null && echo "$d: OPENED" || echo "$d: refused"; }; done`
	for name, tc := range map[string]struct {
		cfg  Config
		want string
	}{
		"default":    {cfg: Config{Capabilities: DefaultCapabilities}, want: "/tmp: refused\n/dev: refused\n/vol: refused\n"},
		"privileged": {cfg: Config{Privileged: true}, want: "/tmp: OPENED\n/dev: OPENED\n/vol: OPENED\n"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.PIDNamespace = PIDContainer
			cfg.Mounts = []Mount{{Source: t.TempDir(), Target: "/vol"}}
			cfg.Command = []string{"sh", "-c", script}
			s, output := startTest(t, true, cfg)
			if ex := waitDone(t, s); ex.Code != 0 {
				t.Errorf("exit %+v: %q", ex, output())
			}
			if got := output(); got != tc.want {
				t.Errorf("output %q, want %q", got, tc.want)
			}
		})
	}
}

// TestSysReadOnlyWithItsMounts: every mount of the container's /sys (the
// cgroup, tracing and debug filesystems below it too) is read-only.
func TestSysReadOnlyWithItsMounts(t *testing.T) {
	requirePID(t)
	s, _ := startTest(t, true, Config{Capabilities: DefaultCapabilities, PIDNamespace: PIDContainer, Command: []string{"sleep", "3600"}})
	got, code := execOutput(t, s, "sh", "-c", `awk '$5 ~ "^/sys" {split($6, o, ","); print o[1]}' /proc/self/mountinfo | sort | uniq -c | awk '{print $2}'`)
	if code != 0 || got != "ro\n" {
		t.Errorf("the modes of the mounts under /sys: %d %q, want ro only", code, got)
	}
}

// TestImageSystemDirectoryLinkRefused: an image whose /proc is a symbolic
// link (which would move the procfs where its masks are not looked for)
// does not start, as runc refuses it.
func TestImageSystemDirectoryLinkRefused(t *testing.T) {
	requireNamespaces(t)
	dir := t.TempDir()
	layers := imagetest.Layers(t, dir)
	extra := filepath.Join(dir, "extra")
	if err := os.MkdirAll(filepath.Join(extra, "tmp", "p"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("tmp/p", filepath.Join(extra, "proc")); err != nil {
		t.Fatal(err)
	}
	_, _, err := startSandbox(t, true, StartOptions{}, Config{Rootfs: &Rootfs{Layers: append(layers, extra)}, Capabilities: DefaultCapabilities, Command: []string{"tool"}})
	var sf *StartFailure
	if !errors.As(err, &sf) || sf.Reason != ReasonCreateContainerError || !strings.Contains(sf.Message, "symbolic link") {
		t.Errorf("start of an image whose /proc is a link: %v, want CreateContainerError naming the link", err)
	}
}

// TestVolumeUnderProcRefused: a volume mounted at or under /proc (which
// would cover the container's procfs or its masks) is refused, as runc
// refuses it, with CreateContainerConfigError.
func TestVolumeUnderProcRefused(t *testing.T) {
	requireNamespaces(t)
	for _, target := range []string{"/proc", "/proc/sys/kernel", "/proc/../proc/1"} {
		_, _, err := startSandbox(t, true, StartOptions{}, Config{Capabilities: DefaultCapabilities, Mounts: []Mount{{Source: t.TempDir(), Target: target}}, Command: []string{"true"}})
		var sf *StartFailure
		if !errors.As(err, &sf) || sf.Reason != ReasonCreateContainerConfigError || !strings.Contains(sf.Message, "/proc") {
			t.Errorf("a volume at %s: %v, want CreateContainerConfigError naming it", target, err)
		}
	}
}

// TestHostModeHidesThroughLinks: a directory of Hide named through an
// absolute link is hidden where the link leads inside the view.
func TestHostModeHidesThroughLinks(t *testing.T) {
	requireNamespaces(t)
	real := t.TempDir()
	if err := os.WriteFile(filepath.Join(real, "ca.key"), []byte("host key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "data")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	s, output := startTest(t, true, Config{
		Capabilities: DefaultCapabilities,
		Hide:         []string{link},
		Command:      []string{"sh", "-c", "cat " + filepath.Join(real, "ca.key") + " 2>/dev/null || echo key hidden"},
	})
	if ex := waitDone(t, s); ex.Code != 0 {
		t.Errorf("exit %+v", ex)
	}
	if got := output(); got != "key hidden\n" {
		t.Errorf("output %q, want the key hidden", got)
	}
}
