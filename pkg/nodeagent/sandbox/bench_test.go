package sandbox

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkStart measures starting a sandbox running `true` until it has
// exited: the cost a container attempt pays for its sandbox. The sandbox is
// this test binary, or the program named by JOBKEEPER_SANDBOX_EXECUTABLE
// (for example a built jobkeeper, whose larger initialisation it then
// includes).
func BenchmarkStart(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	if e := os.Getenv("JOBKEEPER_SANDBOX_EXECUTABLE"); e != "" {
		exe = e
	}
	for _, isolate := range []bool{false, true} {
		b.Run(map[bool]string{false: "host", true: "isolated"}[isolate], func(b *testing.B) {
			if isolate {
				if err := Probe(exe, filepath.Join(b.TempDir(), "probe")); err != nil {
					b.Skipf("no private mount namespaces: %v", err)
				}
			}
			for i := 0; i < b.N; i++ {
				cfg := Config{Isolate: isolate, Command: []string{"true"}, Env: []string{"PATH=/usr/bin:/bin"}}
				if isolate {
					cfg.Scratch = filepath.Join(b.TempDir(), "scratch")
					if err := os.Mkdir(cfg.Scratch, 0o700); err != nil {
						b.Fatal(err)
					}
				}
				s, err := Start(StartOptions{Executable: exe, Config: cfg, Namespaces: isolate})
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
