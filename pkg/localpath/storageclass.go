package localpath

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// StorageClassName is the default StorageClass's name, the one kind and
// minikube give theirs.
const StorageClassName = "standard"

// defaultClassAnnotation makes a StorageClass the default: claims without
// a storageClassName get it.
const defaultClassAnnotation = "storageclass.kubernetes.io/is-default-class"

// StorageClass returns the default StorageClass of this provisioner: reclaim
// policy Delete, binding WaitForFirstConsumer, as kind's (doc.go says how).
func StorageClass() *storagev1.StorageClass {
	reclaim := corev1.PersistentVolumeReclaimDelete
	binding := storagev1.VolumeBindingWaitForFirstConsumer
	return &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{
			Name:        StorageClassName,
			Annotations: map[string]string{defaultClassAnnotation: "true"},
		},
		Provisioner:       ProvisionerName,
		ReclaimPolicy:     &reclaim,
		VolumeBindingMode: &binding,
	}
}

// EnsureStorageClass creates the StorageClass when it does not exist. One
// that exists is left as it is: a StorageClass's provisioner, parameters,
// reclaim policy and binding mode cannot be changed, and the user may have
// made another class the default.
func EnsureStorageClass(ctx context.Context, client kubernetes.Interface, fieldManager string) error {
	_, err := client.StorageV1().StorageClasses().Create(ctx, StorageClass(), metav1.CreateOptions{FieldManager: fieldManager})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the StorageClass %s: %w", StorageClassName, err)
	}
	return nil
}

// OlderClass returns a note for the log when the StorageClass was made by
// an older `up` with a binding mode that is no longer the default (its
// binding mode cannot be changed), saying how to get the current one; ""
// otherwise.
func OlderClass(ctx context.Context, client kubernetes.Interface) string {
	class, err := client.StorageV1().StorageClasses().Get(ctx, StorageClassName, metav1.GetOptions{})
	if err != nil || class.Provisioner != ProvisionerName {
		return ""
	}
	want := *StorageClass().VolumeBindingMode
	if class.VolumeBindingMode == nil || *class.VolumeBindingMode == want {
		return ""
	}
	return fmt.Sprintf("The StorageClass binds %s, as an older jobkeeper up made it; to bind %s as kind does, delete it (kubectl delete storageclass %s) and restart up",
		*class.VolumeBindingMode, want, StorageClassName)
}
