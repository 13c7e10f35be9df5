package follow

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Outcome is how far a followed Job got.
type Outcome int

// Outcomes, in the order a Job can reach them.
const (
	// Running: not finished (pending, running or suspended).
	Running Outcome = iota
	// Complete: the Job has the condition Complete=True.
	Complete
	// Failed: the Job has the condition Failed=True.
	Failed
	// Deleted: the Job was deleted (or replaced by another of the same
	// name) before it finished.
	Deleted
)

// String returns the outcome as the commands print it.
func (o Outcome) String() string {
	switch o {
	case Complete:
		return "complete"
	case Failed:
		return "failed"
	case Deleted:
		return "deleted"
	default:
		return "running"
	}
}

// Exit codes of `jobkeeper follow` and `jobkeeper run`.
const (
	// ExitComplete: the Job completed.
	ExitComplete = 0
	// ExitFailed: the Job failed.
	ExitFailed = 1
	// ExitError: the Job could not be created or followed (bad arguments,
	// file or kubeconfig, Job not found, API errors).
	ExitError = 2
	// ExitDeleted: the Job was deleted before it finished.
	ExitDeleted = 3
	// ExitInterrupted: interrupted by Ctrl-C (SIGINT); SIGTERM gives 143,
	// the shell's 128+signal convention.
	ExitInterrupted = 130
)

// ExitCode is the exit code for a followed Job that ended with o (Running,
// which a finished follow never returns, maps to ExitError).
func (o Outcome) ExitCode() int {
	switch o {
	case Complete:
		return ExitComplete
	case Failed:
		return ExitFailed
	case Deleted:
		return ExitDeleted
	default:
		return ExitError
	}
}

// IndexPhase is where one completion index of an Indexed Job stands.
type IndexPhase uint8

// Index phases. An index is succeeded or failed as the Job's status says
// (completedIndexes, failedIndexes); otherwise running while one of its pods
// runs, and pending before that and between retries.
const (
	IndexPending IndexPhase = iota
	IndexRunning
	IndexSucceeded
	IndexFailed
)

// String names the phase.
func (p IndexPhase) String() string {
	switch p {
	case IndexRunning:
		return "running"
	case IndexSucceeded:
		return "succeeded"
	case IndexFailed:
		return "failed"
	default:
		return "pending"
	}
}

// Condition is one of the Job's status conditions.
type Condition struct {
	// Type is the condition type (Complete, Failed, Suspended, ...).
	Type string
	// Status is True, False or Unknown.
	Status string
	// Reason is the machine-readable reason (CompletionsReached, ...).
	Reason string
	// Message is the human-readable message.
	Message string
	// Since is the last transition time.
	Since time.Time
}

// Warning is a Warning event about the Job or one of its pods.
type Warning struct {
	// UID is the Event's UID.
	UID types.UID
	// Object names what the event is about: "job/NAME" or "pod/NAME".
	Object string
	// Index is the pod's completion index, if it has one.
	Index string
	// Reason and Message are the event's.
	Reason, Message string
	// Count is how many times the event was seen (1 for a single one).
	Count int32
	// Last is when it was last seen.
	Last time.Time
}

// State is what follow shows of a Job at one instant. Build computes it.
type State struct {
	// Namespace, Name and UID identify the Job.
	Namespace, Name string
	UID             types.UID
	// Indexed is true for completionMode Indexed.
	Indexed bool
	// Completions is spec.completions; WorkQueue is true when it is unset
	// (the Job completes when any pod succeeds and none is active).
	Completions int32
	WorkQueue   bool
	// Parallelism is spec.parallelism.
	Parallelism int32
	// ManagedBy is spec.managedBy, when set.
	ManagedBy string
	// Succeeded, Failed, Active, Ready and Terminating are the status
	// counters (ready and terminating are 0 when the controller leaves them
	// unset).
	Succeeded, Failed, Active, Ready, Terminating int32
	// Suspended is true when spec.suspend is set.
	Suspended bool
	// Deleting is true once the Job has a deletion timestamp.
	Deleting bool
	// Started is status.startTime (or the creation time before it is set).
	Started time.Time
	// Elapsed is the time from Started to the Job's end, or to now.
	Elapsed time.Duration
	// Conditions are the Job's conditions, in the Job's order.
	Conditions []Condition
	// Indexes holds the phase of each completion index, for Indexed Jobs.
	Indexes []IndexPhase
	// Warnings are the Warning events of the Job and its pods, oldest first.
	Warnings []Warning
	// Outcome, Reason and Message: how the Job ended, with the reason and
	// message of its Complete or Failed condition.
	Outcome Outcome
	Reason  string
	Message string
	// FailedPods are, once the Job has Failed, the failed pods of it still
	// present that explain the failure, at most MaxFailedPods (see
	// failedPods for which and in what order); MoreFailedPods counts the
	// others. Both are empty before the Job failed and for other outcomes.
	FailedPods     []FailedPod
	MoreFailedPods int
}

// FailedPod is one failed pod of a Failed Job, with what `kubectl describe
// pod` would show of its failure.
type FailedPod struct {
	// Name is the pod's name.
	Name string
	// Index is its completion index ("" for a NonIndexed Job).
	Index string
	// Container is the container whose failure is shown: the first (init
	// containers first) that exited with a non-zero code, in its current
	// state or, restarted since, its last one. Empty when none did, e.g. a
	// pod evicted or rejected before its containers ran.
	Container string
	// ExitCode is that container's exit code (when Container is set).
	ExitCode int32
	// Reason is the pod's status.reason (Evicted, DeadlineExceeded, ...)
	// when set, else the container's termination reason (Error, OOMKilled,
	// ContainerCannotRun, ...).
	Reason string
	// Message goes with Reason: the pod's status.message, or the
	// container's termination message; shortened to one line of at most
	// maxFailureMessage characters.
	Message string
	// Deleting is true when the pod is being deleted: usually a pod the Job
	// controller stopped because the Job failed, not one that caused it.
	Deleting bool
}

// Finished reports whether the Job reached an outcome.
func (s State) Finished() bool { return s.Outcome != Running }

// Line is one line of a container's log.
type Line struct {
	// Pod is the pod's name, Container the container's.
	Pod, Container string
	// Index is the pod's completion index ("" for a NonIndexed Job).
	Index string
	// Prefix labels the line: "[index N]" for an Indexed Job's pod,
	// "[pod/NAME]" otherwise, with "/CONTAINER" added inside the brackets
	// when the pod has several containers.
	Prefix string
	// Text is the line, without its newline.
	Text string
}
