package logfile

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	testingclock "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)

// writeLog writes stdout lines one second apart, then a partial line on stderr.
func writeLog(t *testing.T, path string, maxSize int64, lines ...string) {
	t.Helper()
	clk := testingclock.NewFakePassiveClock(t0)
	w, err := NewWriter(path, maxSize, clk)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		if _, err := w.Stream("stdout").Write([]byte(l + "\n")); err != nil {
			t.Fatal(err)
		}
		clk.SetTime(clk.Now().Add(time.Second))
	}
	if _, err := w.Stream("stderr").Write([]byte("no newline")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	writeLog(t, path, 0, "one", "two", "three")
	cases := map[string]struct {
		opts ReadOptions
		want string
	}{
		"all":           {opts: ReadOptions{TailLines: -1}, want: "one\ntwo\nthree\nno newline"},
		"tail 2":        {opts: ReadOptions{TailLines: 2}, want: "three\nno newline"},
		"tail 0":        {opts: ReadOptions{TailLines: 0}, want: ""},
		"limit bytes":   {opts: ReadOptions{TailLines: -1, LimitBytes: 6}, want: "one\ntw"},
		"since":         {opts: ReadOptions{TailLines: -1, SinceTime: t0.Add(time.Second)}, want: "two\nthree\nno newline"},
		"timestamps":    {opts: ReadOptions{TailLines: 1, Timestamps: true}, want: "2026-01-01T10:00:03Z no newline"},
		"ts with lines": {opts: ReadOptions{TailLines: 2, Timestamps: true}, want: "2026-01-01T10:00:02Z three\n2026-01-01T10:00:03Z no newline"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			if err := Read(context.Background(), path, tc.opts, &out); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, out.String()); diff != "" {
				t.Errorf("log (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadMissingFileIsEmpty(t *testing.T) {
	var out bytes.Buffer
	if err := Read(context.Background(), filepath.Join(t.TempDir(), "none.log"), ReadOptions{TailLines: -1}, &out); err != nil || out.Len() != 0 {
		t.Errorf("Read() = %q, %v; want empty, nil", out.String(), err)
	}
}

func TestRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	var lines []string
	for i := range 50 {
		lines = append(lines, strings.Repeat(string(rune('a'+i%26)), 20))
	}
	// Each record is about 50 bytes: 300 bytes hold 6 lines.
	writeLog(t, path, 300, lines...)
	for _, p := range []string{path, path + ".1"} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatalf("expected %s: %v", p, err)
		}
		if st.Size() > 300 {
			t.Errorf("%s is %d bytes, over the 300 byte limit", p, st.Size())
		}
	}
	if _, err := os.Stat(path + ".2"); !os.IsNotExist(err) {
		t.Errorf("only one rotated file must be kept, found %s.2", path)
	}
	var out bytes.Buffer
	if err := Read(context.Background(), path, ReadOptions{TailLines: 3}, &out); err != nil {
		t.Fatal(err)
	}
	want := lines[48] + "\n" + lines[49] + "\nno newline"
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("tail after rotation (-want +got):\n%s", diff)
	}
}

func TestFollow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	clk := testingclock.NewFakePassiveClock(t0)
	w, err := NewWriter(path, 0, clk)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Stream("stdout").Write([]byte("before\n")); err != nil {
		t.Fatal(err)
	}
	var running atomic.Bool
	running.Store(true)
	// out is written by the reader only; it is read after the reader returned.
	out := &bytes.Buffer{}
	done := make(chan error)
	go func() {
		done <- Read(context.Background(), path, ReadOptions{TailLines: -1, Follow: true, Running: running.Load, PollInterval: time.Millisecond}, out)
	}()
	if _, err := w.Stream("stdout").Write([]byte("after\n")); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	running.Store(false)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff("before\nafter\n", out.String()); diff != "" {
		t.Errorf("followed log (-want +got):\n%s", diff)
	}
}

// TestWriterInFollowsTheDirectory: a Writer opened by directory descriptor
// keeps writing and rotating in that directory after its path changed, as a
// sandbox's does once it entered the container's view.
func TestWriterInFollowsTheDirectory(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "before")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	w, err := NewWriterIn(d, "0.log", 300, testingclock.NewFakePassiveClock(t0))
	if err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(base, "after")
	if err := os.Rename(dir, moved); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := w.Stream("stdout").Write([]byte(strings.Repeat(string(rune('a'+i)), 20) + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Read(context.Background(), filepath.Join(moved, "0.log"), ReadOptions{TailLines: 1}, &out); err != nil {
		t.Fatal(err)
	}
	if want := strings.Repeat("t", 20) + "\n"; out.String() != want {
		t.Errorf("last line %q, want %q", out.String(), want)
	}
	if _, err := os.Stat(filepath.Join(moved, "0.log.1")); err != nil {
		t.Errorf("rotated file: %v", err)
	}
}
