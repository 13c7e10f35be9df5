// Package localpath is the volume provisioner of `jobkeeper up`: a default
// StorageClass, "standard", whose PersistentVolumeClaims are given new
// PersistentVolumes backed by directories under one root on this machine,
// as kind, k3d and minikube give theirs with rancher's local-path
// provisioner.
//
// The controller is sig-storage-lib-external-provisioner's ProvisionController,
// the library external provisioners are written with: upstream's
// PersistentVolume controller (run beside it by `up`) marks a claim of the
// class for this provisioner, the ProvisionController calls Provision, which
// makes <root>/<pv-name> and returns a hostPath PersistentVolume with the
// claim's capacity, access modes and a node affinity to the node, pre-bound
// to the claim; the PersistentVolume controller completes the binding. When
// the claim is deleted the volume is Released and, by the reclaim policy
// Delete, the ProvisionController calls Delete, which removes the directory,
// then deletes the PersistentVolume.
//
// The class binds at once (volumeBindingMode Immediate), not on the first
// consumer as kind's does: with one node, waiting for a pod cannot choose a
// better place, and binding at once needs no scheduler step (the node
// agent's binder would have to play the scheduler's volume binding).
package localpath
