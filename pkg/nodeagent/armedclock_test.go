package nodeagent

import (
	"context"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
)

// armedClock is a fake clock that keeps the fire times of the timers
// armed on it and not stopped, so that a test steps the clock only once
// the timer it means to fire waits. Counting the clock's waiters cannot
// tell: the agent's tickers (lease, node status, volume refresh) are
// waiters all the time, so a step could come before the timer it was for
// is armed, and that timer would then wait for a step that never comes.
type armedClock struct {
	*testingclock.FakeClock
	mu    sync.Mutex
	armed map[*armedTimer]time.Time
}

func newArmedClock(clk *testingclock.FakeClock) *armedClock {
	return &armedClock{FakeClock: clk, armed: map[*armedTimer]time.Time{}}
}

// armedTimer is a timer of an armedClock.
type armedTimer struct {
	clock.Timer
	c *armedClock
}

// NewTimer arms a timer and records when it fires.
func (c *armedClock) NewTimer(d time.Duration) clock.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &armedTimer{Timer: c.FakeClock.NewTimer(d), c: c}
	c.armed[t] = c.FakeClock.Now().Add(d)
	return t
}

// After is NewTimer's channel (it cannot be stopped).
func (c *armedClock) After(d time.Duration) <-chan time.Time { return c.NewTimer(d).C() }

// Stop stops the timer and forgets it.
func (t *armedTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	delete(t.c.armed, t)
	return t.Timer.Stop()
}

// Reset arms the timer again.
func (t *armedTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	t.c.armed[t] = t.c.FakeClock.Now().Add(d)
	return t.Timer.Reset(d)
}

// armedAt reports whether a timer that has not fired is armed to fire at at.
func (c *armedClock) armedAt(at time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, when := range c.armed {
		if when.Equal(at) {
			return true
		}
	}
	return false
}

// step advances the fake clock by d once a timer waits to fire at exactly
// the new time.
func (ta *testAgent) step(t *testing.T, d time.Duration) {
	t.Helper()
	at := ta.clock.Now().Add(d)
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return ta.timers.armedAt(at), nil
	}); err != nil {
		t.Fatalf("no timer waits to fire at %s", at)
	}
	ta.clock.Step(d)
}
