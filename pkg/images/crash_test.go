package images

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"jobkeeper.dev/jobkeeper/internal/testimages"
)

// Environment of the helper process: the test binary, re-run with
// helperDir set, opens the store in helperDir, pulls helperRef and exits
// (unless it is killed first). With helperKillBeforeRecord set it kills
// itself (SIGKILL) once the layers are stored, before the index is
// written.
const (
	helperDir              = "JOBKEEPER_IMAGES_HELPER_DIR"
	helperRef              = "JOBKEEPER_IMAGES_HELPER_REF"
	helperKillBeforeRecord = "JOBKEEPER_IMAGES_HELPER_KILL_BEFORE_RECORD"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(helperDir); dir != "" {
		os.Exit(helperPull(dir, os.Getenv(helperRef), os.Getenv(helperKillBeforeRecord) != ""))
	}
	os.Exit(m.Run())
}

// helperPull is the helper process: it pulls ref into the store in dir.
func helperPull(dir, ref string, killBeforeRecord bool) int {
	if killBeforeRecord {
		testHookBeforeRecord = func() {
			unix.Kill(os.Getpid(), unix.SIGKILL)
			select {}
		}
	}
	s, err := Open(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer s.Close()
	if _, err := s.Pull(context.Background(), ref, PullOptions{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// startPull starts the helper process pulling ref into the store in dir.
func startPull(t *testing.T, dir, ref string, killBeforeRecord bool) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperDir+"="+dir, helperRef+"="+ref)
	if killBeforeRecord {
		cmd.Env = append(cmd.Env, helperKillBeforeRecord+"=1")
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd, &stderr
}

// waitKilled waits for cmd and fails unless SIGKILL ended it.
func waitKilled(t *testing.T, cmd *exec.Cmd, stderr *bytes.Buffer) {
	t.Helper()
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the pulling process ended with %v, not SIGKILL; stderr:\n%s", err, stderr)
	}
}

// stallBlob wraps a registry handler: while stalling is set, a GET of the
// blob digest sends the first sendBytes bytes, closes sent and then sends
// nothing more until the client goes away.
func stallBlob(digest string, sendBytes int, stalling *atomic.Bool, sent chan struct{}) func(http.Handler) http.Handler {
	var once sync.Once
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if req.Method != http.MethodGet || !strings.HasSuffix(req.URL.Path, "/blobs/"+digest) || !stalling.Load() {
				h.ServeHTTP(w, req)
				return
			}
			h.ServeHTTP(&stallWriter{ResponseWriter: w, left: sendBytes, stalled: func() {
				once.Do(func() { close(sent) })
				<-req.Context().Done()
			}}, req)
		})
	}
}

// stallWriter passes left bytes through, then calls stalled and fails.
type stallWriter struct {
	http.ResponseWriter
	left    int
	stalled func()
}

func (w *stallWriter) Write(p []byte) (int, error) {
	if len(p) <= w.left {
		w.left -= len(p)
		return w.ResponseWriter.Write(p)
	}
	n, _ := w.ResponseWriter.Write(p[:w.left])
	w.left = 0
	w.ResponseWriter.(http.Flusher).Flush()
	w.stalled()
	return n, errors.New("stalled")
}

// TestKillDuringPull kills (SIGKILL) a process half way through a layer:
// the store it leaves opens consistent, without the image, and the pull
// then succeeds.
func TestKillDuringPull(t *testing.T) {
	bigLayer := randomLayer(t, 10, 8<<20)
	big, err := testimages.Build(testimages.Config{}, randomLayer(t, 11, 4<<10), bigLayer)
	if err != nil {
		t.Fatal(err)
	}
	earlier, err := testimages.Build(testimages.Config{}, randomLayer(t, 12, 4<<10))
	if err != nil {
		t.Fatal(err)
	}
	var stalling atomic.Bool
	sent := make(chan struct{})
	host := testimages.Serve(t, map[string]v1.Image{"test/big:1": big, "test/earlier:1": earlier},
		testimages.WithHandler(stallBlob(digestOf(t, bigLayer), 1<<20, &stalling, sent)))
	dir := t.TempDir()
	s0, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s0.Pull(context.Background(), host+"/test/earlier:1", PullOptions{}); err != nil {
		t.Fatal(err)
	}
	s0.Close()

	stalling.Store(true)
	ref := host + "/test/big:1"
	cmd, stderr := startPull(t, dir, ref, false)
	select {
	case <-sent:
	case <-time.After(30 * time.Second):
		t.Fatalf("the pulling process never fetched the big layer; stderr:\n%s", stderr)
	}
	// Kill it once part of the layer is on disk.
	if !eventually(10*time.Second, func() bool { return partialFileIn(filepath.Join(dir, tmpDir)) }) {
		t.Fatal("no partly unpacked layer under tmp/ after 10s")
	}
	cmd.Process.Signal(syscall.SIGKILL)
	waitKilled(t, cmd, stderr)

	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Lookup(ref); !errors.Is(err, ErrNotFound) {
		t.Errorf("Lookup(%s) after the kill = %v, want ErrNotFound", ref, err)
	}
	imgs, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(imgs) != 1 || !slices.Equal(imgs[0].Names, []string{host + "/test/earlier:1"}) {
		t.Errorf("List after the kill = %v, want only the earlier image", imgs)
	}
	assertOnlyOwnTemp(t, s)
	assertNoPartialLayers(t, s)

	stalling.Store(false)
	if _, err := s.Pull(context.Background(), ref, PullOptions{}); err != nil {
		t.Fatalf("pull after the kill: %v", err)
	}
	if _, err := s.Lookup(ref); err != nil {
		t.Errorf("Lookup after the pull: %v", err)
	}
}

// TestKillBeforeIndexWrite kills a process after it stored an image's
// layers and before it wrote the index: the next pull reuses the layers,
// and a layer no image names is deleted by CollectGarbage and Remove once
// old enough.
func TestKillBeforeIndexWrite(t *testing.T) {
	x1, x2, y1 := randomLayer(t, 20, 4<<10), randomLayer(t, 21, 4<<10), randomLayer(t, 22, 4<<10)
	x, err := testimages.Build(testimages.Config{}, x1, x2)
	if err != nil {
		t.Fatal(err)
	}
	y, err := testimages.Build(testimages.Config{}, y1)
	if err != nil {
		t.Fatal(err)
	}
	reg := testimages.NewRegistry()
	t.Cleanup(reg.Close)
	xRef, err := reg.Push("test/x:1", x)
	if err != nil {
		t.Fatal(err)
	}
	yRef, err := reg.Push("test/y:1", y)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	killed := func(ref string) {
		t.Helper()
		cmd, stderr := startPull(t, dir, ref, true)
		waitKilled(t, cmd, stderr)
	}

	killed(xRef)
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Lookup(xRef); !errors.Is(err, ErrNotFound) {
		t.Errorf("Lookup(%s) after the kill = %v, want ErrNotFound", xRef, err)
	}
	if imgs, _ := s.List(); len(imgs) != 0 {
		t.Errorf("List after the kill = %v, want none", imgs)
	}
	assertOnlyOwnTemp(t, s)
	assertNoPartialLayers(t, s)
	if got := layerDirs(t, s); len(got) != 2 {
		t.Fatalf("l/ after the kill = %v, want x's two layers", got)
	}
	// Just stored, they might be another process's pull in progress.
	if _, err := s.CollectGarbage(context.Background(), GCPolicy{HighPercent: 100}); err != nil {
		t.Fatal(err)
	}
	if got := layerDirs(t, s); len(got) != 2 {
		t.Fatalf("l/ after CollectGarbage = %v, want x's two layers kept (stored a moment ago)", got)
	}

	reg.ResetRequests()
	img, err := s.Pull(context.Background(), xRef, PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reg.Requests() {
		if strings.HasSuffix(r, digestOf(t, x1)) || strings.HasSuffix(r, digestOf(t, x2)) {
			t.Errorf("the pull after the kill fetched a layer it had: %s", r)
		}
	}
	if diff := cmp.Diff(layerDirsOf(img), layerDirs(t, s)); diff != "" {
		t.Errorf("l/ after the pull (-want +got):\n%s", diff)
	}

	s.now = func() time.Time { return time.Now().Add(orphanMinAge + time.Minute) }
	killed(yRef)
	if got := layerDirs(t, s); len(got) != 3 {
		t.Fatalf("l/ after the second kill = %v, want x's layers and y's", got)
	}
	if _, err := s.CollectGarbage(context.Background(), GCPolicy{HighPercent: 100}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(layerDirsOf(img), layerDirs(t, s)); diff != "" {
		t.Errorf("CollectGarbage kept a layer no image names, or removed x's (-want +got):\n%s", diff)
	}

	killed(yRef)
	if err := s.Remove(xRef); err != nil {
		t.Fatal(err)
	}
	if got := layerDirs(t, s); len(got) != 0 {
		t.Errorf("l/ after removing the only image = %v, want empty", got)
	}
	if _, err := s.Pull(context.Background(), yRef, PullOptions{}); err != nil {
		t.Fatalf("pull after the kills: %v", err)
	}
}

// assertOnlyOwnTemp fails unless tmp/ holds only the work directory of s
// and its lock.
func assertOnlyOwnTemp(t *testing.T, s *Store) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(s.dir, tmpDir))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	want := []string{filepath.Base(s.work), filepath.Base(s.work) + lockSuffix}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tmp/ after Open (-want +got):\n%s", diff)
	}
}

// partialFileIn says whether a non-empty regular file lies under dir.
func partialFileIn(dir string) bool {
	found := false
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && strings.Contains(p, "/fs/") {
			if fi, err := d.Info(); err == nil && fi.Size() > 0 {
				found = true
				return filepath.SkipAll
			}
		}
		return nil
	})
	return found
}

// eventually polls cond every 10ms until it holds or timeout passes.
func eventually(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}
