package runtime

import (
	"context"
	"time"
)

// HostDirs is implemented by runtimes whose attempts are processes of this
// host that run in a host directory and write their output to a log file.
// For such a runtime the pod worker creates each attempt's directories,
// sets Spec.LogPath, and requires a container's workingDir to be an
// existing directory of the host. Other runtimes get neither.
type HostDirs interface {
	// UsesHostDirs marks the runtime; it does nothing.
	UsesHostDirs()
}

// Quiet is implemented by runtimes whose containers are not real enough to
// be worth events (the simulated runtime, made for scale tests): with a
// Quiet runtime the agent records no events.
type Quiet interface {
	// Quiet marks the runtime; it does nothing.
	Quiet()
}

// Killer is implemented by runtimes whose attempts outlive the agent's
// goroutines (host processes): the agent kills them all when it stops.
type Killer interface {
	// KillAll kills every running attempt and waits up to timeout for
	// them to end.
	KillAll(timeout time.Duration)
}

// Adopter is implemented by runtimes whose attempts outlive the agent, as a
// container runtime's containers outlive a kubelet restart: an attempt
// started with a Spec.StateDir keeps running when the agent dies, and the
// next agent takes it over.
type Adopter interface {
	// Adopt looks for the attempt whose Spec.StateDir is dir, left by a
	// previous run of the agent. Found is false when nothing of it is
	// there (it never got to run its command, or its record is gone).
	Adopt(ctx context.Context, dir string) (Adopted, error)
}

// Adopted is an attempt found by Adopter.Adopt.
type Adopted struct {
	// Found is true when the attempt ran.
	Found bool
	// Handle is the attempt, now held by this agent, while it runs; nil
	// when it ended while no agent held it (Result says how).
	Handle Handle
	// Result is how it ended, when Handle is nil.
	Result Result
	// PID is its main process's PID.
	PID int
	// NetPID is a process that stays in the attempt's network namespace
	// for as long as it runs (its sandbox's), which its main process may
	// leave; 0 when there is none.
	NetPID int
	// StartedAt is when it started.
	StartedAt time.Time
}
