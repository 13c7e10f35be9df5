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
//  0. waits until the informers show the controller's own last writes for
//     the Job (read-your-writes, consistency.go);
//  1. lists the Job's pods from the informer (adopting and releasing pods
//     through the selector; adoption adds the tracking finalizer);
//  2. counts what happened (syncContext): active, ready and terminating pods,
//     newly succeeded and failed pods that still carry the
//     batch.kubernetes.io/job-tracking finalizer, succeeded and failed
//     indexes;
//  3. decides whether the Job is heading to an end (decideFinish, end_decision.go),
//     or else creates or deletes pods (manage.go) honouring expectations,
//     suspend and the exponential re-creation backoff;
//  4. tracks finished pods with finalizers (tracking.go, KEP-2307): the plan
//     (planTracking) puts UIDs in status.uncountedTerminatedPods with the
//     interim FailureTarget/SuccessCriteriaMet condition in one status
//     write, then the finalizers are removed, then a second write moves the
//     released UIDs into the counters and, when nothing is uncounted or
//     terminating, sets the terminal Complete/Failed condition. Never
//     earlier: a Job showing Complete or Failed has every pod counted and
//     released (KEP-2307's order, as upstream).
//
// The invariant: a pod is counted in status.succeeded/failed exactly once,
// because it is counted only after its finalizer is gone and its UID was in
// uncountedTerminatedPods (or, for Indexed Jobs, its index is in
// completedIndexes) before the finalizer was removed. A crash between any two
// writes is recovered by the next sync from the API state alone.
//
// # When a sync runs, and its share of the API budget
//
// A new Job or a spec change syncs at once. A pod event or a status-only
// update syncs at once while the Job's wake-ups are few, and after
// Options.SyncBatchPeriod in a burst (batching.go), so that one-pod Jobs
// never wait for the batch and big Jobs batch as upstream. A sync's API
// requests carry the Job's key as their flow (pkg/fairqueue): with the
// manager's fair rate limiter in front of the client, Jobs take turns for
// the QPS budget instead of queueing behind a big Job's pod creations.
// Recorded events are written as the flow EventFlow (events.go), which the
// manager gives a background share, so they use what the Jobs leave.
//
// A finished Job is forgotten, and any pod of it still holding the
// finalizer is released (finished_cleanup.go). Orphaned pods (Job deleted,
// finished, or no controller) lose their finalizer through a separate queue
// (orphan.go).
//
// Every batch/v1 JobSpec policy upstream honours is supported (policies.go):
// podFailurePolicy, backoffLimitPerIndex with maxFailedIndexes,
// successPolicy, and podReplacementPolicy (TerminatingOrFailed and Failed).
package job
