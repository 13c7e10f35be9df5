// Package manifests reads the YAML files tests apply (example policies,
// CRDs and objects with real status shapes) and installs CRDs on a
// control plane, for unit, integration and end-to-end tests alike.
package manifests

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclientset "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"jobkeeper.dev/jobkeeper/deploy/crds"
)

// Doc is one document of a multi-document YAML file: its raw bytes and the
// object they decode to.
type Doc struct {
	Raw    []byte
	Object *unstructured.Unstructured
}

// ReadFile splits a multi-document YAML file into its documents, skipping
// empty ones (comments only).
func ReadFile(path string) ([]Doc, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []Doc
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		raw, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(raw, &u.Object); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		out = append(out, Doc{Raw: raw, Object: u})
	}
}

// ReadObjects is ReadFile's objects only.
func ReadObjects(path string) ([]*unstructured.Unstructured, error) {
	docs, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := make([]*unstructured.Unstructured, len(docs))
	for i, d := range docs {
		out[i] = d.Object
	}
	return out, nil
}

// InstallCRD creates crd and waits until it is Established (for at most
// crds.EstablishTimeout). A CRD of that name that is still terminating (an
// earlier test deleted it while its objects were being removed) is waited
// out first, for at most timeout; one that exists and is not terminating is
// kept.
func InstallCRD(ctx context.Context, ext apiextensionsclientset.Interface, crd *apiextensionsv1.CustomResourceDefinition, timeout time.Duration) error {
	api := ext.ApiextensionsV1().CustomResourceDefinitions()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		_, err := api.Create(ctx, crd, metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			return err == nil, err
		}
		got, err := api.Get(ctx, crd.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && got.DeletionTimestamp == nil, err
	})
	if err != nil {
		return fmt.Errorf("creating CRD %s: %w", crd.Name, err)
	}
	return crds.WaitEstablished(ctx, ext, crd.Name)
}
