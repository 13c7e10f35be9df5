package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// Escape attempts against the view's volume mounts: another container of
// the pod, sharing a volume, swaps a directory on the way for a symbolic
// link to the host while sandboxes set up. Played here by a goroutine of
// the test that exchanges the two names as fast as it can (renameat2
// RENAME_EXCHANGE, as a container would), while many sandboxes start.

// escapeAttempts is how many sandboxes race the swapper in each test.
// Mounting by path, the subPath race is won within a few dozen on this
// machine (see TestSubPathSwapWonByPath); by handle it must never be.
const escapeAttempts = 96

// swapper exchanges a and b until stop is closed.
func swapper(t *testing.T, a, b string) (stop func()) {
	t.Helper()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			_ = unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}

// raceVolume prepares a volume directory holding d, a directory, and
// d.link, a symbolic link to a host directory holding a secret file, and
// returns the volume and the host directory.
func raceVolume(t *testing.T) (vol, host string) {
	t.Helper()
	vol, host = t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(host, "secret"), []byte("host secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(vol, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vol, "d", "inside"), []byte("inside\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(host, filepath.Join(vol, "d.link")); err != nil {
		t.Fatal(err)
	}
	return vol, host
}

// runRace starts escapeAttempts sandboxes of cfg (a few at a time) and
// returns the outputs of those whose output has leak in it.
func runRace(t *testing.T, cfg Config, leak string) []string {
	t.Helper()
	var mu sync.Mutex
	var leaks []string
	failed := 0
	sem := make(chan struct{}, 6)
	var wg sync.WaitGroup
	for i := 0; i < escapeAttempts; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			// A start may fail: a mount point swapped between its
			// resolution and its check is refused.
			s, output, err := startSandbox(t, true, StartOptions{}, cfg)
			if err != nil {
				mu.Lock()
				failed++
				if failed == 1 {
					t.Logf("a refused start: %v", err)
				}
				mu.Unlock()
				return
			}
			<-s.Done()
			if out := output(); strings.Contains(out, leak) {
				mu.Lock()
				leaks = append(leaks, out)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Logf("%d of %d starts refused", failed, escapeAttempts)
	return leaks
}

// TestSubPathSwapStaysInTheVolume: a subPath whose directory is swapped
// for a link to a host directory while the container starts shows the
// volume's directory, or a directory created inside the volume where the
// link leads, never the host's directory.
func TestSubPathSwapStaysInTheVolume(t *testing.T) {
	requireNamespaces(t)
	vol, _ := raceVolume(t)
	stop := swapper(t, filepath.Join(vol, "d"), filepath.Join(vol, "d.link"))
	defer stop()
	leaks := runRace(t, Config{
		Capabilities: DefaultCapabilities,
		Mounts:       []Mount{{Source: vol, SubPath: "d", Target: "/mnt"}},
		Command:      []string{"sh", "-c", "cat /mnt/secret 2>/dev/null; true"},
	}, "host secret")
	if len(leaks) > 0 {
		t.Errorf("%d of %d containers read the host's file through the subPath", len(leaks), escapeAttempts)
	}
}

// TestSubPathSwapWonByPath checks the race the test above runs: mounting
// the subPath resolved first, by its path (as the agent did before it
// passed SubPath), the same loop reads the host's file (41 and 52 of 96
// sandboxes here, as root and as a user). Should the swapper stop winning
// it, the test above would prove nothing.
func TestSubPathSwapWonByPath(t *testing.T) {
	requireNamespaces(t)
	if testing.Short() {
		t.Skip("a check of the race loop's strength (96 racing sandboxes)")
	}
	vol, _ := raceVolume(t)
	stop := swapper(t, filepath.Join(vol, "d"), filepath.Join(vol, "d.link"))
	defer stop()
	leaks := runRace(t, Config{
		Capabilities: DefaultCapabilities,
		Mounts:       []Mount{{Source: filepath.Join(vol, "d"), Target: "/mnt"}},
		Command:      []string{"sh", "-c", "cat /mnt/secret 2>/dev/null; true"},
	}, "host secret")
	t.Logf("mounting by path: %d of %d containers read the host's file", len(leaks), escapeAttempts)
	if len(leaks) == 0 {
		t.Errorf("the swapper never won against mounting by path in %d starts: the escape tests' race is too weak to show anything", escapeAttempts)
	}
}

// TestMountPointSwapStaysInTheView: a volume mounted below another
// volume's mount point, whose directory on the way is swapped for a link
// to a host directory while the container starts, is mounted inside the
// view, and nothing is created in the host's directory.
func TestMountPointSwapStaysInTheView(t *testing.T) {
	requireNamespaces(t)
	shared, host := raceVolume(t)
	inner := t.TempDir()
	if err := os.WriteFile(filepath.Join(inner, "marker"), []byte("inner\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stop := swapper(t, filepath.Join(shared, "d"), filepath.Join(shared, "d.link"))
	defer stop()
	runRace(t, Config{
		Capabilities: DefaultCapabilities,
		Mounts: []Mount{
			{Source: shared, Target: "/shared"},
			{Source: inner, Target: "/shared/d/sub/inner"},
		},
		Command: []string{"true"},
	}, "never printed")
	stop()
	entries, err := os.ReadDir(host)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if fmt.Sprint(names) != "[secret]" {
		t.Errorf("the host's directory behind the link holds %v after the race, want only its secret: a mount point was created through the link", names)
	}
}
