package job

import (
	"sync"
	"time"
)

// Adaptive sync batching. Upstream delays every sync that a pod event or a
// status-only Job update triggers by the batch period (--sync-batch-period,
// 1 s), so that a burst of events shares one sync. On a small Job that
// delay sits on the path to completion twice with KEP-2307's order (pod
// finished -> counted and released; finalizers gone -> terminal condition)
// and amortises nothing. Here a Job whose recent wake-ups are few is synced
// at once, and one in a burst waits the batch period as upstream, which
// stays the upper bound of the delay.

// fewPodEvents is how many wake-ups (pod events, status-only updates) a Job
// may have in one batch period and still be synced at once. A one-pod Job
// has about seven in its life: the status write of its first sync, the
// pod's creation, its success, the uncounted write, the finalizer removal,
// the counted write and the terminal condition.
var fewPodEvents = 10

// eventWindow is what the controller remembers of a Job's recent wake-ups:
// those of the current window, one batch period long from its first.
type eventWindow struct {
	// start is when the current window began; zero before the first wake-up.
	start time.Time
	// events is the number of wake-ups in the current window.
	events int
	// busy is set when the window just before the current one had more than
	// few wake-ups: the Job is in a burst, and batched from the first
	// wake-up of this window.
	busy bool
}

// batchDelay counts a wake-up of a Job at now in w and returns the new
// window and how long the sync should wait: nothing while the Job's
// wake-ups are few (at most few in the current window, and the window
// before was not busy), the whole period otherwise. A period of 0 means no
// batching.
func batchDelay(w eventWindow, now time.Time, period time.Duration, few int) (eventWindow, time.Duration) {
	if period <= 0 {
		return w, 0
	}
	if w.start.IsZero() || now.Sub(w.start) >= period {
		adjacent := !w.start.IsZero() && now.Sub(w.start) < 2*period
		w = eventWindow{start: now, busy: adjacent && w.events > few}
	}
	w.events++
	if w.busy || w.events > few {
		return w, period
	}
	return w, 0
}

// syncBatches holds the event windows of the Jobs; the informers' handlers
// use it from their goroutines.
type syncBatches struct {
	// mu guards windows.
	mu sync.Mutex
	// windows are the Jobs' event windows by queue key.
	windows map[string]eventWindow
}

func newSyncBatches() *syncBatches {
	return &syncBatches{windows: map[string]eventWindow{}}
}

// delay counts a wake-up of the Job key at now and returns how long its
// sync should wait (batchDelay).
func (b *syncBatches) delay(key string, now time.Time, period time.Duration) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	w, d := batchDelay(b.windows[key], now, period, fewPodEvents)
	b.windows[key] = w
	return d
}

// forget drops the Job's window.
func (b *syncBatches) forget(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.windows, key)
}
