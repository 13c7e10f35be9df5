package binder

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	storagehelpers "k8s.io/component-helpers/storage/volume"
)

// The scheduler's reasons for a pod its volumes keep off a node (the
// VolumeBinding and VolumeRestrictions plugins of kube-scheduler 1.36),
// counted per node in FailedScheduling messages.
const (
	reasonVolumeBindConflict = "node(s) didn't find available persistent volumes to bind"
	reasonVolumeNodeConflict = "node(s) didn't match PersistentVolume's node affinity"
	reasonVolumeNotExist     = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
	reasonReadWriteOncePod   = "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod"
)

// noProvisioner is the provisioner of classes of statically made volumes
// only (local volumes' usual class): nothing provisions their claims.
const noProvisioner = "kubernetes.io/no-provisioner"

// volumeView is what the binder's volume step reads: the claims, classes
// and volumes of the cluster, the node, and which claims pods already use.
type volumeView struct {
	// claim returns a claim (a NotFound error when there is none).
	claim func(namespace, name string) (*corev1.PersistentVolumeClaim, error)
	// class returns a StorageClass (a NotFound error when there is none).
	class func(name string) (*storagev1.StorageClass, error)
	// volume returns a PersistentVolume (a NotFound error when there is none).
	volume func(name string) (*corev1.PersistentVolume, error)
	// volumes lists every PersistentVolume.
	volumes func() ([]*corev1.PersistentVolume, error)
	// node is this node (its name and labels).
	node *corev1.Node
	// inUse reports whether a pod other than uid, on the node or being
	// bound to it, uses the claim namespace/name.
	inUse func(namespace, name string, uid types.UID) bool
}

// volumeDecision is what the binder does about a pod's claims before it
// binds the pod, as kube-scheduler's VolumeBinding plugin decides it.
type volumeDecision struct {
	// unschedulable, when set, is why the pod cannot go to the node now:
	// the message of PodScheduled=False and of FailedScheduling. The pod is
	// looked at again when claims, volumes or pods change.
	unschedulable string
	// selectNode are claims of WaitForFirstConsumer classes to provision on
	// this node: they get the volume.kubernetes.io/selected-node annotation.
	selectNode []*corev1.PersistentVolumeClaim
	// preBind are existing volumes chosen for claims of
	// WaitForFirstConsumer classes, with their claimRef set to the claim:
	// the PersistentVolume controller completes the binding.
	preBind []*corev1.PersistentVolume
	// wait reports claims not bound yet: the pod is bound to the node only
	// once every claim is, as the scheduler's PreBind waits.
	wait bool
}

// ready reports whether the pod can be bound to the node now.
func (d volumeDecision) ready() bool {
	return d.unschedulable == "" && !d.wait && len(d.selectNode) == 0 && len(d.preBind) == 0
}

// unschedulableMessage is a FailedScheduling message for the one node,
// with a reason the scheduler finds before looking at nodes (PreFilter) or
// one per node (Filter).
func unschedulableMessage(reason string, perNode bool) string {
	if perNode {
		return fmt.Sprintf("0/1 nodes are available: 1 %s.", reason)
	}
	return fmt.Sprintf("0/1 nodes are available: %s.", reason)
}

// decideVolumes decides about the persistentVolumeClaim volumes of pod.
// Generic ephemeral volumes are not looked at: the node refuses them.
func decideVolumes(pod *corev1.Pod, v volumeView) (volumeDecision, error) {
	var d volumeDecision
	chosen := map[string]*corev1.PersistentVolume{}
	for i := range pod.Spec.Volumes {
		src := pod.Spec.Volumes[i].PersistentVolumeClaim
		if src == nil {
			continue
		}
		claim, err := v.claim(pod.Namespace, src.ClaimName)
		switch {
		case apierrors.IsNotFound(err):
			return volumeDecision{unschedulable: unschedulableMessage(fmt.Sprintf("persistentvolumeclaim %q not found", src.ClaimName), false)}, nil
		case err != nil:
			return volumeDecision{}, err
		case claim.Status.Phase == corev1.ClaimLost:
			return volumeDecision{unschedulable: unschedulableMessage(fmt.Sprintf("persistentvolumeclaim %q bound to non-existent persistentvolume %q", claim.Name, claim.Spec.VolumeName), false)}, nil
		case claim.DeletionTimestamp != nil:
			return volumeDecision{unschedulable: unschedulableMessage(fmt.Sprintf("persistentvolumeclaim %q is being deleted", claim.Name), false)}, nil
		}
		if slices.Contains(claim.Spec.AccessModes, corev1.ReadWriteOncePod) && v.inUse(pod.Namespace, claim.Name, pod.UID) {
			return volumeDecision{unschedulable: unschedulableMessage(reasonReadWriteOncePod, true)}, nil
		}
		if claim.Spec.VolumeName != "" {
			pv, err := v.volume(claim.Spec.VolumeName)
			switch {
			case apierrors.IsNotFound(err):
				return volumeDecision{unschedulable: unschedulableMessage(reasonVolumeNotExist, true)}, nil
			case err != nil:
				return volumeDecision{}, err
			}
			if storagehelpers.IsVolumeBoundToClaim(pv, claim) {
				if storagehelpers.CheckNodeAffinity(pv, v.node.Labels) != nil {
					return volumeDecision{unschedulable: unschedulableMessage(reasonVolumeNodeConflict, true)}, nil
				}
				if claim.Status.Phase != corev1.ClaimBound {
					// Pre-bound: the PersistentVolume controller is binding it.
					d.wait = true
				}
				continue
			}
		}
		delay, class, err := delayedBinding(claim, v)
		if err != nil {
			return volumeDecision{}, err
		}
		if !delay {
			return volumeDecision{unschedulable: unschedulableMessage("pod has unbound immediate PersistentVolumeClaims", false)}, nil
		}
		if claim.Spec.VolumeName != "" || storagehelpers.IsDelayBindingProvisioning(claim) {
			// A volume was chosen or is being provisioned.
			d.wait = true
			continue
		}
		volumes, err := v.volumes()
		if err != nil {
			return volumeDecision{}, err
		}
		pv, err := storagehelpers.FindMatchingVolume(claim, volumes, v.node, chosen, true, true)
		if err != nil {
			return volumeDecision{}, err
		}
		if pv != nil {
			bound, _, err := storagehelpers.GetBindVolumeToClaim(pv, claim)
			if err != nil {
				return volumeDecision{}, err
			}
			chosen[pv.Name] = pv
			d.preBind = append(d.preBind, bound)
			continue
		}
		if class == nil || class.Provisioner == noProvisioner {
			return volumeDecision{unschedulable: unschedulableMessage(reasonVolumeBindConflict, true)}, nil
		}
		d.selectNode = append(d.selectNode, claim)
	}
	return d, nil
}

// delayedBinding reports whether the claim's class binds on the first
// consumer, and the class (nil when the claim names none, or one that does
// not exist: such a claim binds at once, to a volume made beforehand).
func delayedBinding(claim *corev1.PersistentVolumeClaim, v volumeView) (bool, *storagev1.StorageClass, error) {
	name := storagehelpers.GetPersistentVolumeClaimClass(claim)
	if name == "" {
		return false, nil, nil
	}
	class, err := v.class(name)
	if apierrors.IsNotFound(err) {
		return false, nil, nil
	}
	if err != nil {
		return false, nil, err
	}
	return class.VolumeBindingMode != nil && *class.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer, class, nil
}
