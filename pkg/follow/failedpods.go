package follow

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// MaxFailedPods is how many failed pods the output of a Failed Job names;
// the others are counted ("and N more failed pods").
const MaxFailedPods = 5

// maxFailureMessage caps the message of a failed pod, in characters.
const maxFailureMessage = 120

// noFailedPod is said of a Failed Job none of whose pods left a failure to
// show (its pods were deleted, or it failed without any failing, e.g. its
// deadline passed and its running pods were stopped and are gone).
const noFailedPod = "no failed pod left to inspect"

// failedPods returns, among a Job's pods, the failed ones that explain its
// failure, at most limit of them, and how many more there are. It is a
// pure function.
//
// A pod counts when its phase is Failed, or when, not succeeded, one of its
// containers exited with a non-zero code and was restarted (restartPolicy
// OnFailure: such a pod stays Running until the Job gives up on it).
//
// Order: pods not being deleted first (a pod being deleted was usually
// stopped because the Job failed: a consequence, not a cause), then by
// completion index, then the earliest failure first, then by name.
func failedPods(pods []*corev1.Pod, limit int) ([]FailedPod, int) {
	type ranked struct {
		pod   FailedPod
		index int
		at    time.Time
	}
	var all []ranked
	for _, p := range pods {
		if fp, at, ok := describeFailure(p); ok {
			index, _ := podIndex(p)
			all = append(all, ranked{pod: fp, index: index, at: at})
		}
	}
	slices.SortFunc(all, func(a, b ranked) int {
		if a.pod.Deleting != b.pod.Deleting {
			if a.pod.Deleting {
				return 1
			}
			return -1
		}
		return cmp.Or(cmp.Compare(a.index, b.index), a.at.Compare(b.at), cmp.Compare(a.pod.Name, b.pod.Name))
	})
	var out []FailedPod
	for _, r := range all[:min(len(all), limit)] {
		out = append(out, r.pod)
	}
	return out, len(all) - len(out)
}

// describeFailure returns what failed in pod p and when, or false when p
// has not failed (see failedPods).
//
// The container shown is the first (init containers first, then the
// others, in status order) whose current state is a non-zero exit, else
// the first whose last state is. The reason and message are the pod's
// status.reason and status.message when it has a reason (Evicted,
// DeadlineExceeded, ...), else the container's termination reason and
// message, else, for a pod that failed with no such container, the reason
// and message of its DisruptionTarget condition.
func describeFailure(p *corev1.Pod) (FailedPod, time.Time, bool) {
	name, term := failedContainer(p)
	if p.Status.Phase != corev1.PodFailed && (term == nil || p.Status.Phase == corev1.PodSucceeded) {
		return FailedPod{}, time.Time{}, false
	}
	fp := FailedPod{Name: p.Name, Deleting: p.DeletionTimestamp != nil}
	if i, ok := podIndex(p); ok {
		fp.Index = strconv.Itoa(i)
	}
	at := p.CreationTimestamp.Time
	if term != nil {
		fp.Container, fp.ExitCode, fp.Reason, fp.Message = name, term.ExitCode, term.Reason, term.Message
		if !term.FinishedAt.IsZero() {
			at = term.FinishedAt.Time
		}
	}
	if p.Status.Reason != "" {
		fp.Reason = p.Status.Reason
		if p.Status.Message != "" {
			fp.Message = p.Status.Message
		}
	}
	if fp.Reason == "" {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
				fp.Reason, fp.Message = c.Reason, c.Message
			}
		}
	}
	fp.Message = shortMessage(fp.Message)
	return fp, at, true
}

// failedContainer returns the name and termination of the container whose
// failure explains pod p's (see describeFailure), or nil.
func failedContainer(p *corev1.Pod) (string, *corev1.ContainerStateTerminated) {
	statuses := slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses)
	for _, cs := range statuses {
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			return cs.Name, t
		}
	}
	for _, cs := range statuses {
		if t := cs.LastTerminationState.Terminated; t != nil && t.ExitCode != 0 {
			return cs.Name, t
		}
	}
	return "", nil
}

// shortMessage makes a failure message fit on one line. A message of
// several lines is cut to its last non-empty line, "…" before it: with
// terminationMessagePolicy FallbackToLogsOnError the message is the tail of
// the log, whose last line is usually the error. A line longer than
// maxFailureMessage characters is cut, "…" after it.
func shortMessage(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	line := oneLine(lines[len(lines)-1])
	if len(lines) > 1 {
		line = "…" + line
	}
	if r := []rune(line); len(r) > maxFailureMessage {
		line = string(r[:maxFailureMessage-1]) + "…"
	}
	return line
}

// failedPodLine is one failed pod in words:
//
//	pod/NAME [index N] (being deleted): container C exit code X (Reason): Message
//	pod/NAME: Reason: Message                      (no container failed)
func failedPodLine(f FailedPod) string {
	line := "pod/" + f.Name
	if f.Index != "" {
		line += " [index " + f.Index + "]"
	}
	if f.Deleting {
		line += " (being deleted)"
	}
	line += ":"
	switch {
	case f.Container != "":
		line += fmt.Sprintf(" container %s exit code %d", f.Container, f.ExitCode)
		if f.Reason != "" {
			line += " (" + f.Reason + ")"
		}
	case f.Reason != "":
		line += " " + f.Reason
	default:
		line += " failed, no reason given"
	}
	if f.Message != "" {
		line += ": " + f.Message
	}
	return line
}

// moreFailedPods is the line after the failed pods shown, when some are
// not: "and N more failed pods".
func moreFailedPods(n int) string {
	if n == 1 {
		return "and 1 more failed pod"
	}
	return fmt.Sprintf("and %d more failed pods", n)
}
