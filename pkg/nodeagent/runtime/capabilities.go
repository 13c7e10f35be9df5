package runtime

import "time"

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
