package nodeagent

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/internal/periodic"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/status"
)

// Lease tunables, as the kubelet's defaults.
var (
	// LeaseDurationSeconds is the node lease's duration.
	LeaseDurationSeconds int32 = 40
	// LeaseRenewInterval is how often the lease is renewed.
	LeaseRenewInterval = 10 * time.Second
)

// renewLease keeps the node's Lease in kube-node-lease fresh until ctx is done.
func (a *Agent) renewLease(ctx context.Context) {
	logger := klog.FromContext(ctx)
	if err := a.syncLease(ctx); err != nil {
		logger.Error(err, "Renewing node lease")
	}
	periodic.Every(ctx, a.clock, LeaseRenewInterval, func() {
		if err := a.syncLease(ctx); err != nil {
			logger.Error(err, "Renewing node lease")
		}
	})
}

// syncLease creates or renews the lease.
func (a *Agent) syncLease(ctx context.Context) error {
	leases := a.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(a.clock.Now())
	lease, err := leases.Get(ctx, a.opts.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: a.opts.NodeName, Namespace: corev1.NamespaceNodeLease},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(a.opts.NodeName),
				LeaseDurationSeconds: ptr.To(LeaseDurationSeconds),
				RenewTime:            &now,
			},
		}
		if node, err := a.client.CoreV1().Nodes().Get(ctx, a.opts.NodeName, metav1.GetOptions{}); err == nil {
			lease.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}
		}
		if _, err := leases.Create(ctx, lease, metav1.CreateOptions{FieldManager: status.FieldManager}); err != nil {
			return fmt.Errorf("creating node lease: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading node lease: %w", err)
	}
	lease = lease.DeepCopy()
	lease.Spec.HolderIdentity = ptr.To(a.opts.NodeName)
	lease.Spec.LeaseDurationSeconds = ptr.To(LeaseDurationSeconds)
	lease.Spec.RenewTime = &now
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{FieldManager: status.FieldManager}); err != nil {
		return fmt.Errorf("renewing node lease: %w", err)
	}
	return nil
}
