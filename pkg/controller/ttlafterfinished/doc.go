// Package ttlafterfinished implements jobkeeper's TTL-after-finished
// controller: it deletes finished objects once their time to live has passed.
//
// Jobs behave exactly as in KEP-592 and upstream's controller: a Job with
// spec.ttlSecondsAfterFinished and a Complete=True or Failed=True condition
// expires at that condition's lastTransitionTime plus the TTL, and is then
// deleted with Foreground propagation. Unlike upstream, the delete carries the
// UID and resourceVersion of the cached Job as preconditions, so the common
// case costs one API call; only when the apiserver reports a conflict does the
// controller read the live object and decide again (see
// docs/ttl-after-finished.md for the safety argument).
//
// Beyond upstream:
//   - Pods opt in with the annotation jobkeeper.dev/ttl-seconds-after-finished;
//     a Pod is finished in phase Succeeded or Failed, at the latest container
//     finishedAt (see podFinishTime for the fallbacks). Pods controlled by a
//     Job are left to the Job.
//   - TTLPolicy objects (jobkeeper.dev/v1alpha1) give finished objects of any
//     kind a TTL for success and one for failure, and a keepLast history
//     limit per group. The policy engine (compiling policies, reading
//     "finished, how and when" for Jobs, Pods and custom resources alike,
//     choosing among policies, ranking history) is the pure package policy;
//     this package owns informers, queues and deletions. The controller
//     starts and stops trimmed dynamic informers for the target kinds as
//     policies come and go.
//
// Precedence: an object's own TTL (the Job field, else the annotation, else
// a policy's ownTTL field) wins; among live policies that consider an object
// finished and have a TTL for its outcome, the longest TTL wins, ties going
// to the policy whose name sorts first. The winning policy also decides
// propagation. Dry-run policies are evaluated on their own and never change
// what live policies do. A history limit deletes an object beyond the last N
// of its group whatever its TTL.
//
// The controller has four queues: ttl_jobs_to_delete (as upstream, keyed by
// namespace/name), ttl_objects_to_delete (Pods and custom resources, keyed by
// resource and namespace/name), ttl_history_limits (policy, namespace and
// group) and ttl_policies (policy names).
package ttlafterfinished
