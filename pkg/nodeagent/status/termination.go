package status

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	corev1 "k8s.io/api/core/v1"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/logfile"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// The kubelet's limits on termination messages.
const (
	// maxTerminationMessageFile is how much of the end of a container's
	// termination message file is read.
	maxTerminationMessageFile = 4 * 1024
	// maxTerminationMessageLogBytes and maxTerminationMessageLogLines
	// bound the end of the log that FallbackToLogsOnError takes.
	maxTerminationMessageLogBytes = 2 * 1024
	maxTerminationMessageLogLines = 80
	// maxPodTerminationMessages is shared by all the containers of a pod:
	// each terminated state's message is cut to this divided by their
	// number.
	maxPodTerminationMessages = 12 * 1024
)

// WithTerminationMessage adds an attempt's termination message to its
// result, as the kubelet does when it sees a container exit: the end of
// the message file (file; "" when none was mounted), or, with
// FallbackToLogsOnError, when that is empty and the container failed, the
// end of its log (readLog). A message of the runtime's own comes first.
func WithTerminationMessage(res runtime.Result, c *corev1.Container, file string, readLog func() (string, error)) runtime.Result {
	fallback := c.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError && res.ExitCode != 0 && res.Reason != "ContainerCannotRun"
	msg, checkLogs := "", fallback
	if file != "" {
		data, err := readTail(file, maxTerminationMessageFile)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			msg, checkLogs = fmt.Sprintf("Error on reading termination log %s: %v", file, err), false
		default:
			msg, checkLogs = string(data), fallback && len(data) == 0
		}
	}
	if checkLogs {
		var err error
		if msg, err = readLog(); err != nil {
			msg = fmt.Sprintf("Error on reading termination message from logs: %v", err)
		}
	}
	if msg != "" {
		if res.Message != "" {
			res.Message += ": "
		}
		res.Message += msg
	}
	return res
}

// readTail returns at most the last max bytes of the file at p.
func readTail(p string, max int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > max {
		if _, err := f.Seek(-max, io.SeekEnd); err != nil {
			return nil, err
		}
	}
	return io.ReadAll(io.LimitReader(f, max))
}

// LogTail returns the end of a container's log as the kubelet's fallback
// takes it: the last 80 lines, of which the last 2048 bytes.
func LogTail(ctx context.Context, path string) (string, error) {
	var w tailWriter
	w.max = maxTerminationMessageLogBytes
	if err := logfile.Read(ctx, path, logfile.ReadOptions{TailLines: maxTerminationMessageLogLines}, &w); err != nil {
		return "", err
	}
	return string(w.buf), nil
}

// tailWriter keeps the last max bytes written to it.
type tailWriter struct {
	// max is how many bytes are kept.
	max int
	// buf holds them.
	buf []byte
}

// Write implements io.Writer.
func (w *tailWriter) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= w.max {
		w.buf = append(w.buf[:0], p[len(p)-w.max:]...)
		return n, nil
	}
	if over := len(w.buf) + len(p) - w.max; over > 0 {
		w.buf = append(w.buf[:0], w.buf[over:]...)
	}
	w.buf = append(w.buf, p...)
	return n, nil
}

// limitTerminationMessages cuts every terminated state's message of st to
// the pod's share per container, as the kubelet's status manager does.
func limitTerminationMessages(pod *corev1.Pod, st *corev1.PodStatus) {
	limit := maxPodTerminationMessages
	if n := len(pod.Spec.InitContainers) + len(pod.Spec.Containers) + len(pod.Spec.EphemeralContainers); n > 0 {
		limit /= n
	}
	for _, list := range [][]corev1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses, st.EphemeralContainerStatuses} {
		for i := range list {
			for _, t := range []*corev1.ContainerStateTerminated{list[i].State.Terminated, list[i].LastTerminationState.Terminated} {
				if t != nil && len(t.Message) > limit {
					t.Message = t.Message[:limit]
				}
			}
		}
	}
}
