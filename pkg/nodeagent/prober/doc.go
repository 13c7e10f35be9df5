// Package prober runs a probe's or a lifecycle hook's handler once
// against a container, as the kubelet's prober does: exec in the
// container's sandbox, httpGet, tcpSocket and grpc (check.go: CheckFor),
// with the kubelet's outcomes (Success, Warning, Failure, Error) and the
// output it puts in events.
//
// It may not schedule probes, count thresholds, run hooks in order or act
// on a result: the pod workers do (probe.go and hook.go in the agent). It
// imports no node agent package above it.
package prober
