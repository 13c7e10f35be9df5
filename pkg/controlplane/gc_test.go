package controlplane

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
)

// TestMetadataOnlyInformers checks that the garbage collector's informers
// hold pods as metadata without managed fields, not as typed pods.
func TestMetadataOnlyInformers(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	pod := &metav1.PartialObjectMetadata{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "p", Namespace: "ns",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "j", UID: "u"}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		},
	}
	client := metadatafake.NewSimpleMetadataClient(scheme, pod)
	factory := metadataOnly{metadatainformer.NewSharedInformerFactoryWithOptions(client, 0, metadatainformer.WithTransform(dropManagedFields))}
	inf, err := factory.ForResource(corev1.SchemeGroupVersion.WithResource("pods"))
	if err != nil {
		t.Fatal(err)
	}
	informer := inf.Informer()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("informer did not sync")
	}
	var got any
	if err := wait.PollUntilContextTimeout(ctx, 0, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
		var exists bool
		got, exists, err = informer.GetStore().GetByKey("ns/p")
		return exists, err
	}); err != nil {
		t.Fatalf("pod not in the cache: %v", err)
	}
	m, ok := got.(*metav1.PartialObjectMetadata)
	if !ok {
		t.Fatalf("cached pod is a %T, want *metav1.PartialObjectMetadata", got)
	}
	if len(m.ManagedFields) != 0 {
		t.Errorf("cached pod keeps managed fields %v, want none", m.ManagedFields)
	}
	if len(m.OwnerReferences) != 1 || m.OwnerReferences[0].UID != "u" {
		t.Errorf("cached pod's owners = %v, want the Job", m.OwnerReferences)
	}
}
