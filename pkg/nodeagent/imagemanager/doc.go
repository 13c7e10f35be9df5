// Package imagemanager pulls images into the node's image store for the
// pod workers, as the kubelet's image manager does (puller.go): one pull
// per reference at a time, a few pulls at once, with the pod's image pull
// secrets and then the user's own credentials, the kubelet's per pod and
// image pull back-off (10s doubling to 5m) and its events; and it deletes
// unused images when the store's disk fills (CollectGarbage, the kubelet's
// image garbage collection).
//
// It may not decide whether a container pulls (podconfig.DecidePull does),
// hold images for containers or change a pod's status: the pod workers do.
// What it needs from the agent comes in Config. It imports no node agent
// package.
package imagemanager
