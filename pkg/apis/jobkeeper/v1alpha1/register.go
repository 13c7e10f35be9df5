package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of jobkeeper's own resources.
const GroupName = "jobkeeper.dev"

// SchemeGroupVersion is the group and version of this package.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

// TTLPolicyResource is the resource of TTLPolicy, for dynamic clients.
var TTLPolicyResource = SchemeGroupVersion.WithResource("ttlpolicies")

// TTLPolicyKind is the group, version and kind of TTLPolicy.
var TTLPolicyKind = SchemeGroupVersion.WithKind("TTLPolicy")

var (
	// SchemeBuilder collects the functions that add this group to a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds this group's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, &TTLPolicy{}, &TTLPolicyList{})
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
