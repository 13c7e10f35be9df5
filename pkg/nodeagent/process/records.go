package process

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/klog/v2"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/sandbox"
)

// Every running sandbox is recorded as a file of the state directory named
// after its PID (also its session id), holding what it runs, its start
// time and, for a durable sandbox, its Config.StateDir, one per line.

// Recorded is a sandbox recorded in a runtime's state directory.
type Recorded struct {
	// PID is the sandbox's PID, also its session id.
	PID int
	// StartTime is its start time (see sandbox.KillSession); 0 when the
	// record does not say.
	StartTime uint64
	// Durable is set for a sandbox that outlives the agent.
	Durable bool
	// file is the record.
	file string
}

// Alive reports whether the recorded sandbox still runs.
func (r Recorded) Alive() bool {
	return r.StartTime != 0 && sandbox.StartTime(r.PID) == r.StartTime
}

// ReadRecorded lists the sandboxes recorded in the state directory dir
// (Options.StateDir) by this or a previous run.
func ReadRecorded(dir string) []Recorded {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []Recorded
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 1 {
			continue
		}
		// A record without its start time (its writer was killed while
		// writing it) keeps 0: whatever has that PID now is left alone,
		// and only what is left of the session of a leader that is gone
		// is killed (sandbox.KillSession).
		r := Recorded{PID: pid, file: filepath.Join(dir, e.Name())}
		if b, err := os.ReadFile(r.file); err == nil {
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			if len(lines) > 1 {
				r.StartTime, _ = strconv.ParseUint(lines[1], 10, 64)
			}
			r.Durable = len(lines) > 2 && lines[2] != ""
		}
		out = append(out, r)
	}
	return out
}

// KillRecorded kills, with SIGKILL, every process left in the sessions of
// the recorded sandboxes (durable ones included: `jobkeeper reset` removes
// what they would be taken over from) and returns how many it signalled.
func KillRecorded(records []Recorded) int {
	n := 0
	for _, r := range records {
		n += sandbox.KillSession(r.PID, r.StartTime)
	}
	return n
}

// killStale kills what the recorded sandboxes of a previous run left: every
// process still in such a session, the sandbox's grandchildren and groups
// whose leader is gone included. A durable sandbox that still runs is left
// for the agent to adopt: it stops on its own if none does. The scratch
// directories of the previous run are removed: their mounts lived in
// namespaces that are gone (a durable sandbox's is under its own state
// directory).
func killStale(ctx context.Context, dir string) {
	logger := klog.FromContext(ctx)
	_ = os.RemoveAll(filepath.Join(dir, "scratch"))
	for _, r := range ReadRecorded(dir) {
		if r.Durable && r.Alive() {
			continue
		}
		if n := sandbox.KillSession(r.PID, r.StartTime); n > 0 {
			logger.Info("Killed processes left by a previous run", "session", r.PID, "processes", n)
		}
		_ = os.Remove(r.file)
	}
}
