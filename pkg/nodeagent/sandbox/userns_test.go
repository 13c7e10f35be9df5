package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/sandbox/imagetest"
)

// testMapping is a pod's range as the kubelet would give the fourth pod.
var testMapping = IDMapping{HostUID: 4 * 65536, HostGID: 4 * 65536, Size: 65536}

// requireRoot skips where the sandbox cannot be root of the host's user
// namespace, which a container's own user namespace needs.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("a user namespace per container needs the agent to run as root")
	}
}

// hostUID is the host's uid of process pid.
func hostUID(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", itoa(pid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "Uid:") {
			return strings.Fields(line)[1]
		}
	}
	t.Fatalf("no Uid line in %s", b)
	return ""
}

func TestUserNamespaceImage(t *testing.T) {
	requireRoot(t)
	layers := imagetest.Layers(t, t.TempDir())
	vol := t.TempDir()
	if err := os.WriteFile(filepath.Join(vol, "owned"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(vol, "owned"), 1000, 1000); err != nil {
		t.Fatal(err)
	}
	m := testMapping
	cfg := Config{
		Rootfs:        &Rootfs{Layers: layers},
		PIDNamespace:  PIDContainer,
		UserNamespace: &m,
		User:          &User{},
		Mounts:        []Mount{{Source: vol, Target: "/data"}},
		Command: []string{"tool", "id", "cat:/proc/self/uid_map", "stat:/", "stat:/etc/passwd", "stat:/data",
			"stat:/data/owned", "write:/data/new=1", "write:/etc/new=1", "stat:/etc/new", "stat:/dev/shm", "stat:/dev", "sleep"},
	}
	s, output := startTest(t, true, cfg)
	if got := hostUID(t, s.PID()); got != itoa(int(m.HostUID)) {
		t.Errorf("the main process's host uid = %s, want %d", got, m.HostUID)
	}
	// An exec'd command: the same user, mapping and view.
	b, code := execOutput(t, s, "tool", "id", "cat:/proc/self/uid_map", "stat:/etc/new", "absent:/usr", "write:/data/exec=1")
	if code != 0 {
		t.Errorf("exec exit %d: %s", code, b)
	}
	uidMap := "         0     262144      65536"
	wantExec := []string{"uid=0 gid=0 groups=[0]", uidMap, "/etc/new uid=0 gid=0", "absent /usr", "wrote /data/exec"}
	if diff := cmp.Diff(wantExec, strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")); diff != "" {
		t.Errorf("exec'd command (-want +got):\n%s", diff)
	}
	s.Kill()
	<-s.Done()
	got := strings.Split(strings.TrimSuffix(output(), "\n"), "\n")
	want := []string{"uid=0 gid=0 groups=[0]", uidMap, "/ uid=0 gid=0", "/etc/passwd uid=0 gid=0", "/data uid=0 gid=0",
		"/data/owned uid=1000 gid=1000", "wrote /data/new", "wrote /etc/new", "/etc/new uid=0 gid=0", "/dev/shm uid=0 gid=0", "/dev uid=0 gid=0"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("main process (-want +got):\n%s", diff)
	}
	// What the container wrote as its root is stored as the host's 0
	// through the idmapped volume, not as the range's first id.
	for _, f := range []string{"new", "exec"} {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(vol, f), &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != 0 || st.Gid != 0 {
			t.Errorf("%s stored as %d:%d, want 0:0", f, st.Uid, st.Gid)
		}
	}
}

func TestUserNamespaceHostMode(t *testing.T) {
	requireRoot(t)
	m := testMapping
	vol := t.TempDir()
	cfg := Config{
		PIDNamespace:  PIDContainer,
		UserNamespace: &m,
		Mounts:        []Mount{{Source: vol, Target: "/data"}},
		Command:       []string{"sh", "-c", `id -u; id -g; cat /proc/self/uid_map; stat -c '%u %g' / /usr/bin /data; echo x > /etc/jobkeeper-userns-test && echo wrote etc; echo y > /data/f && echo wrote data`},
	}
	s, output := startTest(t, true, cfg)
	if ex := waitDone(t, s); ex.Code != 0 {
		t.Errorf("exit = %+v", ex)
	}
	got := strings.Split(strings.TrimSuffix(output(), "\n"), "\n")
	want := []string{"0", "0", "         0     262144      65536", "0 0", "0 0", "0 0", "wrote etc", "wrote data"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if _, err := os.Stat("/etc/jobkeeper-userns-test"); err == nil {
		_ = os.Remove("/etc/jobkeeper-userns-test")
		t.Errorf("the container's write reached the host's /etc")
	}
}

// TestUserNamespaceRunAsUser: a container running as 1000 is the range's
// 1000th id on the host, stores its files as 1000 in a volume, and has no
// capability (it cannot write where root of the image could).
func TestUserNamespaceRunAsUser(t *testing.T) {
	requireRoot(t)
	layers := imagetest.Layers(t, t.TempDir())
	vol := t.TempDir()
	if err := os.Chmod(vol, 0o777); err != nil {
		t.Fatal(err)
	}
	m := testMapping
	uid := int64(1000)
	cfg := Config{
		Rootfs:        &Rootfs{Layers: layers},
		PIDNamespace:  PIDContainer,
		UserNamespace: &m,
		User:          &User{RunAsUser: &uid, RunAsGroup: &uid},
		Mounts:        []Mount{{Source: vol, Target: "/data"}},
		Command:       []string{"tool", "id", "write:/data/mine=1", "write:/etc/denied=1", "sleep"},
		Capabilities:  ContainerCapabilities(nil, nil),
	}
	s, output := startTest(t, true, cfg)
	if got, want := hostUID(t, s.PID()), itoa(int(m.HostUID)+1000); got != want {
		t.Errorf("host uid = %s, want %s", got, want)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(filepath.Join(vol, "mine")); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.Kill()
	<-s.Done()
	got := strings.Split(strings.TrimSuffix(output(), "\n"), "\n")
	if len(got) != 3 || !strings.HasPrefix(got[0], "uid=1000 gid=1000 ") || got[1] != "wrote /data/mine" || !strings.Contains(got[2], "permission denied") {
		t.Errorf("output = %q", got)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(vol, "mine"), &st); err != nil || st.Uid != 1000 || st.Gid != 1000 {
		t.Errorf("the file is stored as %d:%d (%v), want 1000:1000", st.Uid, st.Gid, err)
	}
}

// TestUserNamespaceJoinsAPIDNamespace: a container with a user namespace
// joins its pod's shared PID namespace (a pause sandbox's, as
// shareProcessNamespace), sees its processes, and an exec'd command joins
// it too.
func TestUserNamespaceJoinsAPIDNamespace(t *testing.T) {
	requireRoot(t)
	m := testMapping
	pause, _ := startTest(t, true, Config{Rootfs: &Rootfs{}, PIDNamespace: PIDContainer, Pause: true, UserNamespace: &m})
	ns, err := os.Open("/proc/" + itoa(pause.PID()) + "/ns/pid")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ns.Close() }()
	users, err := os.Open("/proc/" + itoa(pause.PID()) + "/ns/user")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = users.Close() }()
	s, _ := startTestWith(t, true, StartOptions{JoinPIDNamespace: ns, JoinUserNamespace: users}, Config{
		Command:       []string{"sleep", "3604"},
		PIDNamespace:  PIDJoin,
		UserNamespace: &m,
	})
	// The pod's one user namespace: the pause process's, its root's.
	if got := hostUID(t, pause.PID()); got != itoa(int(m.HostUID)) {
		t.Errorf("the pause process runs as host uid %s, want %d", got, m.HostUID)
	}
	pauseNS, _ := os.Readlink("/proc/" + itoa(pause.PID()) + "/ns/user")
	mainNS, _ := os.Readlink("/proc/" + itoa(s.PID()) + "/ns/user")
	if canEnterUserNamespace && (pauseNS == "" || pauseNS != mainNS) {
		t.Errorf("the container's user namespace is %q, the pod's %q", mainNS, pauseNS)
	}
	out, code := execOutput(t, s, "sh", "-c", `id -u; cat /proc/self/uid_map; ps -o pid,args | grep -c 'sleep 3604$'`)
	if code != 0 {
		t.Fatalf("exec exit %d: %s", code, out)
	}
	if want := "0\n         0     262144      65536\n1\n"; out != want {
		t.Errorf("exec'd output %q, want %q", out, want)
	}
}

// TestUserNamespacePrivilegedAsAUser: a privileged container running as
// another user than root holds no capability, in its main process and in
// an exec'd command, as without a user namespace (the stages' ambient
// capabilities do not reach it).
func TestUserNamespacePrivilegedAsAUser(t *testing.T) {
	requireRoot(t)
	m := testMapping
	uid := int64(1000)
	s, out := startTest(t, true, Config{
		PIDNamespace: PIDContainer, UserNamespace: &m, Privileged: true,
		User:    &User{RunAsUser: &uid, RunAsGroup: &uid},
		Command: []string{"sh", "-c", "grep -E '^Cap(Inh|Prm|Eff|Amb)' /proc/self/status; exec sleep 3605"},
	})
	exec, code := execOutput(t, s, "sh", "-c", "grep -E '^Cap(Inh|Prm|Eff|Amb)' /proc/self/status")
	if code != 0 {
		t.Fatalf("exec exit %d: %s", code, exec)
	}
	s.Kill()
	<-s.Done()
	want := "CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapAmb:\t0000000000000000\n"
	if got := out(); got != want {
		t.Errorf("main process: %q, want %q", got, want)
	}
	if exec != want {
		t.Errorf("exec'd command: %q, want %q", exec, want)
	}
}

// TestUserNamespaceMadeDirectoriesAreTheContainers: the working directory
// and the mount points the sandbox makes in the view belong to the
// container's root, who may write there; a root directory the container
// closed to everyone else does not keep commands from being exec'd into
// it; and an exec'd command, in the main process's user namespace, may
// read its main process's /proc files (as the same user).
func TestUserNamespaceMadeDirectoriesAreTheContainers(t *testing.T) {
	requireRoot(t)
	layers := imagetest.Layers(t, t.TempDir())
	m := testMapping
	s, _ := startTest(t, true, Config{
		Rootfs: &Rootfs{Layers: layers}, PIDNamespace: PIDContainer, UserNamespace: &m, User: &User{},
		WorkingDir: "/newdir/sub",
		Mounts:     []Mount{{Source: t.TempDir(), Target: "/mnt/a/b"}},
		Command:    []string{"tool", "stat:/newdir", "stat:/newdir/sub", "stat:/mnt/a", "write:/newdir/sub/f=1", "write:/mnt/a/f=1", "sleep"},
	})
	for _, argv := range [][]string{
		{"tool", "stat:/newdir", "stat:/newdir/sub", "stat:/mnt/a", "write:/newdir/sub/f=1", "write:/mnt/a/f=1"},
		{"tool", "cat:/proc/1/environ"},
	} {
		out, code := execOutput(t, s, argv...)
		if code != 0 {
			t.Fatalf("exec %v exit %d: %s", argv, code, out)
		}
		want := map[string]string{
			"tool": "/newdir uid=0 gid=0\n/newdir/sub uid=0 gid=0\n/mnt/a uid=0 gid=0\nwrote /newdir/sub/f\nwrote /mnt/a/f\n",
		}["tool"]
		if argv[1] == "cat:/proc/1/environ" {
			if !canEnterUserNamespace {
				// In a namespace of its own (a build without cgo), the
				// kernel does not let it read another's.
				continue
			}
			want = "PATH=/usr/local/bin:/usr/bin:/bin\x00HOME=/root\x00\n"
		}
		if out != want {
			t.Errorf("exec %v: %q, want %q", argv, out, want)
		}
	}
	// Root of the container closes its root directory: commands are
	// still exec'd (the stage reaches the view by descriptor).
	if out, code := execOutput(t, s, "tool", "chmod:/=0700"); code != 0 {
		t.Fatalf("chmod: %d %s", code, out)
	}
	if out, code := execOutput(t, s, "tool", "stat:/"); code != 0 || out != "/ uid=0 gid=0\n" {
		t.Errorf("exec after the root was closed: %d %q", code, out)
	}
}

// TestHostTreeHoldsOnlyTheRootAndProc: the copy of the host's tree that
// exec'd commands' stages start from holds the root filesystem and
// /proc, not the host's other filesystems (another pod's tmpfs volume
// would stay mounted for the container's life).
func TestHostTreeHoldsOnlyTheRootAndProc(t *testing.T) {
	requireRoot(t)
	dir, err := os.MkdirTemp("/var/tmp", "jobkeeper-hosttree-")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) }()
	if err := os.WriteFile(filepath.Join(dir, "secret"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	tree, err := cloneHostTree()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Close(tree) }()
	at := "/proc/self/fd/" + itoa(tree)
	if _, err := os.Stat(at + dir + "/secret"); err == nil {
		t.Errorf("the copy holds the host's tmpfs at %s", dir)
	}
	if _, err := os.Stat(at + "/proc/self/exe"); err != nil {
		t.Errorf("the copy has no /proc: %v", err)
	}
}

// TestUserNamespaceDirectoriesInAVolume: a working directory and a mount
// point made inside an idmapped volume are made as the container's root
// (the host's root is no id there), and stored as root of the volume.
func TestUserNamespaceDirectoriesInAVolume(t *testing.T) {
	requireRoot(t)
	layers := imagetest.Layers(t, t.TempDir())
	vol := t.TempDir()
	m := testMapping
	s, _ := startTest(t, true, Config{
		Rootfs: &Rootfs{Layers: layers}, PIDNamespace: PIDContainer, UserNamespace: &m, User: &User{},
		WorkingDir: "/vol/work/sub",
		Mounts:     []Mount{{Source: vol, Target: "/vol"}, {Source: t.TempDir(), Target: "/vol/nested/x"}},
		Command:    []string{"tool", "sleep"},
	})
	out, code := execOutput(t, s, "tool", "pwd", "stat:/vol/work/sub", "stat:/vol/nested")
	if want := "/vol/work/sub\n/vol/work/sub uid=0 gid=0\n/vol/nested uid=0 gid=0\n"; code != 0 || out != want {
		t.Errorf("exec: %d %q, want %q", code, out, want)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(vol, "work", "sub"), &st); err != nil || st.Uid != 0 || st.Gid != 0 {
		t.Errorf("the working directory is stored as %d:%d (%v), want 0:0", st.Uid, st.Gid, err)
	}
}

// TestUserNamespaceStoppedExecStage: a container that stops the stage of a
// command exec'd into it (its root may signal it once it is in the
// container's namespace) does not hold the sandbox: the exec fails after
// a bound, and the sandbox still stops the container.
func TestUserNamespaceStoppedExecStage(t *testing.T) {
	requireRoot(t)
	if !canEnterUserNamespace {
		t.Skip("without cgo the stage stays in a namespace of its own, which the container cannot signal")
	}
	m := testMapping
	s, _ := startTest(t, true, Config{
		PIDNamespace: PIDContainer, UserNamespace: &m, Capabilities: ContainerCapabilities(nil, nil),
		Command: []string{"sh", "-c", `while :; do for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = exe ] && kill -STOP ${p#/proc/} 2>/dev/null; done; done`},
	})
	devNull, _ := os.Open(os.DevNull)
	defer func() { _ = devNull.Close() }()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := s.Exec(ctx, []string{"true"}, false, devNull, devNull, devNull)
	if d := time.Since(start); d > stageTimeout+5*time.Second {
		t.Errorf("the exec took %v", d)
	}
	// It may have won the race and run; it is then the container's
	// process, which the loop may have stopped too (the kernel closes the
	// stage's descriptors before it renames it): not waited for, Kill
	// below ends it with the rest.
	if err != nil && !strings.Contains(err.Error(), "init stage") {
		t.Errorf("Exec: %v", err)
	}
	s.Kill()
	select {
	case <-s.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the sandbox did not end after Kill")
	}
	if ex := s.Exit(); ex.Lost {
		t.Errorf("the container's end was lost: %+v", ex)
	}
}
