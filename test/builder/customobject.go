package builder

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// CustomObjectWrapper builds an object of any kind as unstructured content,
// for custom resources in tests.
type CustomObjectWrapper struct {
	// Object is the object under construction.
	Object unstructured.Unstructured
}

// MakeCustomObject returns an object of the given apiVersion and kind named
// name in namespace ns, with an empty spec and no status.
func MakeCustomObject(apiVersion, kind, name, ns string) *CustomObjectWrapper {
	w := &CustomObjectWrapper{Object: unstructured.Unstructured{Object: map[string]interface{}{
		"spec": map[string]interface{}{},
	}}}
	w.Object.SetAPIVersion(apiVersion)
	w.Object.SetKind(kind)
	w.Object.SetName(name)
	w.Object.SetNamespace(ns)
	return w
}

// Obj returns a deep copy of the object built so far.
func (w *CustomObjectWrapper) Obj() *unstructured.Unstructured { return w.Object.DeepCopy() }

// UID sets metadata.uid.
func (w *CustomObjectWrapper) UID(uid string) *CustomObjectWrapper {
	w.Object.SetUID(types.UID(uid))
	return w
}

// ResourceVersion sets metadata.resourceVersion.
func (w *CustomObjectWrapper) ResourceVersion(rv string) *CustomObjectWrapper {
	w.Object.SetResourceVersion(rv)
	return w
}

// Label adds a label.
func (w *CustomObjectWrapper) Label(k, v string) *CustomObjectWrapper {
	l := w.Object.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l[k] = v
	w.Object.SetLabels(l)
	return w
}

// Annotation adds an annotation.
func (w *CustomObjectWrapper) Annotation(k, v string) *CustomObjectWrapper {
	a := w.Object.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[k] = v
	w.Object.SetAnnotations(a)
	return w
}

// Condition appends a status condition.
func (w *CustomObjectWrapper) Condition(condType, status string, at metav1.Time) *CustomObjectWrapper {
	conds, _, _ := unstructured.NestedSlice(w.Object.Object, "status", "conditions")
	ts, _ := at.MarshalQueryParameter()
	conds = append(conds, map[string]interface{}{
		"type": condType, "status": status, "lastTransitionTime": ts, "reason": "Test", "message": "",
	})
	if err := unstructured.SetNestedSlice(w.Object.Object, conds, "status", "conditions"); err != nil {
		panic(err)
	}
	return w
}

// Field sets the string at a dot-separated path.
func (w *CustomObjectWrapper) Field(path, value string) *CustomObjectWrapper {
	if err := unstructured.SetNestedField(w.Object.Object, value, strings.Split(path, ".")...); err != nil {
		panic(err)
	}
	return w
}

// TimeField sets an RFC 3339 timestamp at a dot-separated path.
func (w *CustomObjectWrapper) TimeField(path string, at metav1.Time) *CustomObjectWrapper {
	ts, _ := at.MarshalQueryParameter()
	return w.Field(path, ts)
}
