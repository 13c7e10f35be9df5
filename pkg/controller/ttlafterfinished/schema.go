package ttlafterfinished

import (
	"context"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// crdResource is the resource of CustomResourceDefinitions.
var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// schemaLookup returns the OpenAPI v3 schema (as unstructured content) of a
// resource's version, or nil when it is not known (not a CRD, or the CRD
// cannot be read), in which case field paths are not checked.
type schemaLookup func(ctx context.Context, gvr schema.GroupVersionResource) (map[string]interface{}, error)

// crdSchema reads a custom resource's schema from its CRD with the dynamic
// client.
func (c *Controller) crdSchema(ctx context.Context, gvr schema.GroupVersionResource) (map[string]interface{}, error) {
	if gvr.Group == "" || !strings.Contains(gvr.Group, ".") {
		return nil, nil // built-in groups have no CRD
	}
	crd, err := c.dynamic.Resource(crdResource).Get(ctx, gvr.Resource+"."+gvr.Group, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		m, ok := v.(map[string]interface{})
		if !ok || m["name"] != gvr.Version {
			continue
		}
		s, _, _ := unstructured.NestedMap(m, "schema", "openAPIV3Schema")
		return s, nil
	}
	return nil, nil
}
