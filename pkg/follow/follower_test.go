package follow

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"jobkeeper.dev/jobkeeper/test/builder"
)

// testTimeout bounds every wait of these tests (a failure, not a pace).
const testTimeout = 30 * time.Second

// recorder is a Sink that hands States to the test over a channel and
// keeps the log lines.
type recorder struct {
	// states receives every State.
	states chan State
	// mu guards lines.
	mu    sync.Mutex
	lines []Line
}

func newRecorder() *recorder { return &recorder{states: make(chan State, 1000)} }

func (r *recorder) State(s State) { r.states <- s }

func (r *recorder) Log(l Line) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, l)
}

// waitState returns the first State that satisfies cond.
func (r *recorder) waitState(t *testing.T, what string, cond func(State) bool) State {
	t.Helper()
	deadline := time.After(testTimeout)
	for {
		select {
		case s := <-r.states:
			if cond(s) {
				return s
			}
		case <-deadline:
			t.Fatalf("no State with %s", what)
		}
	}
}

// newFakeClient returns a fake clientset holding objs, and a channel that
// receives the resource of every watch once it is open: changes made before
// all three of Follow's watches are open could be missed by the fake, which
// ignores resource versions.
func newFakeClient(objs ...runtime.Object) (*fake.Clientset, chan string) {
	c := fake.NewClientset(objs...)
	opened := make(chan string, 10)
	c.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		w, err := c.Tracker().Watch(a.GetResource(), a.GetNamespace())
		opened <- a.GetResource().Resource
		return true, w, err
	})
	return c, opened
}

func waitWatches(t *testing.T, opened chan string) {
	t.Helper()
	for range 3 {
		select {
		case <-opened:
		case <-time.After(testTimeout):
			t.Fatal("Follow did not open its three watches")
		}
	}
}

// result is what Follow returned.
type result struct {
	state State
	err   error
}

func startFollow(ctx context.Context, c *fake.Clientset, opts Options, sink Sink) chan result {
	opts.MinInterval = -1
	if opts.Clock == nil {
		opts.Clock = clocktesting.NewFakeClock(t0)
	}
	done := make(chan result, 1)
	go func() {
		s, err := Follow(ctx, c, opts, sink)
		done <- result{s, err}
	}()
	return done
}

func waitResult(t *testing.T, done chan result) result {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(testTimeout):
		t.Fatal("Follow did not return")
		return result{}
	}
}

func testJob() *batchv1.Job {
	j := builder.MakeJob("j", "ns").UID("job-uid").Indexed().Completions(2).Parallelism(2).Obj()
	j.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{batchv1.ControllerUidLabel: "job-uid"}}
	return j
}

func TestFollowUntilComplete(t *testing.T) {
	ctx := context.Background()
	job := testJob()
	pod := builder.MakePod("j-0-abc", "ns").UID("pod-0").OwnedByJob(job).Index("0").Phase(corev1.PodRunning).Obj()
	c, opened := newFakeClient(job, pod)
	rec := newRecorder()
	done := startFollow(ctx, c, Options{Namespace: "ns", Name: "j"}, rec)
	first := rec.waitState(t, "the first state", func(State) bool { return true })
	if first.Name != "j" || first.Outcome != Running || first.Indexes[0] != IndexRunning {
		t.Errorf("first state %+v", first)
	}
	waitWatches(t, opened)

	// A Warning about the pod shows up.
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "ev", Namespace: "ns", UID: "ev-uid"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: pod.Name, UID: pod.UID},
		Type:           corev1.EventTypeWarning, Reason: "BackOff", Message: "slow", LastTimestamp: mt0,
	}
	if _, err := c.CoreV1().Events("ns").Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.waitState(t, "the warning", func(s State) bool { return len(s.Warnings) == 1 && s.Warnings[0].Index == "0" })

	// Suspended: shown, still followed.
	job.Spec.Suspend = &[]bool{true}[0]
	if _, err := c.BatchV1().Jobs("ns").Update(ctx, job, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.waitState(t, "suspended", func(s State) bool { return s.Suspended && s.Outcome == Running })

	job.Spec.Suspend = nil
	job.Status = builder.SucceededStatus(mt0, at(time.Second))
	job.Status.Succeeded, job.Status.CompletedIndexes = 2, "0-1"
	if _, err := c.BatchV1().Jobs("ns").UpdateStatus(ctx, job, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := waitResult(t, done)
	if r.err != nil || r.state.Outcome != Complete || r.state.Succeeded != 2 || r.state.Reason != batchv1.JobReasonCompletionsReached {
		t.Errorf("Follow returned %+v, %v", r.state, r.err)
	}
}

func TestFollowJobDeleted(t *testing.T) {
	ctx := context.Background()
	c, opened := newFakeClient(testJob())
	rec := newRecorder()
	done := startFollow(ctx, c, Options{Namespace: "ns", Name: "j"}, rec)
	waitWatches(t, opened)
	if err := c.BatchV1().Jobs("ns").Delete(ctx, "j", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	r := waitResult(t, done)
	if r.err != nil || r.state.Outcome != Deleted || r.state.Outcome.ExitCode() != ExitDeleted {
		t.Errorf("Follow returned %+v, %v", r.state, r.err)
	}
}

func TestFollowJobReplaced(t *testing.T) {
	c, _ := newFakeClient(testJob())
	r := waitResult(t, startFollow(context.Background(), c, Options{Namespace: "ns", Name: "j", UID: "older-uid"}, newRecorder()))
	if r.err != nil || r.state.Outcome != Deleted || r.state.UID != "older-uid" {
		t.Errorf("Follow returned %+v, %v", r.state, r.err)
	}
}

func TestFollowFinishedJob(t *testing.T) {
	job := testJob()
	job.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "DeadlineExceeded", Message: "too slow"}}
	c, _ := newFakeClient(job)
	r := waitResult(t, startFollow(context.Background(), c, Options{Namespace: "ns", Name: "j"}, newRecorder()))
	if r.err != nil || r.state.Outcome != Failed || r.state.Reason != "DeadlineExceeded" || r.state.Message != "too slow" {
		t.Errorf("Follow returned %+v, %v", r.state, r.err)
	}
	if len(r.state.FailedPods) != 0 || r.state.MoreFailedPods != 0 {
		t.Errorf("failed pods %+v (and %d more) of a Job without pods", r.state.FailedPods, r.state.MoreFailedPods)
	}
}

// TestFollowFailedPods checks that the last State of a Failed Job names its
// failed pods, read with one LIST of its pods once it failed.
func TestFollowFailedPods(t *testing.T) {
	job := testJob()
	job.Status.Failed = 1
	job.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "FailedIndexes", Message: "Job has failed indexes"}}
	failedPod := builder.MakePod("j-1-abc", "ns").UID("pod-1").OwnedByJob(job).Index("1").Terminated(3, mt0).Obj()
	other := builder.MakePod("other", "ns").UID("other").Terminated(1, mt0).Obj() // not the Job's
	c, _ := newFakeClient(job, failedPod, other)
	r := waitResult(t, startFollow(context.Background(), c, Options{Namespace: "ns", Name: "j"}, newRecorder()))
	if r.err != nil || r.state.Outcome != Failed {
		t.Fatalf("Follow returned %+v, %v", r.state, r.err)
	}
	want := []FailedPod{{Name: "j-1-abc", Index: "1", Container: "main", ExitCode: 3, Reason: "Error"}}
	if diff := cmp.Diff(want, r.state.FailedPods); diff != "" {
		t.Errorf("failed pods (-want +got):\n%s", diff)
	}
	lists := 0
	for _, a := range c.Actions() {
		if a.GetVerb() == "list" && a.GetResource().Resource == "pods" {
			lists++
		}
	}
	if lists != 2 { // the informer's and the last one
		t.Errorf("%d LISTs of pods, want 2", lists)
	}
}

func TestFollowNotFound(t *testing.T) {
	c, _ := newFakeClient()
	r := waitResult(t, startFollow(context.Background(), c, Options{Namespace: "ns", Name: "missing"}, newRecorder()))
	if !errors.Is(r.err, ErrNotFound) || r.err.Error() != "job ns/missing: not found" {
		t.Errorf("error %v, want job ns/missing: not found", r.err)
	}
}

func TestFollowCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	c, _ := newFakeClient(testJob())
	rec := newRecorder()
	done := startFollow(ctx, c, Options{Namespace: "ns", Name: "j"}, rec)
	rec.waitState(t, "the first state", func(State) bool { return true })
	cancel()
	r := waitResult(t, done)
	if !errors.Is(r.err, context.Canceled) || r.state.Name != "j" || r.state.Outcome != Running {
		t.Errorf("Follow returned %+v, %v", r.state, r.err)
	}
}

// TestFollowLogs checks that each started container is streamed once,
// however many times its pod is seen, and that pods not started yet are
// not. (The fake clientset answers every log request with "fake logs".)
func TestFollowLogs(t *testing.T) {
	job := testJob()
	job.Status = builder.SucceededStatus(mt0, at(time.Second))
	done := func(name, index string) *corev1.Pod {
		return builder.MakePod(name, "ns").UID(name).OwnedByJob(job).Index(index).Terminated(0, mt0).Obj()
	}
	pending := builder.MakePod("j-1-new", "ns").UID("j-1-new").OwnedByJob(job).Index("1").Obj()
	c, _ := newFakeClient(job, done("j-0-a", "0"), done("j-1-b", "1"), pending)
	rec := newRecorder()
	r := waitResult(t, startFollow(context.Background(), c, Options{Namespace: "ns", Name: "j", Logs: true}, rec))
	if r.err != nil || r.state.Outcome != Complete {
		t.Fatalf("Follow returned %+v, %v", r.state, r.err)
	}
	got := map[string]int{}
	for _, l := range rec.lines {
		got[l.Prefix+" "+l.Text]++
	}
	want := map[string]int{"[index 0] fake logs": 1, "[index 1] fake logs": 1}
	if len(got) != len(want) || got["[index 0] fake logs"] != 1 || got["[index 1] fake logs"] != 1 {
		t.Errorf("log lines %v, want %v", got, want)
	}
}
