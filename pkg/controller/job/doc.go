// Package job implements jobkeeper's Job controller: a drop-in replacement
// for kube-controller-manager's, with the same observable behaviour for the
// Jobs it manages.
//
// # Who is managed
//
// A Job is managed when spec.managedBy equals Options.ManagedBy or, with
// Options.ManageUnclaimedJobs, when it has no managedBy or the upstream value
// kubernetes.io/job-controller. Nothing of any other Job is ever written.
//
// # How a sync works
//
// Each sync of a managed, unfinished Job:
//  1. lists the Job's pods from the informer (adopting and releasing pods
//     through the selector; adoption adds the tracking finalizer);
//  2. counts what happened (syncContext): active, ready and terminating pods,
//     newly succeeded and failed pods that still carry the
//     batch.kubernetes.io/job-tracking finalizer, succeeded indexes;
//  3. decides whether the Job has failed (backoffLimit, activeDeadlineSeconds)
//     or succeeded, or else creates or deletes pods (manage.go) honouring
//     expectations, suspend and the exponential re-creation backoff;
//  4. tracks finished pods with finalizers (tracking.go, KEP-2307): UIDs go
//     to status.uncountedTerminatedPods in one status write, then the
//     finalizers are removed, then the counters move in a second write; the
//     terminal condition is written only when nothing is uncounted or
//     terminating, after the interim FailureTarget or SuccessCriteriaMet.
//
// The invariant: a pod is counted in status.succeeded/failed exactly once,
// because it is counted only after its finalizer is gone and its UID was in
// uncountedTerminatedPods (or, for Indexed Jobs, its index is in
// completedIndexes) before the finalizer was removed. A crash between any two
// writes is recovered by the next sync from the API state alone.
//
// Orphaned pods (Job deleted, finished, or no controller) lose their
// finalizer through a separate queue (orphan.go).
//
// Every batch/v1 JobSpec policy upstream honours is supported (policies.go):
// podFailurePolicy, backoffLimitPerIndex with maxFailedIndexes,
// successPolicy, and podReplacementPolicy (TerminatingOrFailed and Failed).
package job
