package localpath

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"
)

// TestProvisionAndDelete provisions a volume for a claim, checks the
// directory and the PersistentVolume, and deletes it.
func TestProvisionAndDelete(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	p := &Provisioner{Root: root, NodeName: "node-1"}
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "ns"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}},
		},
	}
	pv, state, err := p.Provision(ctx, controller.ProvisionOptions{StorageClass: StorageClass(), PVName: "pvc-1", PVC: claim})
	if err != nil || state != controller.ProvisioningFinished {
		t.Fatalf("Provision: %v, %s", err, state)
	}
	dir := filepath.Join(root, "pvc-1")
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o777 {
		t.Fatalf("volume directory: %v, %v; want a world-writable directory", fi, err)
	}
	switch {
	case pv.Name != "pvc-1", pv.Spec.HostPath == nil || pv.Spec.HostPath.Path != dir,
		pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete,
		!pv.Spec.Capacity.Storage().Equal(resource.MustParse("2Gi")),
		len(pv.Spec.AccessModes) != 1 || pv.Spec.AccessModes[0] != corev1.ReadWriteOnce,
		pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0].Values[0] != "node-1":
		t.Errorf("PersistentVolume %+v", pv)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(ctx, pv); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the directory is left: %v", err)
	}

	// A volume of another path is not this provisioner's.
	other := pv.DeepCopy()
	other.Spec.HostPath.Path = "/etc"
	var ignored *controller.IgnoredError
	if err := p.Delete(ctx, other); !errors.As(err, &ignored) {
		t.Errorf("Delete of a foreign volume: %v, want IgnoredError", err)
	}
	if _, err := os.Stat("/etc"); err != nil {
		t.Fatal(err)
	}

	// The class's reclaim policy is the volume's: Retain keeps it (the
	// library calls Delete only for Delete).
	keep := StorageClass()
	retain := corev1.PersistentVolumeReclaimRetain
	keep.ReclaimPolicy = &retain
	kept, _, err := p.Provision(ctx, controller.ProvisionOptions{StorageClass: keep, PVName: "pvc-3", PVC: claim, SelectedNodeName: "node-1"})
	if err != nil || kept.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain {
		t.Errorf("Provision with a Retain class: %v, reclaim policy %v; want Retain", err, kept)
	}

	// A node other than this one is handed back to the scheduler.
	if _, state, err := p.Provision(ctx, controller.ProvisionOptions{StorageClass: StorageClass(), PVName: "pvc-4", PVC: claim, SelectedNodeName: "node-2"}); err == nil || state != controller.ProvisioningReschedule {
		t.Errorf("Provision on another node: %v, %s; want an error and ProvisioningReschedule", err, state)
	}

	// Claims with a selector are refused.
	claim.Spec.Selector = &metav1.LabelSelector{}
	if _, _, err := p.Provision(ctx, controller.ProvisionOptions{StorageClass: StorageClass(), PVName: "pvc-2", PVC: claim}); err == nil {
		t.Errorf("a claim with a selector was provisioned")
	}
}

// TestOlderClass checks the note about a class an older up made with
// Immediate binding, and its absence for the current class or another
// provisioner's.
func TestOlderClass(t *testing.T) {
	ctx := context.Background()
	older := StorageClass()
	immediate := storagev1.VolumeBindingImmediate
	older.VolumeBindingMode = &immediate
	if note := OlderClass(ctx, fake.NewClientset(older)); !strings.Contains(note, "kubectl delete storageclass standard") {
		t.Errorf("an Immediate class of an older up: note %q", note)
	}
	if note := OlderClass(ctx, fake.NewClientset(StorageClass())); note != "" {
		t.Errorf("the current class: note %q, want none", note)
	}
	theirs := older.DeepCopy()
	theirs.Provisioner = "example.com/other"
	if note := OlderClass(ctx, fake.NewClientset(theirs)); note != "" {
		t.Errorf("another provisioner's class: note %q, want none", note)
	}
	if note := OlderClass(ctx, fake.NewClientset()); note != "" {
		t.Errorf("no class: note %q, want none", note)
	}
}
