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

// CleanupPolicyResource is the resource of CleanupPolicy, for dynamic clients.
var CleanupPolicyResource = SchemeGroupVersion.WithResource("cleanuppolicies")

// CleanupPolicyKind is the group, version and kind of CleanupPolicy.
var CleanupPolicyKind = SchemeGroupVersion.WithKind("CleanupPolicy")

var (
	// SchemeBuilder collects the functions that add this group to a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds this group's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, &CleanupPolicy{}, &CleanupPolicyList{})
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
