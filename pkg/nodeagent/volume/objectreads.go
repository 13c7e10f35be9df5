package volume

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// objectRef names a ConfigMap or Secret.
type objectRef struct {
	kind, namespace, name string
}

// objectRead is the outcome of one read.
type objectRead struct {
	obj any
	err error
}

// objectReads reads the ConfigMaps and Secrets of volumes. With a memo,
// each object is read once (one refresh pass over every pod); a nil
// *objectReads reads from the API each time.
type objectReads struct {
	// memo holds what was read.
	memo map[objectRef]objectRead
}

// read returns the memo's outcome for ref, or calls get and keeps it.
func (r *objectReads) read(ref objectRef, get func() (any, error)) (any, error) {
	if r == nil || r.memo == nil {
		return get()
	}
	if got, ok := r.memo[ref]; ok {
		return got.obj, got.err
	}
	obj, err := get()
	r.memo[ref] = objectRead{obj: obj, err: err}
	return obj, err
}

// configMap reads a ConfigMap.
func (r *objectReads) configMap(ctx context.Context, client kubernetes.Interface, ns, name string) (*corev1.ConfigMap, error) {
	obj, err := r.read(objectRef{"ConfigMap", ns, name}, func() (any, error) {
		return client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	})
	cm, _ := obj.(*corev1.ConfigMap)
	return cm, err
}

// secret reads a Secret.
func (r *objectReads) secret(ctx context.Context, client kubernetes.Interface, ns, name string) (*corev1.Secret, error) {
	obj, err := r.read(objectRef{"Secret", ns, name}, func() (any, error) {
		return client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	})
	s, _ := obj.(*corev1.Secret)
	return s, err
}
