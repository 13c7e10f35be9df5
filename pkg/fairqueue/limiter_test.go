package fairqueue

import (
	"context"
	"errors"
	"math"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	testingclock "k8s.io/utils/clock/testing"
)

// fakeTokens is a shared limiter whose tokens the test hands out one by one.
type fakeTokens struct {
	ch chan struct{}
}

func newFakeTokens() *fakeTokens { return &fakeTokens{ch: make(chan struct{})} }

func (f *fakeTokens) Wait(ctx context.Context) error {
	select {
	case <-f.ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *fakeTokens) TryAccept() bool {
	select {
	case <-f.ch:
		return true
	default:
		return false
	}
}

func (f *fakeTokens) Accept()      { _ = f.Wait(context.Background()) }
func (f *fakeTokens) Stop()        {}
func (f *fakeTokens) QPS() float32 { return 7 }

// grant is one request the limiter let through, as Observe saw it.
type grant struct {
	Flow   string
	Waited time.Duration
}

// harness is a Limiter on fake tokens and a fake clock.
type harness struct {
	t      *testing.T
	l      *Limiter
	tokens *fakeTokens
	clock  *testingclock.FakeClock
	grants chan grant
	// results receives each waiter's flow and Wait's error.
	results chan result
}

type result struct {
	flow string
	err  error
}

func newHarness(t *testing.T) *harness { return newHarnessWith(t, Options{}) }

// newHarnessWith is newHarness with opts; its Clock and Observe are set.
func newHarnessWith(t *testing.T, opts Options) *harness {
	h := &harness{t: t, tokens: newFakeTokens(), clock: testingclock.NewFakeClock(time.Unix(1000, 0)),
		grants: make(chan grant, 100), results: make(chan result, 100)}
	opts.Clock = h.clock
	opts.Observe = func(flow string, waited time.Duration) { h.grants <- grant{flow, waited} }
	h.l = New(h.tokens, opts)
	t.Cleanup(h.l.Stop)
	return h
}

// wait starts a caller of flow and returns once it is queued.
func (h *harness) wait(ctx context.Context, flow string) {
	before := h.l.waiting()
	go func() {
		err := h.l.Wait(WithFlow(ctx, flow))
		h.results <- result{flow, err}
	}()
	for h.l.waiting() == before {
		runtime.Gosched()
	}
}

// token hands out one token and returns the grant it produced.
func (h *harness) token() grant {
	h.tokens.ch <- struct{}{}
	return <-h.grants
}

func TestLimiterTurns(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	for range 3 {
		h.wait(ctx, "big")
	}
	h.clock.Step(100 * time.Millisecond)
	h.wait(ctx, "small")
	h.wait(ctx, "")
	var got []grant
	for range 5 {
		got = append(got, h.token())
		h.clock.Step(10 * time.Millisecond)
	}
	want := []grant{
		{"big", 100 * time.Millisecond},
		{"small", 10 * time.Millisecond},
		{"", 20 * time.Millisecond},
		{"big", 130 * time.Millisecond},
		{"big", 140 * time.Millisecond},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("grants (-want +got):\n%s", diff)
	}
	for range 5 {
		if r := <-h.results; r.err != nil {
			t.Errorf("Wait of flow %q: %v", r.flow, r.err)
		}
	}
}

func TestLimiterBackgroundWaitsBehindJobsButIsServed(t *testing.T) {
	h := newHarnessWith(t, Options{Background: []string{"events"}, BackgroundEvery: 3})
	ctx := context.Background()
	h.wait(ctx, "events")
	h.wait(ctx, "events")
	for range 4 {
		h.wait(ctx, "ns/big")
	}
	h.wait(ctx, "ns/small")
	h.wait(ctx, "ns/small")
	var got []grant
	for range 8 {
		h.clock.Step(10 * time.Millisecond)
		got = append(got, h.token())
	}
	want := []grant{
		{"ns/big", 10 * time.Millisecond},
		{"ns/small", 20 * time.Millisecond},
		{"ns/big", 30 * time.Millisecond},
		// Three tokens went to the Jobs while the events waited.
		{"events", 40 * time.Millisecond},
		{"ns/small", 50 * time.Millisecond},
		{"ns/big", 60 * time.Millisecond},
		{"ns/big", 70 * time.Millisecond},
		// No Job waits: the events have the tokens.
		{"events", 80 * time.Millisecond},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("grants (-want +got):\n%s", diff)
	}
	for range 8 {
		if r := <-h.results; r.err != nil {
			t.Errorf("Wait of flow %q: %v", r.flow, r.err)
		}
	}
}

func TestLimiterNeverExceedsTheTokens(t *testing.T) {
	h := newHarness(t)
	for range 10 {
		h.wait(context.Background(), "big")
	}
	for range 4 {
		h.token()
	}
	for range 4 {
		if r := <-h.results; r.err != nil {
			t.Fatalf("Wait: %v", r.err)
		}
	}
	if n := h.l.waiting(); n != 6 {
		t.Errorf("%d callers waiting after 4 tokens for 10, want 6", n)
	}
	if h.l.TryAccept() {
		t.Errorf("TryAccept jumped the queue")
	}
	h.l.Stop()
	for range 6 {
		if r := <-h.results; !errors.Is(r.err, ErrStopped) {
			t.Errorf("Wait after Stop = %v, want ErrStopped", r.err)
		}
	}
	if err := h.l.Wait(context.Background()); !errors.Is(err, ErrStopped) {
		t.Errorf("Wait on a stopped limiter = %v, want ErrStopped", err)
	}
	select {
	case g := <-h.grants:
		t.Errorf("granted %v with no token", g)
	default:
	}
}

func TestLimiterCallerGivesUp(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	h.wait(ctx, "impatient")
	h.wait(context.Background(), "patient")
	cancel()
	if r := <-h.results; r.flow != "impatient" || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("first result %+v, want impatient's context.Canceled", r)
	}
	if g := h.token(); g.Flow != "patient" {
		t.Errorf("token went to %q, want patient", g.Flow)
	}
	if r := <-h.results; r.err != nil {
		t.Errorf("patient's Wait: %v", r.err)
	}
	if err := h.l.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait with a done context = %v, want context.Canceled", err)
	}
}

func TestLimiterTryAcceptWhenIdle(t *testing.T) {
	h := newHarness(t)
	if h.l.TryAccept() {
		t.Errorf("TryAccept with no token = true")
	}
	go func() { h.tokens.ch <- struct{}{} }()
	for !h.l.TryAccept() {
		runtime.Gosched()
	}
	if h.l.QPS() != 7 {
		t.Errorf("QPS() = %v, want the shared limiter's", h.l.QPS())
	}
}

func TestFlowOf(t *testing.T) {
	ctx := context.Background()
	if got := FlowOf(ctx); got != "" {
		t.Errorf("FlowOf(background) = %q", got)
	}
	if got := FlowOf(WithFlow(ctx, "ns/job")); got != "ns/job" {
		t.Errorf("FlowOf = %q, want ns/job", got)
	}
}

// countingTokens always has a token, and counts how many were taken.
type countingTokens struct{ taken int }

func (c *countingTokens) Wait(context.Context) error { c.taken++; return nil }
func (c *countingTokens) TryAccept() bool            { c.taken++; return true }
func (c *countingTokens) Accept()                    { c.taken++ }
func (c *countingTokens) Stop()                      {}
func (c *countingTokens) QPS() float32               { return 7 }

// TestWaitTakesAFreeTokenItself: with nobody waiting and a token there, the
// caller takes it at once (observed as no wait), one token per request.
func TestWaitTakesAFreeTokenItself(t *testing.T) {
	tokens := &countingTokens{}
	var waited []time.Duration
	l := New(tokens, Options{Observe: func(_ string, d time.Duration) { waited = append(waited, d) }})
	defer l.Stop()
	for range 3 {
		if err := l.Wait(WithFlow(context.Background(), "a")); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff([]time.Duration{0, 0, 0}, waited); diff != "" {
		t.Errorf("waits observed (-want +got):\n%s", diff)
	}
	if tokens.taken != 3 {
		t.Errorf("%d tokens taken for 3 requests", tokens.taken)
	}
}

// pooledTokens is a shared limiter holding the tokens the test adds: Wait
// blocks until one is there, TryAccept takes one if there is one.
type pooledTokens struct {
	mu    sync.Mutex
	n     int
	taken int
	added chan struct{}
}

func newPooledTokens() *pooledTokens { return &pooledTokens{added: make(chan struct{}, 1)} }

func (p *pooledTokens) add(n int) {
	p.mu.Lock()
	p.n += n
	p.mu.Unlock()
	select {
	case p.added <- struct{}{}:
	default:
	}
}

func (p *pooledTokens) left() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

func (p *pooledTokens) takenSoFar() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.taken
}

func (p *pooledTokens) TryAccept() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == 0 {
		return false
	}
	p.n--
	p.taken++
	return true
}

func (p *pooledTokens) Wait(ctx context.Context) error {
	for !p.TryAccept() {
		select {
		case <-p.added:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (p *pooledTokens) Accept()      { _ = p.Wait(context.Background()) }
func (p *pooledTokens) Stop()        {}
func (p *pooledTokens) QPS() float32 { return 100 }

// windowHarness is a Limiter with a window on pooled tokens and a fake
// clock, whose callers have queued.
func windowHarness(t *testing.T, flows ...string) (*harness, *pooledTokens) {
	tokens := newPooledTokens()
	h := &harness{t: t, clock: testingclock.NewFakeClock(time.Unix(1000, 0)),
		grants: make(chan grant, 100), results: make(chan result, 100)}
	h.l = New(tokens, Options{Clock: h.clock, Window: 50 * time.Millisecond,
		Observe: func(flow string, waited time.Duration) { h.grants <- grant{flow, waited} }})
	t.Cleanup(h.l.Stop)
	for _, flow := range flows {
		h.wait(context.Background(), flow)
	}
	return h, tokens
}

// failsafe bounds how long a window test waits for the worker before it
// fails: not a timing assertion, only so that a broken window fails the
// test instead of hanging it.
const failsafe = 30 * time.Second

// grantsOf returns the next n grants.
func (h *harness) grantsOf(n int) []grant {
	h.t.Helper()
	got := make([]grant, n)
	for i := range got {
		select {
		case got[i] = <-h.grants:
		case <-time.After(failsafe):
			h.t.Fatalf("%d of %d grants after %v", i, n, failsafe)
		}
	}
	return got
}

// waitForWindow returns once the worker waits out its window.
func (h *harness) waitForWindow() {
	h.t.Helper()
	deadline := time.Now().Add(failsafe)
	for !h.clock.HasWaiters() {
		if time.Now().After(deadline) {
			h.t.Fatalf("the worker did not wait out a window in %v", failsafe)
		}
		runtime.Gosched()
	}
}

// intoWindow lets the first waiting caller through with one token and
// returns once the worker waits out the window that follows.
func (h *harness) intoWindow(tokens *pooledTokens) {
	h.t.Helper()
	tokens.add(1)
	h.grantsOf(1)
	h.waitForWindow()
}

// TestLimiterWindowBatchesTokens: with a window, the worker gives every
// token already there to the callers in turn, then draws nothing until the
// window has passed, whatever accrues meanwhile; it takes no token for a
// caller that does not wait.
func TestLimiterWindowBatchesTokens(t *testing.T) {
	h, tokens := windowHarness(t, "big", "big", "big", "big", "small", "other")
	tokens.add(3)
	want := []grant{{"big", 0}, {"small", 0}, {"other", 0}}
	if diff := cmp.Diff(want, h.grantsOf(3)); diff != "" {
		t.Errorf("first batch (-want +got):\n%s", diff)
	}
	h.waitForWindow()
	tokens.add(5)
	h.clock.Step(49 * time.Millisecond)
	if !h.clock.HasWaiters() {
		t.Fatalf("the window ended after 49 ms of 50")
	}
	if n := tokens.left(); n != 5 {
		t.Errorf("%d of 5 tokens left inside the window: the worker drew before it ended", n)
	}
	h.clock.Step(time.Millisecond)
	want = []grant{{"big", 50 * time.Millisecond}, {"big", 50 * time.Millisecond}, {"big", 50 * time.Millisecond}}
	if diff := cmp.Diff(want, h.grantsOf(3)); diff != "" {
		t.Errorf("second batch (-want +got):\n%s", diff)
	}
	for range 6 {
		if r := <-h.results; r.err != nil {
			t.Errorf("Wait of flow %q: %v", r.flow, r.err)
		}
	}
	if n := tokens.left(); n != 2 {
		t.Errorf("%d tokens left, want the 2 no caller waited for", n)
	}
	if n := tokens.takenSoFar(); n != 6 {
		t.Errorf("%d tokens taken for 6 requests", n)
	}
}

// TestLimiterWindowArrivalsAndCancels: a caller that comes during the
// window queues behind the callers already waiting, even with tokens in
// the bucket, and has its turn at the window's end; a caller that gives up
// during the window leaves its token in the bucket.
func TestLimiterWindowArrivalsAndCancels(t *testing.T) {
	h, tokens := windowHarness(t, "big", "big")
	h.intoWindow(tokens)
	ctx, cancel := context.WithCancel(context.Background())
	h.wait(ctx, "impatient")
	tokens.add(3)
	h.wait(context.Background(), "small")
	if n := tokens.left(); n != 3 {
		t.Fatalf("%d of 3 tokens left: a caller that came during the window took one", n)
	}
	cancel()
	results := map[string]error{}
	for range 2 {
		r := <-h.results
		results[r.flow] = r.err
	}
	if results["big"] != nil || !errors.Is(results["impatient"], context.Canceled) {
		t.Fatalf("results %v, want the first big granted and impatient's context.Canceled", results)
	}
	h.clock.Step(50 * time.Millisecond)
	want := []grant{{"big", 50 * time.Millisecond}, {"small", 50 * time.Millisecond}}
	if diff := cmp.Diff(want, h.grantsOf(2)); diff != "" {
		t.Errorf("grants at the window's end (-want +got):\n%s", diff)
	}
	for range 2 {
		if r := <-h.results; r.err != nil {
			t.Errorf("Wait of flow %q: %v", r.flow, r.err)
		}
	}
	if n := tokens.left(); n != 1 {
		t.Errorf("%d tokens left, want the one the impatient caller did not use", n)
	}
}

// TestLimiterStopWhileGranting: a caller whose token was taken, Stop
// coming before the worker has told it, is let through: its token is
// spent.
func TestLimiterStopWhileGranting(t *testing.T) {
	tokens := newPooledTokens()
	entered, release := make(chan string), make(chan struct{})
	l := New(tokens, Options{Clock: testingclock.NewFakeClock(time.Unix(1000, 0)),
		Observe: func(flow string, _ time.Duration) { entered <- flow; <-release }})
	result := make(chan error, 1)
	go func() { result <- l.Wait(WithFlow(context.Background(), "a")) }()
	for l.waiting() == 0 {
		runtime.Gosched()
	}
	tokens.add(1)
	<-entered // the worker took the token for a, and has not told it yet
	stopped := make(chan struct{})
	go func() { l.Stop(); close(stopped) }()
	select {
	case err := <-result:
		if err != nil {
			t.Errorf("Wait of a caller whose token was taken = %v, want nil", err)
		}
	case <-time.After(failsafe):
		t.Fatalf("Wait did not return after Stop in %v", failsafe)
	}
	close(release)
	<-stopped
}

// TestLimiterStopsInsideWindow: Stop ends the window's wait, and the callers
// still waiting get ErrStopped.
func TestLimiterStopsInsideWindow(t *testing.T) {
	h, tokens := windowHarness(t, "a", "b")
	h.intoWindow(tokens)
	h.l.Stop()
	results := map[string]error{}
	for range 2 {
		r := <-h.results
		results[r.flow] = r.err
	}
	if results["a"] != nil || !errors.Is(results["b"], ErrStopped) {
		t.Errorf("results %v, want a granted and b ErrStopped", results)
	}
}

func TestBatchWindow(t *testing.T) {
	for _, tc := range []struct {
		qps   float32
		burst int
		want  time.Duration
	}{
		{100, 200, MaxWindow},
		{50, 100, MaxWindow},                // the manager's default: 2.5 tokens
		{40, 100, MaxWindow},                // exactly 2 tokens
		{500, 1000, MaxWindow},              // 25 tokens
		{1000, 10, 5 * time.Millisecond},    // half the bucket: 5 tokens
		{100, 3, 0},                         // half the bucket is 1.5 tokens
		{20, 30, 0},                         // one token per 50 ms: nothing to batch
		{100, 1, 0},                         // the bucket holds one token
		{0, 100, 0},                         // no limit
		{5000, 10000, MaxWindow},            // 250 tokens a window
		{49, 4, 40816326 * time.Nanosecond}, // half the bucket: exactly 2 tokens
		{100, 0, 0},
		{float32(math.NaN()), 100, 0},
		{float32(math.Inf(1)), 100, 0},
		{-1, 100, 0},
	} {
		if got := BatchWindow(tc.qps, tc.burst); got != tc.want {
			t.Errorf("BatchWindow(%v, %d) = %v, want %v", tc.qps, tc.burst, got, tc.want)
		}
	}
}
