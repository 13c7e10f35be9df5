package lifecycle

import "time"

// Restart back-off tunables, as the kubelet's defaults. Tests may change them.
var (
	// BackoffInitial is the delay before the second restart of a container.
	BackoffInitial = 10 * time.Second
	// BackoffMax caps the delay between restarts.
	BackoffMax = 300 * time.Second
)

// RestartBackoff is the crash-loop back-off of one container, as the kubelet
// behaves: the first restart is immediate, then the delay starts at
// BackoffInitial after the container finished and doubles with every restart
// up to BackoffMax; a container that finishes more than twice BackoffMax
// after its last restart starts over with an immediate restart.
type RestartBackoff struct {
	// delay is the delay the next restart will wait; 0 before any restart.
	delay time.Duration
	// lastRestart is when the last restart was scheduled.
	lastRestart time.Time
}

// next returns how long after finishedAt the container may start again and
// moves the back-off one step.
func (b *RestartBackoff) next(finishedAt time.Time) time.Duration {
	if b.delay != 0 && finishedAt.Sub(b.lastRestart) > 2*BackoffMax {
		b.delay = 0
	}
	wait := b.delay
	switch {
	case b.delay == 0:
		b.delay = BackoffInitial
	case b.delay*2 > BackoffMax:
		b.delay = BackoffMax
	default:
		b.delay *= 2
	}
	b.lastRestart = finishedAt.Add(wait)
	return wait
}
