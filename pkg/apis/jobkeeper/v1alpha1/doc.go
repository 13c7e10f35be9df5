// Package v1alpha1 holds version v1alpha1 of jobkeeper's own API group,
// jobkeeper.dev. Its only kind is the cluster-scoped TTLPolicy, which tells
// the TTL-after-finished controller how to recognise finished objects of any
// kind, how long to keep them, and how many to keep.
//
// The CRD manifest (OpenAPI schema and CEL validation) lives in
// deploy/crds and is embedded by package crds.
//
// +groupName=jobkeeper.dev
// +k8s:deepcopy-gen=package
package v1alpha1
