// Package lifecycle is the state machine of a pod's containers, as pure
// functions the pod workers drive:
//
//   - ContainerState, changed only by Transition on an Event (lifecycle.go),
//     which returns the Actions the worker carries out (record a status,
//     stop, run a hook, start probes);
//   - PlanPod decides whose turn it is in a pod: init containers in order,
//     sidecars, main containers, ephemeral ones, and the order in which a
//     finishing pod stops them (podplan.go);
//   - ShouldRestart and RestartPolicyOf are the kubelet's restart policy
//     with restartPolicyRules (restart.go), RestartBackoff its crash loop
//     back-off (backoff.go);
//   - the hooks and probes an attempt has (attemptkinds.go), and the
//     reasons and messages the agent writes for them
//     (lifecyclereasons.go).
//
// It may not start or stop anything, read a clock, talk to the apiserver or
// record events: time and what happened come in as arguments, decisions go
// out as values. Of the node agent's packages it imports only runtime, for
// an attempt's result.
package lifecycle
