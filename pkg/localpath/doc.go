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
// The class binds on the first consumer (volumeBindingMode
// WaitForFirstConsumer), as kind's does: a claim stays Pending, with the
// PersistentVolume controller's WaitForFirstConsumer event, until a pod uses
// it; then the node agent's binder, which schedules pods in place of
// kube-scheduler, gives the claim the volume.kubernetes.io/selected-node
// annotation, as the scheduler's volume binding does, which makes the
// PersistentVolume controller hand the claim to this provisioner; the pod is
// bound to the node once its claim is. A class of the user's with binding
// Immediate is provisioned at once.
package localpath
