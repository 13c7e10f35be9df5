// Package prober runs probes and lifecycle hooks against a container, as
// the kubelet's prober and handler runner do:
//
//   - CheckFor runs a probe's handler once: exec in the container's
//     sandbox, httpGet, tcpSocket and grpc, with the kubelet's outcomes
//     (Success, Warning, Failure, Error) and the output it puts in events
//     (check.go);
//   - ProbeRun is one probe's loop: initialDelaySeconds, periodSeconds,
//     the thresholds, the Unhealthy and ProbeWarning events, and a report
//     when a threshold is crossed (probe.go);
//   - HookRun runs a postStart or preStop hook's handler once: exec,
//     httpGet (with the kubelet's HTTPS to HTTP fallback) and sleep, with
//     the kubelet's failure messages (hook.go).
//
// It may not decide which probes and hooks an attempt has, when they
// start, or what a result does to the container: the pod workers do (in
// the agent's probe.go and hook.go, over package lifecycle). Events and
// results go out through the functions a run is given. Of the node agent's
// packages it imports podconfig (variable expansion), lifecycle (the kinds
// of probes and hooks, the hooks' reasons) and runtime.
package prober
