// Package status writes pod status for the node agent, as the kubelet's
// status manager does: through the status subresource, coalescing the
// writes of each pod (the latest status wins, one write in flight per
// pod), and confirming a graceful deletion with a zero-grace delete once
// the pod is terminal (manager.go). FieldManager names every write the
// agent makes.
//
// It may not compute a status (the pod workers do) or read any state of
// the agent: it is handed statuses and pods. It imports no other package of
// the node agent.
package status
