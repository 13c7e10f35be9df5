// Package status owns pod status on the node, as the kubelet's status
// manager and its status generation do:
//
//   - BuildStatus turns a pod worker's snapshot of its containers (PodView,
//     ContainerView) into the API's PodStatus: phase, conditions, container
//     states, the node shutdown's disruption (status.go);
//   - a terminated container's message, from its termination message file
//     or the end of its log, within the kubelet's limits (termination.go);
//   - Manager writes the statuses through the status subresource,
//     coalescing the writes of each pod (the latest status wins, one write
//     in flight per pod), and confirms a graceful deletion with a
//     zero-grace delete once the pod is terminal (manager.go). FieldManager
//     names every write the agent makes.
//
// It may not drive containers or read the agent's state: it is handed
// snapshots, results and pods. Of the node agent's packages it imports
// lifecycle (the kinds and results a snapshot holds), podconfig (the node's
// address), runtime and logfile (a log's end).
package status
