package fault

import (
	"strings"
	"time"
)

// Faults is what the proxy injects; all fractions are in [0,1]. The zero
// value injects no faults: every request is forwarded unchanged.
type Faults struct {
	// WatchDelay delays every watch stream's bytes: they reach the client
	// this much later than they left the apiserver, in order.
	WatchDelay time.Duration
	// CutWatchMin is the shortest life of a watch stream when CutWatchMax
	// is set.
	CutWatchMin time.Duration
	// CutWatchMax, if positive, closes each watch stream after a random
	// duration in [CutWatchMin, CutWatchMax].
	CutWatchMax time.Duration
	// FailBefore is the fraction of writes answered with an error (500
	// InternalError) without forwarding them to the apiserver.
	FailBefore float64
	// FailAfter is the fraction of writes forwarded to the apiserver (and
	// applied by it) whose response is replaced by an error (500
	// InternalError).
	FailAfter float64
	// Throttle is the fraction of requests other than watches answered
	// 429 TooManyRequests with Retry-After: 1, without forwarding them.
	Throttle float64
	// ServerError is the fraction of requests other than watches answered
	// 503 ServiceUnavailable (no Retry-After), without forwarding them.
	ServerError float64
	// Hang is the fraction of writes held for HangFor before they are
	// forwarded. A hung write is forwarded even if its client gave up
	// meanwhile; its response is then discarded.
	Hang float64
	// HangFor is how long a hung write is held.
	HangFor time.Duration
	// Writes tells which requests are writes for FailBefore, FailAfter and
	// Hang, by their harness.RequestKind ("create pods", "update
	// jobs/status"...). Nil means DefaultWrites.
	Writes func(kind string) bool
}

// DefaultWrites is the Writes of Faults that set none: a create, update,
// patch or delete of pods, jobs or jobs/status.
func DefaultWrites(kind string) bool {
	verb, resource, _ := strings.Cut(kind, " ")
	switch verb {
	case "create", "update", "patch", "delete":
	default:
		return false
	}
	switch resource {
	case "pods", "jobs", "jobs/status":
		return true
	}
	return false
}

// Names of the counts of Proxy.Injected.
const (
	// CountFailBefore counts writes failed without forwarding them.
	CountFailBefore = "fail-before"
	// CountFailAfter counts writes forwarded whose response was replaced
	// by an error.
	CountFailAfter = "fail-after"
	// CountThrottle counts requests answered 429.
	CountThrottle = "throttle"
	// CountServerError counts requests answered 503.
	CountServerError = "server-error"
	// CountHang counts hung writes.
	CountHang = "hang"
	// CountWatchCut counts watch streams closed by the proxy (by a
	// CutWatchMax timer or by CutWatches).
	CountWatchCut = "watch-cut"
	// CountWatchStreams counts watches opened through the proxy.
	CountWatchStreams = "watch-streams"
	// CountRequests counts every request through the proxy.
	CountRequests = "requests"
)
