package binder

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	storagehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/klog/v2"
)

// passVolumes is the volume view of one binding pass: the listers, and the
// claims used by pods on the node, assumed, or bound earlier in the pass.
type passVolumes struct {
	// view is what decideVolumes reads.
	view volumeView
	// users maps a claim's namespace/name to the pods using it.
	users map[string]map[types.UID]bool
}

// podClaims returns the namespace/name of the pod's persistentVolumeClaim
// volumes.
func podClaims(pod *corev1.Pod) []string {
	var out []string
	for i := range pod.Spec.Volumes {
		if c := pod.Spec.Volumes[i].PersistentVolumeClaim; c != nil {
			out = append(out, pod.Namespace+"/"+c.ClaimName)
		}
	}
	return out
}

// use records that uid uses the claims.
func (p *passVolumes) use(uid types.UID, claims []string) {
	for _, c := range claims {
		if p.users[c] == nil {
			p.users[c] = map[types.UID]bool{}
		}
		p.users[c][uid] = true
	}
}

// add records a pod about to be bound.
func (p *passVolumes) add(pod *corev1.Pod) { p.use(pod.UID, podClaims(pod)) }

// volumeView returns the pass's view: the pods that use claims are the
// node's pods that have not finished (as the scheduler's cache keeps them)
// and those bound but not seen yet, listed the first time a pending pod's
// ReadWriteOncePod claim asks (most passes have none).
func (b *Binder) volumeView(labels map[string]string) *passVolumes {
	p := &passVolumes{users: map[string]map[types.UID]bool{}}
	listed := false
	list := func() {
		if listed {
			return
		}
		listed = true
		// The assumed pods first: the agent's informer has a pod in its
		// cache before the agent stops assuming it (seen), so a pod is
		// found in one of the two. Listed the other way round, a pod the
		// informer adds in between is in neither, and its claim looks
		// free.
		b.mu.Lock()
		for uid, a := range b.assumed {
			p.use(uid, a.claims)
		}
		b.mu.Unlock()
		if pods, err := b.cfg.Pods.List(everything); err == nil {
			for _, pod := range pods {
				if pod.Spec.NodeName == b.cfg.NodeName && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
					p.add(pod)
				}
			}
		}
	}
	p.view = volumeView{
		claim: func(ns, name string) (*corev1.PersistentVolumeClaim, error) {
			return b.claims.PersistentVolumeClaims(ns).Get(name)
		},
		class:   func(name string) (*storagev1.StorageClass, error) { return b.classes.Get(name) },
		volume:  func(name string) (*corev1.PersistentVolume, error) { return b.volumes.Get(name) },
		volumes: func() ([]*corev1.PersistentVolume, error) { return b.volumes.List(everything) },
		node:    &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: b.cfg.NodeName, Labels: labels}},
		inUse: func(ns, name string, uid types.UID) bool {
			list()
			for u := range p.users[ns+"/"+name] {
				if u != uid {
					return true
				}
			}
			return false
		},
	}
	return p
}

// bindVolumes does what the scheduler's volume binding does before it binds
// a pod whose claims of WaitForFirstConsumer classes are not bound: each
// existing volume chosen for a claim gets the claim in its claimRef, and
// each claim to provision gets the volume.kubernetes.io/selected-node
// annotation naming this node, which the PersistentVolume controller and
// the claim's provisioner wait for. The pod is bound later, once its claims
// are; the claims' changes start the next pass.
func (b *Binder) bindVolumes(ctx context.Context, pod *corev1.Pod, d volumeDecision) error {
	for _, pv := range d.preBind {
		if _, err := b.cfg.Client.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{FieldManager: b.cfg.FieldManager}); err != nil {
			return fmt.Errorf("binding volume %s for pod %s: %w", pv.Name, klog.KObj(pod), err)
		}
	}
	for _, claim := range d.selectNode {
		body, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"uid":             claim.UID,
			"resourceVersion": claim.ResourceVersion,
			"annotations":     map[string]string{storagehelpers.AnnSelectedNode: b.cfg.NodeName},
		}})
		if err != nil {
			return err
		}
		_, err = b.cfg.Client.CoreV1().PersistentVolumeClaims(claim.Namespace).Patch(ctx, claim.Name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: b.cfg.FieldManager})
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			// Changed meanwhile: its event starts another pass.
			continue
		}
		if err != nil {
			return fmt.Errorf("selecting node %s for claim %s of pod %s: %w", b.cfg.NodeName, klog.KObj(claim), klog.KObj(pod), err)
		}
	}
	return nil
}
