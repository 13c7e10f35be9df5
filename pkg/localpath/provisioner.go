package localpath

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"
)

// ProvisionerName is the provisioner of the StorageClass: the name
// PersistentVolumeClaims are provisioned under.
const ProvisionerName = "jobkeeper.dev/local-path"

// Provisioner makes and removes the directories behind PersistentVolumes.
// It implements the library's controller.Provisioner.
type Provisioner struct {
	// Root is the directory the volumes' directories are made in.
	Root string
	// NodeName is the node the volumes are on: their node affinity.
	NodeName string
}

var _ controller.Provisioner = (*Provisioner)(nil)
var _ controller.BlockProvisioner = (*Provisioner)(nil)

// SupportsBlock reports false: a directory is no block device, so a claim
// with volumeMode Block is refused (the library records a
// ProvisioningFailed event saying so).
func (p *Provisioner) SupportsBlock(context.Context) bool { return false }

// Provision makes the directory <Root>/<PVName> (world-writable, as
// local-path's, so containers of any user can write) and returns the
// PersistentVolume for it: hostPath, on this node, with the claim's
// requested capacity and access modes, and the class's reclaim policy
// (Delete by default).
func (p *Provisioner) Provision(_ context.Context, opts controller.ProvisionOptions) (*corev1.PersistentVolume, controller.ProvisioningState, error) {
	if opts.PVC.Spec.Selector != nil {
		return nil, controller.ProvisioningFinished, errors.New("claim.Spec.Selector is not supported: a local-path volume has no labels to select")
	}
	if opts.SelectedNodeName != "" && opts.SelectedNodeName != p.NodeName {
		return nil, controller.ProvisioningReschedule, fmt.Errorf("node %q was selected, but volumes are only made on %q", opts.SelectedNodeName, p.NodeName)
	}
	dir, err := p.dir(opts.PVName)
	if err != nil {
		return nil, controller.ProvisioningFinished, err
	}
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, controller.ProvisioningFinished, fmt.Errorf("making the volume's directory: %w", err)
	}
	// World-writable whatever the umask.
	if err := os.Chmod(dir, 0o777); err != nil {
		return nil, controller.ProvisioningFinished, fmt.Errorf("making the volume's directory: %w", err)
	}
	reclaim := corev1.PersistentVolumeReclaimDelete
	if opts.StorageClass.ReclaimPolicy != nil {
		reclaim = *opts.StorageClass.ReclaimPolicy
	}
	dirType := corev1.HostPathDirectoryOrCreate
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: opts.PVName},
		Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeReclaimPolicy: reclaim,
			AccessModes:                   opts.PVC.Spec.AccessModes,
			VolumeMode:                    opts.PVC.Spec.VolumeMode,
			MountOptions:                  opts.StorageClass.MountOptions,
			Capacity: corev1.ResourceList{
				corev1.ResourceStorage: opts.PVC.Spec.Resources.Requests[corev1.ResourceStorage],
			},
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &dirType},
			},
			NodeAffinity: &corev1.VolumeNodeAffinity{
				Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{
						Key:      corev1.LabelHostname,
						Operator: corev1.NodeSelectorOpIn,
						Values:   []string{p.NodeName},
					}},
				}}},
			},
		},
	}
	return pv, controller.ProvisioningFinished, nil
}

// Delete removes the directory of a PersistentVolume this provisioner made;
// the library then deletes the PersistentVolume. A volume whose path is not
// a directory of Root is not this provisioner's: it is ignored.
func (p *Provisioner) Delete(_ context.Context, pv *corev1.PersistentVolume) error {
	want, err := p.dir(pv.Name)
	if err != nil {
		return &controller.IgnoredError{Reason: err.Error()}
	}
	if pv.Spec.HostPath == nil || filepath.Clean(pv.Spec.HostPath.Path) != want {
		return &controller.IgnoredError{Reason: fmt.Sprintf("the volume's path is not %s", want)}
	}
	if err := os.RemoveAll(want); err != nil {
		return fmt.Errorf("removing the volume's directory: %w", err)
	}
	return nil
}

// dir is the directory of the PersistentVolume named name.
func (p *Provisioner) dir(name string) (string, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, filepath.Separator) {
		return "", fmt.Errorf("%q cannot name a directory of %s", name, p.Root)
	}
	return filepath.Join(p.Root, name), nil
}
