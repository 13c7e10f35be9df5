// Package runtime defines the small contract between the node agent's pod
// workers and the things that actually "run" a container.
//
// A Runtime starts one container attempt from a fully resolved Spec (the pod
// worker has already expanded the command, resolved the environment and
// chosen the log file) and returns a Handle. The worker only ever asks a
// Handle three things: when did it finish (Done), how did it finish (Result),
// and to stop it (Stop, graceful then forceful). Two implementations exist:
// package process (pkg/nodeagent/process) runs host processes, package
// simulated (pkg/nodeagent/simulated) runs nothing and
// takes the outcome from pod annotations.
package runtime
