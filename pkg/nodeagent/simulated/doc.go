// Package simulated is the node agent's runtime for scale tests: no process
// is started, each container "runs" for a duration and exits with a code,
// both read from the pod's annotations:
//
//	jobkeeper.dev/simulate-duration   a Go duration ("30s", "1m"); default 0
//	jobkeeper.dev/simulate-exit-code  an integer; default 0
//
// With the defaults a container ends the instant it starts, successfully, so
// the pod worker reports the pod Succeeded in a single status write. The
// duration is measured with the injected clock. Stop ends a container at
// once with exit code 137 when it has a grace period of zero, else 143
// (as if the process honoured SIGTERM). Logs are empty.
package simulated
