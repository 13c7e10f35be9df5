// Package policy is the TTLPolicy engine of the TTL-after-finished
// controller, as pure functions: it compiles a jobkeeper.dev/v1alpha1
// TTLPolicy into a Policy, reads "finished, how, and when" from an object of
// any kind (one Rule interface, with built-in rules for batch/v1 Job and v1
// Pod and a matcher rule for everything else), picks the policy whose TTL
// applies to an object, and ranks a group's finished objects for keepLast
// history limits.
//
// Nothing here talks to the apiserver or keeps state; the controller in the
// parent package owns informers, queues and deletions.
package policy
