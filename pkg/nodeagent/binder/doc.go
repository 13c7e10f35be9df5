// Package binder plays kube-scheduler for the one local node: it binds
// pods that have no node and the default scheduler name, oldest first,
// through pods/binding while the node has room (pod count, CPU and memory
// requests: fit.go) and once their claims are bound, doing the scheduler's
// volume binding for WaitForFirstConsumer classes (selected-node
// annotation, pre-bound local volumes, ReadWriteOncePod:
// volumebinding.go, binder_volumes.go). A pod that cannot go to the node
// gets PodScheduled=False with reason Unschedulable and the scheduler's
// message, and the scheduler's events (binder.go).
//
// It may not run pods, write any status but PodScheduled, or read the
// agent's state but through Config: the agent's pod lister, and Workers
// for what the pods it runs use. It imports no other package of the node
// agent.
package binder
