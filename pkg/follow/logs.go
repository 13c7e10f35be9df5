package follow

import (
	"bufio"
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// logStreamer streams the logs of a Job's containers: one goroutine per
// container that has started, opened once and resumed after a cut.
type logStreamer struct {
	// client opens the streams.
	client kubernetes.Interface
	// opts are Follow's options (namespace, clock, limits).
	opts Options
	// sink receives the lines.
	sink Sink
	// ctx ends every stream; cancel ends it.
	ctx    context.Context
	cancel context.CancelFunc
	// slots holds one element per open stream (Options.MaxLogStreams).
	slots chan struct{}
	// wg counts the stream goroutines.
	wg sync.WaitGroup
	// mu guards pods and started.
	mu sync.Mutex
	// pods is the latest version of each pod of the Job, by UID.
	pods map[types.UID]*corev1.Pod
	// started records the containers whose stream has been started: a
	// container is streamed by one goroutine, once.
	started map[streamKey]bool
}

// streamKey is one container of one pod.
type streamKey struct {
	// pod is the pod's UID.
	pod types.UID
	// container is the container's name.
	container string
}

func newLogStreamer(ctx context.Context, client kubernetes.Interface, opts Options, sink Sink) *logStreamer {
	s := &logStreamer{
		client: client, opts: opts, sink: sink,
		slots:   make(chan struct{}, opts.MaxLogStreams),
		pods:    map[types.UID]*corev1.Pod{},
		started: map[streamKey]bool{},
	}
	s.ctx, s.cancel = context.WithCancel(ctx)
	return s
}

// observe takes the Job's current pods and starts a stream for every
// container that has started and is not streamed yet. A pod missing from
// pods is gone: its streams end at their next cut.
func (s *logStreamer) observe(pods []*corev1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.pods)
	for _, p := range pods {
		s.pods[p.UID] = p
		for _, c := range p.Spec.Containers {
			key := streamKey{pod: p.UID, container: c.Name}
			if s.started[key] || !containerStarted(p, c.Name) {
				continue
			}
			s.started[key] = true
			s.wg.Add(1)
			go s.stream(key, lineOf(p, c.Name))
		}
	}
}

// drain waits for the open streams to end (their containers have
// terminated), at most timeout, then ends the rest.
func (s *logStreamer) drain(timeout time.Duration) {
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-s.opts.Clock.After(timeout):
	case <-s.ctx.Done():
	}
	s.stop()
}

// stop ends every stream and waits for their goroutines.
func (s *logStreamer) stop() {
	s.cancel()
	s.wg.Wait()
}

// stream copies one container's log to the sink until the container is done
// (or its pod gone), reopening the stream after each cut from where it
// stopped.
//
// label is the Line every line of the container is copied into.
func (s *logStreamer) stream(key streamKey, label Line) {
	defer s.wg.Done()
	var at resumePoint
	for {
		select {
		case s.slots <- struct{}{}:
		case <-s.ctx.Done():
			return
		}
		err := s.streamOnce(label, &at)
		<-s.slots
		if s.ctx.Err() != nil || apierrors.IsNotFound(err) {
			return
		}
		if err == nil && s.containerDone(key) {
			return
		}
		select {
		case <-s.ctx.Done():
			return
		case <-s.opts.Clock.After(s.opts.LogRetry):
		}
	}
}

// streamOnce opens the log stream once, with timestamps (from at on, when
// resuming) and copies the lines not seen before. It returns nil at the end
// of the stream.
func (s *logStreamer) streamOnce(label Line, at *resumePoint) error {
	opts := &corev1.PodLogOptions{Container: label.Container, Follow: true, Timestamps: true}
	if !at.at.IsZero() {
		since := metav1.NewTime(at.at)
		opts.SinceTime = &since
	}
	rc, err := s.client.CoreV1().Pods(s.opts.Namespace).GetLogs(label.Pod, opts).Stream(s.ctx)
	if err != nil {
		return err
	}
	defer rc.Close()
	at.begin()
	r := bufio.NewReaderSize(rc, 64*1024)
	for {
		raw, err := r.ReadString('\n')
		// A line cut by an error is dropped: the next stream repeats it whole.
		if raw != "" && (err == nil || errors.Is(err, io.EOF)) {
			if text, ok := at.accept(strings.TrimSuffix(raw, "\n")); ok {
				line := label
				line.Text = text
				s.sink.Log(line)
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// containerDone reports whether a container will write no more log: its pod
// is gone or finished, or it terminated and its pod's restart policy will
// not start it again.
func (s *logStreamer) containerDone(key streamKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pods[key.pod]
	if p == nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return true
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name != key.container || cs.State.Terminated == nil {
			continue
		}
		switch p.Spec.RestartPolicy {
		case corev1.RestartPolicyNever:
			return true
		case corev1.RestartPolicyOnFailure:
			return cs.State.Terminated.ExitCode == 0
		}
	}
	return false
}

// containerStarted reports whether a container has run (so it has a log).
func containerStarted(p *corev1.Pod, name string) bool {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == name {
			return cs.State.Running != nil || cs.State.Terminated != nil || cs.LastTerminationState.Terminated != nil
		}
	}
	return false
}

// lineOf returns the Line a container's log lines are copied into, with
// its prefix: "[index N]" for a pod of an Indexed Job, "[pod/NAME]"
// otherwise, with "/CONTAINER" when the pod has several containers.
func lineOf(p *corev1.Pod, container string) Line {
	l := Line{Pod: p.Name, Container: container}
	label := "pod/" + p.Name
	if i, ok := podIndex(p); ok {
		l.Index = strconv.Itoa(i)
		label = "index " + l.Index
	}
	if len(p.Spec.Containers) > 1 {
		label += "/" + container
	}
	l.Prefix = "[" + label + "]"
	return l
}

// resumePoint remembers how far a container's log was copied: the
// timestamp of the last line copied and how many lines carried it, so that
// a stream reopened with sinceTime (whole seconds) repeats nothing.
type resumePoint struct {
	// at is the timestamp of the last line copied.
	at time.Time
	// n is the number of lines copied with timestamp at.
	n int
	// skip is the number of lines at `at` still to skip in this stream.
	skip int
}

// begin starts a new stream: its first n lines at `at` were copied before.
func (r *resumePoint) begin() { r.skip = r.n }

// accept takes one line "TIMESTAMP TEXT" of a stream and returns TEXT and
// true if it was not copied before. A line without a timestamp is returned
// whole.
func (r *resumePoint) accept(raw string) (string, bool) {
	ts, text, _ := strings.Cut(raw, " ")
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return raw, true
	}
	switch {
	case t.Before(r.at):
		return "", false
	case t.Equal(r.at):
		if r.skip > 0 {
			r.skip--
			return "", false
		}
		r.n++
		return text, true
	default:
		r.at, r.n, r.skip = t, 1, 0
		return text, true
	}
}
