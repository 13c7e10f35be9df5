package status

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	testingclock "k8s.io/utils/clock/testing"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/logfile"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

func TestWithTerminationMessage(t *testing.T) {
	dir := t.TempDir()
	file := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o666); err != nil {
			t.Fatal(err)
		}
		return p
	}
	written := file("written", "bye")
	empty := file("empty", "")
	long := file("long", strings.Repeat("a", 100)+strings.Repeat("b", maxTerminationMessageFile))
	missing := filepath.Join(dir, "missing")
	fromLog := func() (string, error) { return "log tail\n", nil }
	logFails := func() (string, error) { return "", errors.New("disk gone") }
	file0 := corev1.Container{TerminationMessagePolicy: corev1.TerminationMessageReadFile}
	fallback := corev1.Container{TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError}
	for _, tc := range []struct {
		name string
		c    corev1.Container
		res  runtime.Result
		file string
		log  func() (string, error)
		want string
	}{
		{name: "file read", c: file0, res: runtime.Result{ExitCode: 1}, file: written, want: "bye"},
		{name: "file read on success too", c: file0, res: runtime.Result{ExitCode: 0}, file: written, want: "bye"},
		{name: "the end of a long file", c: file0, res: runtime.Result{ExitCode: 1}, file: long, want: strings.Repeat("b", maxTerminationMessageFile)},
		{name: "empty file, File policy", c: file0, res: runtime.Result{ExitCode: 1}, file: empty, log: fromLog, want: ""},
		{name: "empty file, fallback, failed", c: fallback, res: runtime.Result{ExitCode: 2}, file: empty, log: fromLog, want: "log tail\n"},
		{name: "empty file, fallback, succeeded", c: fallback, res: runtime.Result{ExitCode: 0}, file: empty, log: fromLog, want: ""},
		{name: "written file wins over the log", c: fallback, res: runtime.Result{ExitCode: 2}, file: written, log: fromLog, want: "bye"},
		{name: "no file mounted, fallback", c: fallback, res: runtime.Result{ExitCode: 2}, log: fromLog, want: "log tail\n"},
		{name: "missing file, fallback", c: fallback, res: runtime.Result{ExitCode: 2}, file: missing, log: fromLog, want: "log tail\n"},
		{name: "log unreadable", c: fallback, res: runtime.Result{ExitCode: 2}, log: logFails, want: "Error on reading termination message from logs: disk gone"},
		{name: "after the runtime's message", c: file0, res: runtime.Result{ExitCode: 137, Message: "killed"}, file: written, want: "killed: bye"},
		{name: "a directory is an error", c: fallback, res: runtime.Result{ExitCode: 1}, file: dir, log: fromLog, want: "Error on reading termination log " + dir},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := tc.log
			if log == nil {
				log = func() (string, error) { t.Fatal("the log was read"); return "", nil }
			}
			got := WithTerminationMessage(tc.res, &tc.c, tc.file, log).Message
			if !strings.HasPrefix(got, tc.want) || (got != tc.want && !strings.HasPrefix(tc.want, "Error")) {
				t.Errorf("message = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestLogTail(t *testing.T) {
	p := filepath.Join(t.TempDir(), "0.log")
	w, err := logfile.NewWriter(p, 10<<20, testingclock.NewFakeClock(t0))
	if err != nil {
		t.Fatal(err)
	}
	out := w.Stream("stdout")
	for i := range 100 {
		fmt.Fprintf(out, "line %d\n", i)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := LogTail(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := 20; i < 100; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if got != want.String() {
		t.Errorf("last 80 lines: got %q, want %q", got, want.String())
	}

	// Long lines: the last 2048 bytes of them.
	p = filepath.Join(t.TempDir(), "0.log")
	w, err = logfile.NewWriter(p, 10<<20, testingclock.NewFakeClock(t0))
	if err != nil {
		t.Fatal(err)
	}
	out = w.Stream("stderr")
	for i := range 10 {
		fmt.Fprintf(out, "%d%s\n", i, strings.Repeat("x", 999))
	}
	_ = w.Close()
	got, err = LogTail(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != maxTerminationMessageLogBytes || !strings.HasSuffix(got, "9"+strings.Repeat("x", 999)+"\n") {
		t.Errorf("last 2048 bytes: got %d bytes ending %q", len(got), got[max(0, len(got)-20):])
	}
}

func TestTailWriter(t *testing.T) {
	w := tailWriter{max: 5}
	for _, s := range []string{"ab", "cd", "efg", "0123456789", "x"} {
		_, _ = w.Write([]byte(s))
	}
	if string(w.buf) != "6789x" {
		t.Errorf("kept %q, want %q", w.buf, "6789x")
	}
}

func TestLimitTerminationMessages(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{InitContainers: []corev1.Container{{Name: "i"}}, Containers: []corev1.Container{{Name: "a"}, {Name: "b"}}}}
	long := strings.Repeat("m", 5000)
	st := &corev1.PodStatus{
		InitContainerStatuses: []corev1.ContainerStatus{{Name: "i", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: long}}}},
		ContainerStatuses: []corev1.ContainerStatus{
			{Name: "a", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: "short"}}},
			{Name: "b", LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: long}}},
		},
	}
	limitTerminationMessages(pod, st)
	share := maxPodTerminationMessages / 3
	if got := len(st.InitContainerStatuses[0].State.Terminated.Message); got != share {
		t.Errorf("init container's message: %d bytes, want %d", got, share)
	}
	if got := st.ContainerStatuses[0].State.Terminated.Message; got != "short" {
		t.Errorf("short message changed: %q", got)
	}
	if got := len(st.ContainerStatuses[1].LastTerminationState.Terminated.Message); got != share {
		t.Errorf("last state's message: %d bytes, want %d", got, share)
	}
}
