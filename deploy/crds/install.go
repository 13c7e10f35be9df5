package crds

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclientset "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"
)

// FieldManager is the field manager of Install's writes.
const FieldManager = "jobkeeper-crd-installer"

//go:embed *.yaml
var manifests embed.FS

// EstablishTimeout bounds how long Install waits for each CRD to be
// Established. A variable so tests can shorten it.
var EstablishTimeout = 30 * time.Second

// CRDs returns the embedded CustomResourceDefinitions, sorted by name.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	names, err := fs.Glob(manifests, "*.yaml")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	out := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(names))
	for _, n := range names {
		data, err := manifests.ReadFile(n)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", n, err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", n, err)
		}
		out = append(out, crd)
	}
	return out, nil
}

// Install creates every embedded CRD, or updates it when it already exists,
// and waits until each one is Established.
func Install(ctx context.Context, client apiextensionsclientset.Interface) error {
	crds, err := CRDs()
	if err != nil {
		return err
	}
	api := client.ApiextensionsV1().CustomResourceDefinitions()
	for _, crd := range crds {
		_, err := api.Create(ctx, crd, metav1.CreateOptions{FieldManager: FieldManager})
		if apierrors.IsAlreadyExists(err) {
			err = updateCRD(ctx, client, crd)
		}
		if err != nil {
			return fmt.Errorf("installing CRD %s: %w", crd.Name, err)
		}
	}
	for _, crd := range crds {
		if err := WaitEstablished(ctx, client, crd.Name); err != nil {
			return err
		}
	}
	return nil
}

// updateCRD replaces the spec of an existing CRD, retrying on conflicts.
func updateCRD(ctx context.Context, client apiextensionsclientset.Interface, want *apiextensionsv1.CustomResourceDefinition) error {
	api := client.ApiextensionsV1().CustomResourceDefinitions()
	for {
		cur, err := api.Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		upd := cur.DeepCopy()
		upd.Spec = want.Spec
		upd.Labels = want.Labels
		upd.Annotations = want.Annotations
		_, err = api.Update(ctx, upd, metav1.UpdateOptions{FieldManager: FieldManager})
		if !apierrors.IsConflict(err) {
			return err
		}
	}
}

// WaitEstablished polls the named CRD until its Established condition is
// True, for at most EstablishTimeout.
func WaitEstablished(ctx context.Context, client apiextensionsclientset.Interface, name string) error {
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, EstablishTimeout, true, func(ctx context.Context) (bool, error) {
		crd, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for CRD %s to be established: %w", name, err)
	}
	return nil
}
