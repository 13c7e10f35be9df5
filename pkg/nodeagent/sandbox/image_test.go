package sandbox

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"golang.org/x/sys/unix"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/sandbox/imagetest"
)

// runImage runs one attempt of the image in layers and returns its
// output lines.
func runImage(t *testing.T, cfg Config) []string {
	t.Helper()
	s, output := startTest(t, true, cfg)
	if ex := waitDone(t, s); ex.Code != 0 {
		t.Errorf("exit = %+v, output %q", ex, output())
	}
	return strings.Split(strings.TrimSuffix(output(), "\n"), "\n")
}

func TestImageIsTheRoot(t *testing.T) {
	requireNamespaces(t)
	layers := imagetest.Layers(t, t.TempDir())
	vol := t.TempDir()
	hosts := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hosts, []byte("127.0.0.1 jobkeeper-test"), 0o644); err != nil {
		t.Fatal(err)
	}
	hostTmp, err := os.CreateTemp("/tmp", "jobkeeper-host-file-")
	if err != nil {
		t.Fatal(err)
	}
	_ = hostTmp.Close()
	t.Cleanup(func() { _ = os.Remove(hostTmp.Name()) })
	if _, err := os.Stat("/etc/os-release"); err != nil {
		t.Fatalf("the host has no /etc/os-release to hide: %v", err)
	}
	cfg := Config{
		Rootfs:     &Rootfs{Layers: layers},
		WorkingDir: "/srv/work",
		Mounts:     []Mount{{Source: vol, Target: "/data"}, {Source: hosts, Target: "/etc/hosts", ReadOnly: true}},
		Command: []string{"tool",
			"absent:/etc/os-release", "absent:" + hostTmp.Name(), "absent:/usr",
			"absent:/etc/gone", "cat:/etc/added",
			"absent:/etc/new", "write:/etc/new=1",
			"cat:/etc/hosts", "cat:" + imagetest.HostsLink,
			"write:/data/x=vol", "pwd",
			"write:/tmp/t=1", "write:/dev/shm/s=1",
			"absent:/proc/self/status", "absent:/dev/null", "absent:/sys/kernel",
		},
	}
	got := runImage(t, cfg)
	want := []string{
		"absent /etc/os-release", "absent " + hostTmp.Name(), "absent /usr",
		"absent /etc/gone", "added",
		"absent /etc/new", "wrote /etc/new",
		"127.0.0.1 jobkeeper-test", "127.0.0.1 jobkeeper-test",
		"wrote /data/x", "/srv/work",
		"wrote /tmp/t", "wrote /dev/shm/s",
		"present /proc/self/status", "present /dev/null", "present /sys/kernel",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("first attempt (-want +got):\n%s", diff)
	}
	if b, err := os.ReadFile(filepath.Join(vol, "x")); err != nil || string(b) != "vol" {
		t.Errorf("volume write: %q, %v", b, err)
	}
	for _, p := range []string{"/dev/shm/s", "/srv/work", filepath.Join(layers[0], "etc/new"), filepath.Join(layers[1], "etc/new"), filepath.Join(layers[0], "srv")} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the container's write reached the host at %s: %v", p, err)
		}
	}

	// The next attempt starts from the pristine image.
	cfg.Command = []string{"tool", "absent:/etc/new", "absent:/tmp/t", "absent:/etc/gone"}
	cfg.Mounts = nil
	if diff := cmp.Diff([]string{"absent /etc/new", "absent /tmp/t", "absent /etc/gone"}, runImage(t, cfg)); diff != "" {
		t.Errorf("second attempt (-want +got):\n%s", diff)
	}
}

func TestImageUser(t *testing.T) {
	requireNamespaces(t)
	layers := imagetest.Layers(t, t.TempDir())
	root := os.Getuid() == 0
	id := func(v int64) *int64 { return &v }
	for name, tc := range map[string]struct {
		user *User
		// rootOnly cases take an identity a user namespace of one user
		// does not have: without root they must be refused.
		rootOnly bool
		want     []string
		// report is what the sandbox reports (Sandbox.User).
		report *Identity
		// wantErr is part of the start failure's message.
		wantErr string
	}{
		"no user": {user: nil, want: []string{"uid=0 gid=0", "HOME="}},
		"image default root": {user: &User{}, want: []string{"uid=0 gid=0 groups=[0]", "HOME=/root"},
			report: &Identity{Groups: []uint32{0}}},
		"run as root over a named user": {
			user: &User{Image: "app", RunAsUser: id(0), RunAsGroup: id(0)}, want: []string{"uid=0 gid=0 groups=[0]", "HOME=/root"},
			report: &Identity{Groups: []uint32{0}},
		},
		"numeric": {user: &User{Image: "1234:55"}, rootOnly: true, want: []string{"uid=1234 gid=55 groups=[55]", "HOME=/"},
			report: &Identity{UID: 1234, GID: 55, Groups: []uint32{55}}},
		"named": {user: &User{Image: "app"}, rootOnly: true, want: []string{"uid=1000 gid=1000 groups=[50 1000]", "HOME=/home/app"},
			report: &Identity{UID: 1000, GID: 1000, Groups: []uint32{1000, 50}}},
		"named with supplemental groups merged": {
			user: &User{Image: "app", SupplementalGroups: []int64{9}}, rootOnly: true,
			want:   []string{"uid=1000 gid=1000 groups=[9 50 1000]", "HOME=/home/app"},
			report: &Identity{UID: 1000, GID: 1000, Groups: []uint32{1000, 50, 9}},
		},
		"named with strict groups": {
			user: &User{Image: "app", SupplementalGroups: []int64{9}, StrictGroups: true}, rootOnly: true,
			want:   []string{"uid=1000 gid=1000 groups=[9 1000]", "HOME=/home/app"},
			report: &Identity{UID: 1000, GID: 1000, Groups: []uint32{1000, 9}},
		},
		"runAsUser runAsGroup and supplemental groups": {
			user: &User{Image: "app", RunAsUser: id(7), RunAsGroup: id(8), SupplementalGroups: []int64{9}}, rootOnly: true,
			want:   []string{"uid=7 gid=8 groups=[8 9]", "HOME=/"},
			report: &Identity{UID: 7, GID: 8, Groups: []uint32{8, 9}},
		},
		"unknown name": {user: &User{Image: "nobody-here"}, wantErr: "unable to find user nobody-here"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := Config{Rootfs: &Rootfs{Layers: layers}, User: tc.user, Command: []string{"tool", "id", "env:HOME"}}
			if tc.rootOnly && !root {
				tc.wantErr = "maps uids only 0"
			}
			if tc.wantErr != "" {
				exe, _ := os.Executable()
				cfg.Isolate, cfg.Scratch = true, filepath.Join(t.TempDir(), "scratch")
				_ = os.Mkdir(cfg.Scratch, 0o700)
				_, err := Start(context.Background(), StartOptions{Executable: exe, Config: cfg, Namespaces: true})
				var sf *StartFailure
				if !errors.As(err, &sf) || sf.Reason != ReasonCreateContainerError || !strings.Contains(sf.Message, tc.wantErr) {
					t.Errorf("Start = %v, want %s saying %q", err, ReasonCreateContainerError, tc.wantErr)
				}
				return
			}
			s, output := startTest(t, true, cfg)
			if ex := waitDone(t, s); ex.Code != 0 {
				t.Errorf("exit = %+v, output %q", ex, output())
			}
			if diff := cmp.Diff(tc.report, s.User()); diff != "" {
				t.Errorf("reported user (-want +got):\n%s", diff)
			}
			got := strings.Split(strings.TrimSuffix(output(), "\n"), "\n")
			if len(got) == 2 && (!root || !strings.Contains(tc.want[0], "groups=")) {
				// The groups of a user namespace that cannot set them are
				// the agent's own, as are those of no user.
				got[0], _, _ = strings.Cut(got[0], " groups=")
				tc.want[0], _, _ = strings.Cut(tc.want[0], " groups=")
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestExecRunsInTheImage(t *testing.T) {
	requireNamespaces(t)
	user := &User{}
	if os.Getuid() == 0 {
		user = &User{Image: "app"}
	}
	s, _ := startTest(t, true, Config{
		Rootfs:     &Rootfs{Layers: imagetest.Layers(t, t.TempDir())},
		User:       user,
		WorkingDir: "/srv/work",
		Command:    []string{"tool", "write:/tmp/main=1", "sleep"},
	})
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	devNull, _ := os.Open(os.DevNull)
	defer func() { _ = devNull.Close() }()
	p, err := s.Exec(context.Background(), []string{"tool", "pwd", "wait:/tmp/main", "cat:/tmp/main", "absent:/etc/os-release", "env:HOME", "exit:4"}, false, devNull, w, w)
	_ = w.Close()
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	b, _ := io.ReadAll(r)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if code, err := p.Wait(ctx); err != nil || code != 4 {
		t.Errorf("Wait = %d, %v; want 4", code, err)
	}
	home := "/root"
	if user.Image == "app" {
		home = "/home/app"
	}
	want := "/srv/work\nfound /tmp/main\n1\nabsent /etc/os-release\nHOME=" + home + "\n"
	if string(b) != want {
		t.Errorf("exec output = %q, want %q", b, want)
	}
	if _, err := s.Exec(context.Background(), []string{"sh", "-c", "true"}, false, devNull, devNull, devNull); err == nil {
		t.Errorf("the host's sh ran in the image")
	}
}

func TestImageStartFailures(t *testing.T) {
	exe, _ := os.Executable()
	_, err := Start(context.Background(), StartOptions{Executable: exe, Config: Config{Rootfs: &Rootfs{Layers: []string{"/nonexistent"}}, Command: []string{"tool"}}})
	var sf *StartFailure
	if !errors.As(err, &sf) || sf.Reason != ReasonCreateContainerError || !strings.Contains(sf.Message, "private mount namespace") {
		t.Errorf("image without isolation: %v", err)
	}
	requireNamespaces(t)
	scratch := filepath.Join(t.TempDir(), "scratch")
	_ = os.Mkdir(scratch, 0o700)
	_, err = Start(context.Background(), StartOptions{Executable: exe, Namespaces: true, Config: Config{Isolate: true, Scratch: scratch, Rootfs: &Rootfs{Layers: []string{"/nonexistent/layer"}}, Command: []string{"tool"}}})
	if !errors.As(err, &sf) || sf.Reason != ReasonCreateContainerError || !strings.Contains(sf.Message, "overlay") {
		t.Errorf("missing layer: %v", err)
	}
}

func TestImageFilesThatAreNotRegular(t *testing.T) {
	requireNamespaces(t)
	fifo := func(p string) func(t *testing.T, base string) {
		return func(t *testing.T, base string) {
			_ = os.Remove(filepath.Join(base, p))
			if err := unix.Mkfifo(filepath.Join(base, p), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, tc := range map[string]struct {
		// change alters the image's base layer.
		change func(t *testing.T, base string)
		// hosts mounts a file at /etc/hosts, as the agent does.
		hosts bool
		// wantErr is part of the start failure's message.
		wantErr string
	}{
		"fifo passwd": {change: fifo("etc/passwd"), wantErr: "/etc/passwd of the image is not a regular file"},
		"fifo group":  {change: fifo("etc/group"), wantErr: "/etc/group of the image is not a regular file"},
		"passwd links to a device": {
			change: func(t *testing.T, base string) {
				_ = os.Remove(filepath.Join(base, "etc/passwd"))
				if err := os.Symlink("/dev/zero", filepath.Join(base, "etc/passwd")); err != nil {
					t.Fatal(err)
				}
			},
			wantErr: "/etc/passwd of the image is not a regular file",
		},
		"huge passwd": {
			change: func(t *testing.T, base string) {
				big := strings.Repeat("x", 2<<20) + "\n" + imagetest.Passwd
				if err := os.WriteFile(filepath.Join(base, "etc/passwd"), []byte(big), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			wantErr: "/etc/passwd of the image is larger than 1 MiB",
		},
		"fifo mount point": {
			// A file mount over a FIFO of the image binds over it
			// without opening it.
			change: func(t *testing.T, base string) {
				_ = os.Remove(filepath.Join(base, "etc/hosts"))
				if err := unix.Mkfifo(filepath.Join(base, "etc/hosts"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			hosts: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			layers := imagetest.Layers(t, t.TempDir())
			tc.change(t, layers[0])
			cfg := Config{Rootfs: &Rootfs{Layers: layers}, User: &User{}, Command: []string{"tool", "cat:/etc/hosts"}}
			if tc.hosts {
				hosts := filepath.Join(t.TempDir(), "hosts")
				if err := os.WriteFile(hosts, []byte("10.0.0.2 fifo"), 0o644); err != nil {
					t.Fatal(err)
				}
				cfg.Mounts = []Mount{{Source: hosts, Target: "/etc/hosts", ReadOnly: true}}
			}
			if tc.wantErr == "" {
				if diff := cmp.Diff([]string{"10.0.0.2 fifo"}, runImage(t, cfg)); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
				return
			}
			exe, _ := os.Executable()
			cfg.Isolate, cfg.Scratch = true, filepath.Join(t.TempDir(), "scratch")
			_ = os.Mkdir(cfg.Scratch, 0o700)
			start := time.Now()
			_, err := startWithin(t, 20*time.Second, StartOptions{Executable: exe, Config: cfg, Namespaces: true})
			var sf *StartFailure
			if !errors.As(err, &sf) || sf.Reason != ReasonCreateContainerError || !strings.Contains(sf.Message, tc.wantErr) {
				t.Errorf("Start = %v, want %s saying %q", err, ReasonCreateContainerError, tc.wantErr)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("Start took %v", d)
			}
			if left := sandboxes(); len(left) > 0 {
				t.Errorf("sandboxes left running: %v", left)
			}
		})
	}
}

// startWithin starts a sandbox (with ctx, if given) and fails the test
// when Start has not returned within limit; what it started is then
// killed.
func startWithin(t *testing.T, limit time.Duration, o StartOptions, ctx ...context.Context) (*Sandbox, error) {
	t.Helper()
	type result struct {
		s   *Sandbox
		err error
	}
	ch := make(chan result, 1)
	c := context.Background()
	if len(ctx) > 0 {
		c = ctx[0]
	}
	go func() {
		s, err := Start(c, o)
		ch <- result{s, err}
	}()
	select {
	case r := <-ch:
		return r.s, r.err
	case <-time.After(limit):
		for _, pid := range sandboxes() {
			KillSession(pid, StartTime(pid))
		}
		t.Fatalf("Start did not return within %v", limit)
		return nil, nil
	}
}

// sandboxes lists the live sandbox processes this test process started.
func sandboxes() []int {
	var out []int
	self := os.Getpid()
	for _, p := range processes() {
		if p.ppid != self {
			continue
		}
		b, err := os.ReadFile("/proc/" + itoa(p.pid) + "/cmdline")
		if err != nil || !strings.HasPrefix(string(b), ArgvName+"\x00") {
			continue
		}
		if st, _ := os.ReadFile("/proc/" + itoa(p.pid) + "/stat"); !strings.Contains(string(st), ") Z") {
			out = append(out, p.pid)
		}
	}
	return out
}

// TestImageVolume mounts another image as a volume, whole and by subPath:
// its layers are overlaid (the top layer's whiteout hides the file below),
// read-only, and nothing the container does reaches the layers.
func TestImageVolume(t *testing.T) {
	requireNamespaces(t)
	vol := imagetest.Layers(t, t.TempDir())
	for _, hostMode := range []bool{false, true} {
		cfg := Config{
			Mounts: []Mount{
				{Image: true, Layers: vol, Target: "/vol"},
				{Image: true, Layers: vol, SubPath: "etc", Target: "/cfg"},
			},
			Command: []string{imagetest.Tool(t),
				"cat:/vol/etc/added", "absent:/vol/etc/gone", "cat:/cfg/added",
				"write:/vol/etc/new=1", "write:/cfg/new=1",
			},
		}
		if !hostMode {
			cfg.Rootfs = &Rootfs{Layers: imagetest.Layers(t, t.TempDir())}
			cfg.Command[0] = "tool"
		}
		got := runImage(t, cfg)
		if len(got) != 5 || got[0] != "added" || got[1] != "absent /vol/etc/gone" || got[2] != "added" ||
			!strings.Contains(got[3], "read-only file system") || !strings.Contains(got[4], "read-only file system") {
			t.Errorf("host mode %v: %q, want the volume's files, read-only", hostMode, got)
		}
		for _, l := range vol {
			if _, err := os.Stat(filepath.Join(l, "etc/new")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a write reached layer %s: %v", l, err)
			}
		}
	}
}
