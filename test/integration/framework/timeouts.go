package framework

import "time"

// Every wait in the integration tests uses these, so slow machines are tuned
// in one place.
const (
	// Timeout bounds any wait for the system to reach a wanted state.
	Timeout = 60 * time.Second
	// Interval is the polling period of waits.
	Interval = 50 * time.Millisecond
)
