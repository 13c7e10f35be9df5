package job

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// Pod writes answered with the pod's metadata only. Of a pod it has just
// created or patched, the controller uses the name, the controller
// reference and the resourceVersion (the read-your-writes records of
// consistency.go), yet the typed client decodes the whole pod the
// apiserver returns, spec and status included, for every write. Asked with
// a media type that carries as=PartialObjectMetadata;g=meta.k8s.io;v=v1,
// the apiserver encodes a metav1.PartialObjectMetadata instead, in the
// same encoding, for creates and patches alike. The plain media type
// follows in the Accept header: the apiserver never transforms an error,
// so a refusal comes back as a Status in the client's encoding and decodes
// into the same API error as with the typed client. An apiserver that
// would not transform answers with the whole pod, which decodes into the
// metadata all the same (the fields past the metadata are skipped).

// metaOnlyMediaParams turns a media type into a request for the object's
// metadata only.
const metaOnlyMediaParams = ";as=PartialObjectMetadata;g=meta.k8s.io;v=v1"

// metaOnlyAccept is the Accept header of a metadata-only write by a client
// whose configured content type is contentType (client-go's JSON if empty).
func metaOnlyAccept(contentType string) string {
	if contentType == "" {
		contentType = runtime.ContentTypeJSON
	}
	return contentType + metaOnlyMediaParams + "," + contentType
}

// podsRESTClient returns the REST client behind client's pods, or nil if
// client has none (a fake clientset, whose writes then go through the
// typed client).
func podsRESTClient(client kubernetes.Interface) *rest.RESTClient {
	rc, _ := client.CoreV1().RESTClient().(*rest.RESTClient)
	return rc
}

// createPodMeta sends one create of pod in namespace through rc, never
// resent by client-go, and returns the created pod's metadata.
func createPodMeta(ctx context.Context, rc *rest.RESTClient, contentType, namespace string, pod *corev1.Pod, opts metav1.CreateOptions) (*metav1.PartialObjectMetadata, error) {
	out := &metav1.PartialObjectMetadata{}
	err := createParams(rc.Post().Namespace(namespace).Resource("pods"), opts).
		SetHeader("Accept", metaOnlyAccept(contentType)).
		Body(pod).MaxRetries(0).Do(ctx).Into(out)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// patchPodMeta applies a strategic merge patch to the named pod through
// rc and returns the patched pod's metadata. client-go may resend it after
// an answer with Retry-After, as it would the typed client's patch.
func patchPodMeta(ctx context.Context, rc *rest.RESTClient, contentType, namespace, name string, patch []byte, opts metav1.PatchOptions) (*metav1.PartialObjectMetadata, error) {
	out := &metav1.PartialObjectMetadata{}
	err := patchParams(rc.Patch(types.StrategicMergePatchType).Namespace(namespace).Resource("pods").Name(name), opts).
		SetHeader("Accept", metaOnlyAccept(contentType)).
		Body(patch).Do(ctx).Into(out)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// The options of the controller's pod writes set only the field manager.
// client-go's VersionedParams turns options into query parameters by
// reflection over every field, which costs more per pod write than the
// rest of building the request; for options that set nothing else, the
// one parameter it would produce is set directly, so the URL is the same
// (TestPodWriteParams). Other options go through VersionedParams.

// createParams sets the query parameters of opts on a create request.
func createParams(r *rest.Request, opts metav1.CreateOptions) *rest.Request {
	if opts.TypeMeta != (metav1.TypeMeta{}) || opts.DryRun != nil || opts.FieldValidation != "" {
		return r.VersionedParams(&opts, scheme.ParameterCodec)
	}
	return fieldManagerParam(r, opts.FieldManager)
}

// patchParams sets the query parameters of opts on a patch request.
func patchParams(r *rest.Request, opts metav1.PatchOptions) *rest.Request {
	if opts.TypeMeta != (metav1.TypeMeta{}) || opts.DryRun != nil || opts.Force != nil || opts.FieldValidation != "" {
		return r.VersionedParams(&opts, scheme.ParameterCodec)
	}
	return fieldManagerParam(r, opts.FieldManager)
}

// fieldManagerParam sets fieldManager as VersionedParams does: not at all
// when empty.
func fieldManagerParam(r *rest.Request, fieldManager string) *rest.Request {
	if fieldManager == "" {
		return r
	}
	return r.Param("fieldManager", fieldManager)
}
