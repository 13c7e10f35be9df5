package fairqueue

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"
)

// ErrStopped is returned by Wait once the Limiter is stopped.
var ErrStopped = errors.New("fair rate limiter stopped")

// flowKey is the context key of a request's flow.
type flowKey struct{}

// WithFlow returns a context whose requests belong to flow.
func WithFlow(ctx context.Context, flow string) context.Context {
	return context.WithValue(ctx, flowKey{}, flow)
}

// FlowOf returns the flow of ctx's requests ("" if none was set).
func FlowOf(ctx context.Context) string {
	flow, _ := ctx.Value(flowKey{}).(string)
	return flow
}

// Options configures a Limiter. Zero fields take the documented defaults.
type Options struct {
	// Clock measures how long requests wait and times Window: with a fake
	// clock, throttled requests wait until it is stepped past the window.
	// Default the real clock.
	Clock clock.Clock
	// Observe, if set, is called for every request let through, with its
	// flow and the time it waited (for its turn and for the token). It is
	// called from the worker loop, or from Wait for a request that waited
	// for nothing, and must not block.
	Observe func(flow string, waited time.Duration)
	// Background names the flows with a background share (package doc):
	// they have a token only when no other flow waits, or after
	// BackgroundEvery tokens in a row went to other flows while one of them
	// waited. Default none.
	Background []string
	// BackgroundEvery bounds how long a background flow waits behind the
	// others: the number of tokens in a row they may have while it waits.
	// Default DefaultBackgroundEvery.
	BackgroundEvery int
	// Window, if positive, makes the worker hand out tokens in batches
	// while callers wait (package doc): after a grant it gives every token
	// already in the shared limiter to the next callers in turn, then waits
	// Window before it draws again, so that it wakes once per Window rather
	// than once per token. The tokens that accrue during that wait stay in
	// the shared limiter, which must have room for them with some to spare
	// (its burst well above Window×QPS: the wait ends late, and the batch
	// takes time), or the surplus is lost and fewer requests go through
	// than QPS allows; BatchWindow chooses one that leaves half the burst
	// spare. A throttled request waits at most Window longer than it would
	// for its token alone. Default 0: one wake-up per token.
	Window time.Duration
}

// MaxWindow is the longest Options.Window BatchWindow chooses: the most it
// adds to a throttled request's wait.
const MaxWindow = 50 * time.Millisecond

// BatchWindow returns the Options.Window for a shared token bucket of qps
// and burst: MaxWindow, or less if more than half the bucket would accrue
// in MaxWindow, or 0 (no batching) if fewer than two tokens accrue in it,
// since then the worker would only wake more often.
func BatchWindow(qps float32, burst int) time.Duration {
	rate := float64(qps)
	if !(rate > 0) || math.IsInf(rate, 1) {
		return 0
	}
	// Counted in tokens, so that the two-token floor is compared exactly.
	tokens := min(MaxWindow.Seconds()*rate, float64(burst/2))
	if !(tokens >= 2) {
		return 0
	}
	return min(MaxWindow, time.Duration(tokens/rate*float64(time.Second)))
}

// DefaultBackgroundEvery is the default Options.BackgroundEvery: background
// flows have at most one token in 11 while other flows wait.
const DefaultBackgroundEvery = 10

// Limiter is a flowcontrol.RateLimiter that hands the tokens of another
// one to its waiting callers flow by flow, in turns (package doc). It draws
// tokens from that limiter from one worker loop, one for each waiting
// caller, and only while a caller waits (a caller that finds nobody waiting
// takes a free token itself): it never lets through more requests than that
// limiter allows.
type Limiter struct {
	// tokens is the shared limiter whose tokens are handed out.
	tokens flowcontrol.RateLimiter
	// clock is Options.Clock.
	clock clock.Clock
	// window is Options.Window.
	window time.Duration
	// observe is Options.Observe.
	observe func(flow string, waited time.Duration)

	// mu guards queue and stopped.
	mu sync.Mutex
	// queue holds the waiting callers and decides who is next.
	queue *roundRobin[*waiter]
	// stopped is set by Stop.
	stopped bool

	// wake tells the worker that a caller started waiting.
	wake chan struct{}
	// ctx is cancelled by Stop, ending the worker's wait for a token.
	ctx    context.Context
	cancel context.CancelFunc
	// done is closed when the worker has returned.
	done chan struct{}
	// stopOnce makes Stop idempotent.
	stopOnce sync.Once
}

// waiter is one caller of Wait.
type waiter struct {
	// since is when it started waiting.
	since time.Time
	// granted is closed when it has its token.
	granted chan struct{}
}

var _ flowcontrol.RateLimiter = (*Limiter)(nil)

// New returns a Limiter in front of tokens and starts its worker loop; Stop
// ends it.
func New(tokens flowcontrol.RateLimiter, opts Options) *Limiter {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.BackgroundEvery <= 0 {
		opts.BackgroundEvery = DefaultBackgroundEvery
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &Limiter{
		tokens:  tokens,
		clock:   opts.Clock,
		window:  opts.Window,
		observe: opts.Observe,
		queue:   newRoundRobin[*waiter](opts.Background, opts.BackgroundEvery),
		wake:    make(chan struct{}, 1),
		ctx:     ctx,
		cancel:  cancel,
		done:    make(chan struct{}),
	}
	go l.run()
	return l
}

// Wait returns nil once the caller's flow (FlowOf(ctx)) has had its turn
// and a token was taken for it, or ctx's error if ctx is done first, or
// ErrStopped.
func (l *Limiter) Wait(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	flow := FlowOf(ctx)
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return ErrStopped
	}
	if l.queue.len() == 0 && l.tokens.TryAccept() {
		// Nobody waits and a token is there: no turn to take, so the
		// caller takes it itself, without two hand-overs through the
		// worker (most requests while the budget is not exhausted).
		l.mu.Unlock()
		if l.observe != nil {
			l.observe(flow, 0)
		}
		return nil
	}
	w := &waiter{since: l.clock.Now(), granted: make(chan struct{})}
	l.queue.push(flow, w)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	select {
	case <-w.granted:
		return nil
	case <-ctx.Done():
		if !l.withdraw(flow, w) {
			return nil
		}
		return ctx.Err()
	case <-l.ctx.Done():
		if !l.withdraw(flow, w) {
			return nil
		}
		return ErrStopped
	}
}

// withdraw takes w out of the queue of a caller that stops waiting, and
// reports whether it still waited. A caller that did not was granted a
// token meanwhile (its channel may not be closed yet): the token is spent,
// so it goes ahead.
func (l *Limiter) withdraw(flow string, w *waiter) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.queue.remove(flow, w)
}

// Accept waits for a token for the flow "".
func (l *Limiter) Accept() { _ = l.Wait(context.Background()) }

// TryAccept takes a token at once for the flow "" if no caller is waiting
// and the shared limiter has one: it never jumps the queue.
func (l *Limiter) TryAccept() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped || l.queue.len() > 0 {
		return false
	}
	return l.tokens.TryAccept()
}

// QPS returns the shared limiter's QPS.
func (l *Limiter) QPS() float32 { return l.tokens.QPS() }

// Stop ends the worker loop; waiting callers and later ones get ErrStopped.
// The shared limiter is left running: it may have other users.
func (l *Limiter) Stop() {
	l.stopOnce.Do(func() {
		l.mu.Lock()
		l.stopped = true
		l.mu.Unlock()
		l.cancel()
		<-l.done
	})
}

// run is the worker loop: while callers wait, it takes a token from the
// shared limiter, then gives it to the caller whose turn it is. The turn is
// decided once the token is there, so a flow that starts waiting during the
// wait for a token can have it. With a window, it also gives the tokens
// already there to the next callers, and waits out the window before it
// draws again.
func (l *Limiter) run() {
	defer close(l.done)
	for {
		select {
		case <-l.wake:
		case <-l.ctx.Done():
			return
		}
		for l.waiting() > 0 {
			if err := l.tokens.Wait(l.ctx); err != nil {
				return
			}
			l.grant()
			if l.window <= 0 {
				continue
			}
			if l.grantAccrued() == 0 {
				continue
			}
			select {
			case <-l.clock.After(l.window):
			case <-l.ctx.Done():
				return
			}
		}
	}
}

// waiting returns the number of waiting callers.
func (l *Limiter) waiting() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.queue.len()
}

// grantAccrued gives the tokens the shared limiter has at once to the
// callers waiting, in turn, and returns how many callers still wait. It
// takes a token only for a caller that waits, under the lock, so none is
// lost to a caller that gives up.
func (l *Limiter) grantAccrued() int {
	type granted struct {
		w    *waiter
		flow string
	}
	var batch []granted
	l.mu.Lock()
	for l.queue.len() > 0 && l.tokens.TryAccept() {
		w, flow, _ := l.queue.pop()
		batch = append(batch, granted{w, flow})
	}
	left := l.queue.len()
	l.mu.Unlock()
	for _, g := range batch {
		l.release(g.w, g.flow)
	}
	return left
}

// grant gives a token to the caller whose turn it is. If every caller gave
// up while the token was awaited, the token is lost: better than letting a
// later request through above the limit.
func (l *Limiter) grant() {
	l.mu.Lock()
	w, flow, ok := l.queue.pop()
	l.mu.Unlock()
	if ok {
		l.release(w, flow)
	}
}

// release tells w, popped for flow, that it has its token.
func (l *Limiter) release(w *waiter, flow string) {
	if l.observe != nil {
		l.observe(flow, l.clock.Since(w.since))
	}
	close(w.granted)
}
