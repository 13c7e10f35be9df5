package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/sandbox/imagetest"
)

// BenchmarkStart measures starting a sandbox running a program that exits
// at once, until the sandbox has exited: the cost a container attempt pays
// for its sandbox. host runs `true` on the host's filesystem, isolated
// runs it in the copy-on-write view of the host, image runs the test
// image's program from a cached three-layer image (image mode); the
// "+pid" modes do the same with a PID namespace of the container's own (the
// init stage started before the view); the "+durable" modes run a durable
// sandbox (Config.StateDir: it stores the log itself, listens for an agent,
// and writes its state and exit files); "+userns" gives the container a
// user namespace of its own with idmapped layers (as root). The
// sandbox is this test binary, or the program named by
// JOBKEEPER_SANDBOX_EXECUTABLE (for example a built jobkeeper, whose larger
// initialisation it then includes).
func BenchmarkStart(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	if e := os.Getenv("JOBKEEPER_SANDBOX_EXECUTABLE"); e != "" {
		exe = e
	}
	for _, mode := range []string{"host", "isolated", "image", "isolated+pid", "image+pid", "image+pid+seccomp", "host+durable", "isolated+pid+durable", "image+pid+userns"} {
		b.Run(mode, func(b *testing.B) {
			isolate := !strings.HasPrefix(mode, "host")
			pid := strings.Contains(mode, "+pid")
			durable := strings.HasSuffix(mode, "+durable")
			userns := strings.HasSuffix(mode, "+userns")
			if userns && os.Getuid() != 0 {
				b.Skip("a user namespace of the container's own needs root")
			}
			if pid {
				if err := ProbePID(context.Background(), exe, filepath.Join(b.TempDir(), "probe"), 0); err != nil {
					b.Skipf("no PID namespaces: %v", err)
				}
			}
			if isolate {
				if err := Probe(context.Background(), exe, filepath.Join(b.TempDir(), "probe"), 0); err != nil {
					b.Skipf("no private mount namespaces: %v", err)
				}
			}
			var rootfs *Rootfs
			command := []string{"true"}
			if strings.HasPrefix(mode, "image") {
				dir := b.TempDir()
				layers := imagetest.Layers(b, dir)
				extra := filepath.Join(dir, "extra")
				if err := os.MkdirAll(filepath.Join(extra, "etc"), 0o755); err != nil {
					b.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(extra, "etc/extra"), []byte("x"), 0o644); err != nil {
					b.Fatal(err)
				}
				rootfs = &Rootfs{Layers: append(layers, extra)}
				command = []string{"tool"}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				// The capabilities every container gets from the agent.
				cfg := Config{Isolate: isolate, Command: command, Env: []string{"PATH=/usr/bin:/bin"}, Rootfs: rootfs, Capabilities: DefaultCapabilities}
				if strings.HasSuffix(mode, "+seccomp") {
					cfg.Seccomp = &Seccomp{RuntimeDefault: true}
				}
				if rootfs != nil {
					cfg.User = &User{}
				}
				if pid {
					cfg.PIDNamespace = PIDContainer
				}
				if userns {
					m := testMapping
					cfg.UserNamespace = &m
				}
				if durable {
					cfg.StateDir = b.TempDir()
					cfg.LogPath = filepath.Join(cfg.StateDir, "0.log")
				}
				if isolate {
					cfg.Scratch = filepath.Join(b.TempDir(), "scratch")
					if err := os.Mkdir(cfg.Scratch, 0o700); err != nil {
						b.Fatal(err)
					}
				}
				s, err := Start(context.Background(), StartOptions{Executable: exe, Config: cfg, Namespaces: isolate})
				if err != nil {
					b.Fatal(err)
				}
				<-s.Done()
				if ex := s.Exit(); ex.Code != 0 {
					b.Fatalf("exit %+v", ex)
				}
			}
		})
	}
}

// BenchmarkExec measures a command exec'd into a running image container
// (the test image's program, which exits at once), until it has exited:
// what kubectl exec and an exec probe pay. "userns" runs the container
// with a user namespace of its own, whose exec'd commands go through an
// init stage (userns.go).
func BenchmarkExec(b *testing.B) {
	for _, mode := range []string{"plain", "userns"} {
		b.Run(mode, func(b *testing.B) {
			if os.Getuid() != 0 {
				b.Skip("as root: the comparison is root's")
			}
			cfg := Config{Rootfs: &Rootfs{Layers: imagetest.Layers(b, b.TempDir())}, PIDNamespace: PIDContainer, User: &User{},
				Capabilities: DefaultCapabilities, Command: []string{"tool", "sleep"}}
			if mode == "userns" {
				m := testMapping
				cfg.UserNamespace = &m
			}
			exe, err := os.Executable()
			if err != nil {
				b.Fatal(err)
			}
			cfg.Isolate, cfg.Env = true, []string{"PATH=/usr/bin:/bin"}
			cfg.Scratch = filepath.Join(b.TempDir(), "scratch")
			if err := os.Mkdir(cfg.Scratch, 0o700); err != nil {
				b.Fatal(err)
			}
			s, err := Start(context.Background(), StartOptions{Executable: exe, Config: cfg, Namespaces: true})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { s.Kill(); <-s.Done() }()
			devNull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = devNull.Close() }()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p, err := s.Exec(context.Background(), []string{"tool"}, false, devNull, devNull, devNull)
				if err != nil {
					b.Fatal(err)
				}
				if code, err := p.Wait(context.Background()); err != nil || code != 0 {
					b.Fatalf("exec: %d, %v", code, err)
				}
			}
		})
	}
}
