package follow

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// Plain is the Sink for output that is not a terminal: one timestamped
// line per change, never a redraw, so CI logs and pipes read well.
//
//	2026-01-02T15:04:05Z job demo/big: Indexed, 200 completions, parallelism 20
//	2026-01-02T15:04:06Z progress: succeeded 0/200, failed 0, active 20, ready 20, terminating 0 (elapsed 1s)
//	2026-01-02T15:04:06Z indexes: running 0-19; pending 20-199
//	2026-01-02T15:04:09Z warning pod/big-3-x7k2p [index 3] BackOff: Back-off restarting failed container
//	2026-01-02T15:04:30Z condition Complete=True (CompletionsReached): Reached expected number of succeeded pods
//	2026-01-02T15:04:30Z job demo/big complete: 200/200 succeeded in 25s
//
// A Failed Job's last lines name its failed pods (failureLines):
//
//	2026-01-02T15:04:30Z condition Failed=True (FailedIndexes): Job has failed indexes
//	2026-01-02T15:04:30Z failed pod/big-3-x7k2p [index 3]: container main exit code 2 (Error): no input
//	2026-01-02T15:04:30Z failed pod/big-7-q9z8m [index 7]: container main exit code 137 (OOMKilled)
//	2026-01-02T15:04:30Z job demo/big failed after 25s: FailedIndexes: Job has failed indexes
//
// Log lines are printed as they come, prefixed with their pod or index and
// without a timestamp of their own.
type Plain struct {
	// w receives the lines.
	w io.Writer
	// clock stamps the lines.
	clock clock.PassiveClock
	// maxRanges caps the ranges per phase on an indexes line.
	maxRanges int
	// mu serialises writes and guards the fields below.
	mu sync.Mutex
	// seen is true once the first State was printed; last is that State.
	seen bool
	last State
	// indexes is the last indexes line printed.
	indexes string
	// conditions holds, by type, the last condition line printed.
	conditions map[string]string
	// warnings holds the count printed for each Warning event.
	warnings map[types.UID]int32
	// done is true once the final line was printed.
	done bool
}

var _ Sink = (*Plain)(nil)

// NewPlain returns a Plain sink writing to w, stamping lines with c's time
// (RFC 3339).
func NewPlain(w io.Writer, c clock.PassiveClock) *Plain {
	return &Plain{w: w, clock: c, maxRanges: 10, conditions: map[string]string{}, warnings: map[types.UID]int32{}}
}

// State prints what changed since the previous State.
func (p *Plain) State(s State) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done || s.Name == "" {
		return
	}
	first := !p.seen
	if first {
		p.printf("job %s/%s: %s", s.Namespace, s.Name, describeSpec(s))
	}
	if !first && s.Suspended != p.last.Suspended {
		if s.Suspended {
			p.printf("job suspended (spec.suspend=true): following on")
		} else {
			p.printf("job resumed (spec.suspend=false)")
		}
	}
	if s.Deleting && (first || !p.last.Deleting) {
		p.printf("job is being deleted")
	}
	if first || counters(s) != counters(p.last) {
		p.printf("progress: %s (elapsed %s)", counters(s), formatDuration(s.Elapsed))
	}
	if s.Indexed {
		if line := SummarizeIndexes(s.Indexes, p.maxRanges); line != p.indexes {
			p.indexes = line
			p.printf("indexes: %s", line)
		}
	}
	for _, c := range s.Conditions {
		line := conditionLine(c)
		if p.conditions[c.Type] != line {
			p.conditions[c.Type] = line
			p.printf("condition %s", line)
		}
	}
	for _, w := range s.Warnings {
		if p.warnings[w.UID] >= w.Count {
			continue
		}
		p.warnings[w.UID] = w.Count
		p.printf("warning %s", warningLine(w))
	}
	p.seen, p.last = true, s
	if s.Finished() {
		p.done = true
		for _, line := range failureLines(s, "failed ") {
			p.printf("%s", line)
		}
		p.printf("%s", resultLine(s))
	}
}

// Log prints a log line with its prefix.
func (p *Plain) Log(l Line) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "%s %s\n", l.Prefix, l.Text)
}

// printf prints one timestamped line; p.mu is held.
func (p *Plain) printf(format string, args ...any) {
	fmt.Fprintf(p.w, "%s %s\n", p.clock.Now().Format(time.RFC3339), oneLine(fmt.Sprintf(format, args...)))
}

// describeSpec is the spec of the Job in words: completion mode,
// completions, parallelism, and suspension and managedBy when set.
func describeSpec(s State) string {
	mode := "NonIndexed"
	if s.Indexed {
		mode = "Indexed"
	}
	completions := fmt.Sprintf("%d completions", s.Completions)
	if s.WorkQueue {
		completions = "no completion count (work queue)"
	}
	parts := []string{mode, completions, fmt.Sprintf("parallelism %d", s.Parallelism)}
	if s.Suspended {
		parts = append(parts, "suspended")
	}
	if s.ManagedBy != "" {
		parts = append(parts, "managed by "+s.ManagedBy)
	}
	return strings.Join(parts, ", ")
}

// counters is the progress of the Job in words, without the elapsed time.
func counters(s State) string {
	succeeded := fmt.Sprintf("%d/%d", s.Succeeded, s.Completions)
	if s.WorkQueue {
		succeeded = fmt.Sprint(s.Succeeded)
	}
	return fmt.Sprintf("succeeded %s, failed %d, active %d, ready %d, terminating %d",
		succeeded, s.Failed, s.Active, s.Ready, s.Terminating)
}

// conditionLine is "Type=Status (Reason): Message".
func conditionLine(c Condition) string {
	line := c.Type + "=" + c.Status
	if c.Reason != "" {
		line += " (" + c.Reason + ")"
	}
	if c.Message != "" {
		line += ": " + c.Message
	}
	return line
}

// warningLine is "OBJECT [index N] Reason: Message (xCount)".
func warningLine(w Warning) string {
	line := w.Object
	if w.Index != "" {
		line += " [index " + w.Index + "]"
	}
	line += " " + w.Reason + ": " + w.Message
	if w.Count > 1 {
		line += fmt.Sprintf(" (x%d)", w.Count)
	}
	return line
}

// resultLine is the last line printed for a finished Job.
func resultLine(s State) string {
	job := "job " + s.Namespace + "/" + s.Name
	switch s.Outcome {
	case Complete:
		if s.WorkQueue {
			return fmt.Sprintf("%s complete: %d succeeded in %s", job, s.Succeeded, formatDuration(s.Elapsed))
		}
		return fmt.Sprintf("%s complete: %d/%d succeeded in %s", job, s.Succeeded, s.Completions, formatDuration(s.Elapsed))
	case Failed:
		return fmt.Sprintf("%s failed after %s: %s: %s", job, formatDuration(s.Elapsed), s.Reason, s.Message)
	case Deleted:
		return job + " was deleted before it finished"
	}
	return job + " " + s.Outcome.String()
}

// failureLines are the lines that name a Failed Job's failed pods: one per
// pod shown (failedPodLine, after podPrefix), "and N more failed pods"
// when some are not, or noFailedPod when none is left. Nil for other
// outcomes.
func failureLines(s State, podPrefix string) []string {
	if s.Outcome != Failed {
		return nil
	}
	if len(s.FailedPods) == 0 && s.MoreFailedPods == 0 {
		return []string{noFailedPod}
	}
	var lines []string
	for _, f := range s.FailedPods {
		lines = append(lines, podPrefix+failedPodLine(f))
	}
	if s.MoreFailedPods > 0 {
		lines = append(lines, moreFailedPods(s.MoreFailedPods))
	}
	return lines
}

// formatDuration rounds to the second ("1m2s"), or to the tenth of a
// second under ten seconds ("1.5s").
func formatDuration(d time.Duration) string {
	if d < 10*time.Second {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// oneLine folds the line breaks of messages into spaces.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\r", "")), " ")
}
