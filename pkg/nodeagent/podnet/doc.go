// Package podnet is the node's side of the pod network as root: a bridge
// holding the pod CIDR's gateway address, a veth pair per pod (its peer
// is the pod's eth0, with the pod's address and a default route through
// the gateway), masquerade for what pods send outside the CIDR
// (nftables), and the pods' addresses (ipam.go).
//
// Everything happens in one network namespace, the node's: the agent's
// own, or one given (tests use a namespace of their own, so nothing of the
// host's is touched). Pods' namespaces are given as handles; podnet never
// creates one: the sandbox that holds it does.
//
// A pod keeps its address for its whole life, across agent restarts: the
// allocation is a file in the state directory written before the address
// is configured, and Attach for a pod that has one reuses it. Detach
// removes the pod's veth (destroying its namespace does too) and frees
// its address; Release frees the addresses of pods that are gone.
package podnet
