// Package follow watches one Job until it finishes and shows its progress:
// what `jobkeeper follow JOB` and `jobkeeper run -f job.yaml` do.
//
// It is split the way a controller is:
//
//   - model.go, indexes.go, warnings.go: pure functions from a Job, its pods
//     and Warning events to a State (progress, counters, elapsed time, the
//     per-index map of an Indexed Job, conditions, warnings, outcome),
//     table-tested without a cluster;
//   - follower.go: gathers those inputs with informers on any clientset
//     (a filtered Job informer, the Job's pods by its selector, the
//     namespace's Warning events) and hands every changed State to a Sink
//     until the Job is Complete, Failed or deleted, or the context ends;
//   - logs.go: with Options.Logs, one log stream per started container,
//     resumed after a cut without repeating lines (timestamps and
//     sinceTime), each line labelled with its pod or completion index;
//   - plain.go and tui.go: the two Sinks. Plain prints timestamped lines,
//     one per change (for CI logs and pipes); TUI redraws a live view in
//     place on a terminal (charmbracelet's bubbletea, bubbles/progress and
//     lipgloss).
//   - failedpods.go: for a Failed Job, the failed pods that explain it
//     (pod, index, container, exit code, reason, termination message),
//     read from one LIST of the Job's pods once it failed;
//   - manifest.go: reading the one batch/v1 Job of a file, for `run -f`.
//
// Outcomes and the exit codes the commands map them to:
//
//	Running ──► Complete (Complete=True)             exit 0
//	        ├─► Failed   (Failed=True)               exit 1, reason, message and failed pods printed
//	        └─► Deleted  (gone before finishing)     exit 3
//	(Ctrl-C or SIGTERM while following: exit 130 or 143; errors: exit 2)
//
// A suspended Job is shown as such and followed on: it may be resumed.
package follow
