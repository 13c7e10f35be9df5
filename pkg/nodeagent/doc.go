// Package nodeagent is jobkeeper's local node: what a kubelet does for one
// machine, small enough for `jobkeeper up` on a laptop or a CI runner.
//
// An Agent (New, then Run):
//
//   - registers a Node (capacity and allocatable: the host's CPUs and
//     memory, Options.MaxPods pods; Ready; addresses InternalIP
//     (Options.NodeIP, 127.0.0.1 by default) and Hostname; the log
//     endpoint's port in daemonEndpoints) and renews its
//     Lease in kube-node-lease (node.go, lease.go);
//   - binds pods that have no node and the default scheduler, oldest first,
//     through pods/binding while the node has room (pod count and CPU and
//     memory requests) and once its claims are bound, doing kube-scheduler's
//     volume binding for WaitForFirstConsumer classes (selected-node
//     annotation, pre-bound local volumes, ReadWriteOncePod); a pod that
//     cannot go to the node gets PodScheduled=False with reason
//     Unschedulable and the scheduler's message (package binder);
//   - prepares pod volumes and refreshes configMap, secret, downwardAPI and
//     projected ones every Options.SyncFrequency with the kubelet's atomic
//     layout (package volume);
//   - runs every pod bound to the node with one worker goroutine per pod
//     (worker.go) and a runtime (process or simulated);
//   - writes pod status through the status subresource, coalescing writes
//     per pod, and confirms graceful deletions with a zero-grace delete once
//     the pod is terminal (package status);
//   - serves /containerLogs, exec, attach and portForward over TLS to the
//     apiserver only (package server);
//   - pulls images and collects unused ones (package imagemanager);
//   - decides, field by field, what it does with a pod's security context
//     and resources: honoured, the pod refused at admission, or run with
//     one NotEnforced Warning event (podconfig.DecideFeatures, the table of
//     docs/node-agent.md); composes each container's runtime spec
//     (containerspec.go over the pure functions of podconfig: env,
//     resolv.conf, hosts, hostname, user), gives volumes the pod's fsGroup
//     (package volume) and reads each attempt's termination message
//     (package status).
//
// Layout, as the kubelet is split: this package is the agent's loop (the
// Agent, its pod workers and their sync, admission, node status and Lease,
// graceful shutdown and restart) and the only one that knows the others.
// Below it, each owning one concern and importing downwards only, none of
// them this package: podconfig (container configuration as pure
// functions), lifecycle (the containers' state machine), cgroup (the pods'
// and containers' cgroups, as root), status, volume,
// prober, imagemanager, binder, server, and runtime with its
// implementations. The lower packages get what they need from the agent
// as a Config of values and functions, never the Agent itself.
//
// Container lifecycle (package lifecycle: ContainerState, changed only by
// the pure Transition function; PlanPod decides whose turn it is):
//
//	            config error (retried at notBefore)
//	              ┌────┐                                 pod finishing, or a
//	              ▼    │       started              startup or liveness probe
//	──────▶ ┌─────────┐┘ ─────────────────▶ ┌─────────┐     failed: Stop     ┌──────────┐
//	        │ waiting │                     │ running │ ───────────────────▶ │ stopping │
//	        └─────────┘          ┌────────▶ └─────────┘                      └──────────┘
//	          │     │            │ started       │ exit                    exit │
//	          │     │ start      │ (notBefore    ▼                              │
//	          │     │ failed     │  reached) ╔═════════╗ ◀── only after a ──────┤
//	          │     └────────────┼─────────▶ ║ restart ║   failed probe         │
//	          │                  │           ║ policy? ║                        │
//	          │           ┌──────────┐ ◀─yes─╚═════════╝                        │
//	          │           │ back-off │            │ no                          │
//	          │           └──────────┘            ▼                             │
//	          │                 │           ┌────────┐ ◀────────────────────────┘
//	          └─────────────────┴─────────▶ │ exited │
//	               pod finishing            └────────┘
//
// A container with a postStart hook passes through starting on its way
// from started to running (hook.go, over lifecycle's states):
//
//	waiting, back-off ──started──▶ starting ──postStart returned──▶ running
//	                                  │
//	                                  │ postStart failed, or pod finishing: Stop
//	                                  ▼
//	                               stopping ──exit──▶ restart policy? (exit code)
//
// The postStart hook runs in a goroutine right after the process started;
// its result comes back as an event, as probe results do. Until it returns
// the API shows the container as before its start (the kubelet writes no
// status while its sync waits for the hook) and no probe runs. A failed
// hook (FailedPostStartHook event) kills the container, and its exit code
// decides on a restart, as after a crash. Every Stop with a grace period
// runs the preStop hook first (stopping, hook preStop), then the stop
// signal with what is left of the grace period: the hook's whole seconds
// deducted, 2 seconds at least. A hook still running at the end of the
// grace period is abandoned; one no longer wanted (the container exited,
// the pod finished during postStart) is ended.
//
// The restart policy (lifecycle.ShouldRestart, the kubelet's ContainerShouldRestart with
// ContainerRestartRules): a sidecar (init container with restartPolicy
// Always) always restarts; a regular init container never after success;
// otherwise the container's restartPolicyRules in order (the first whose
// exitCodes match decides; action Restart restarts), else the container's
// own restartPolicy, else the pod's. A container killed on a failed probe
// restarts whatever its exit code unless its policy (the container's, else
// the pod's) is Never. Back-off is 0, then 10s doubling to 5m. The pod is
// Succeeded or Failed only once no container will run again.
//
// Probes (probe.go: the loop; package prober: exec, httpGet, tcpSocket,
// grpc): a running container is "started" once its startup probe passed
// (at once without one); only then do its liveness and readiness probes
// run. It is "ready" while started and its readiness probe last crossed its
// success threshold (at once without one). A sidecar that started once is
// initialized.
//
// Per pod (lifecycle.PlanPod): init containers one at a time in order (a sidecar must
// have started, a regular one must have succeeded), then all main
// containers. Ephemeral containers (kubectl debug) are taken on as they
// appear in the spec (worker.addEphemerals) and started at once, even during
// init; they never restart and count for neither phase nor readiness. The pod is finishing once it is deleted, past
// activeDeadlineSeconds, an init container failed for good, or every main
// container exited for good; then main containers stop at once and sidecars
// last-first, each once no main container and no later sidecar runs (or
// the grace period is over): SIGTERM, grace period, SIGKILL.
//
// Stop of the agent (shutdown.go): a clean stop (Run's context ends) is a
// graceful node shutdown: every pod not finished gets DisruptionTarget
// (TerminationByKubelet), is stopped with its grace period capped to
// Options.ShutdownGracePeriod and ends Failed with reason Terminated; with
// Options.KeepRunningOnStop the agent leaves containers running instead.
//
// Restart of the agent (recover.go): a crash is a kubelet restart, not a
// node reboot. The process runtime's sandboxes outlive the agent
// (runtime.Adopter); when a worker starts it looks at each container's
// attempts in their state directories and takes the running one over
// (evAdopted: same ID, start time and restart count, probes resume), or
// records the end of those that ended meanwhile with their real exit codes
// (evEndedAway). A container the API shows running that left nothing (one
// with stdin or a terminal, or in a PID namespace another sandbox held;
// the simulated runtime; a reboot) is recorded as terminated with exit code
// 137 and reason ContainerStatusUnknown, and the restart policy decides.
//
// Security: whoever can create pods in the control plane runs commands on
// this host as the user running the agent.
package nodeagent
