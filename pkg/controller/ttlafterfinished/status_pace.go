package ttlafterfinished

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// statusPacer spaces the status syncs of each TTLPolicy that its deletions
// ask for, so that a deletion shows in the policy's status promptly and a
// burst of deletions costs a bounded number of writes.
//
// A deletion asks for a sync StatusSettleDelay after it (time for the
// informers to see the object go, so that the matched count is right), but
// never sooner than StatusWriteInterval after the policy's previous sync
// began. So:
//
//   - the first deletion after a quiet StatusWriteInterval is in the status
//     about StatusSettleDelay later;
//   - a burst is written at most once per StatusWriteInterval per policy,
//     however many objects it deletes: the queue keeps one entry per
//     policy, at the earliest time asked;
//   - the last deletion of a burst is written at most StatusWriteInterval
//     after it (the settle delay being shorter).
type statusPacer struct {
	// clock tells the time.
	clock clock.PassiveClock
	// mu guards began.
	mu sync.Mutex
	// began holds, per policy, when its last status sync began.
	began map[string]time.Time
}

// newStatusPacer returns a pacer on clock c.
func newStatusPacer(c clock.PassiveClock) *statusPacer {
	return &statusPacer{clock: c, began: map[string]time.Time{}}
}

// delay returns how long from now the status sync of policy that a
// deletion asks for should wait: settle, or until interval after the
// policy's last sync began, whichever is later.
func (p *statusPacer) delay(policy string, settle, interval time.Duration) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	at := now.Add(settle)
	if last, ok := p.began[policy]; ok && last.Add(interval).After(at) {
		at = last.Add(interval)
	}
	return at.Sub(now)
}

// syncing records that a status sync of policy begins now.
func (p *statusPacer) syncing(policy string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.began[policy] = p.clock.Now()
}

// forget drops a policy that was deleted.
func (p *statusPacer) forget(policy string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.began, policy)
}
