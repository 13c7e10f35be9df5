package controlplane

import (
	"sort"

	"k8s.io/component-base/featuregate"
)

// gatedAPIVersions are the API group versions that kube-apiserver v1.36
// does not serve by default and that a feature gate needs: storage the
// gate guards there (no default-on version has the resource), or an API
// the gated feature's controllers use. A real cluster's administrator
// passes --runtime-config beside --feature-gates; up, whose apiserver is
// its own, turns them on with the gate.
var gatedAPIVersions = map[featuregate.Feature][]string{
	"GenericWorkload":           {"scheduling.k8s.io/v1alpha2"},
	"ClusterTrustBundle":        {"certificates.k8s.io/v1beta1"},
	"PodCertificateRequest":     {"certificates.k8s.io/v1beta1"},
	"StorageVersionMigrator":    {"storagemigration.k8s.io/v1beta1"},
	"StorageVersionAPI":         {"internal.apiserver.k8s.io/v1alpha1"},
	"CoordinatedLeaderElection": {"coordination.k8s.io/v1beta1"},
	"DRADeviceTaintRules":       {"resource.k8s.io/v1beta2"},
	"DRAResourcePoolStatus":     {"resource.k8s.io/v1alpha3"},
}

// apiVersionsForGates are the group versions the gates enabled need
// (gatedAPIVersions), sorted, each once.
func apiVersionsForGates(enabled func(featuregate.Feature) bool) []string {
	seen := map[string]bool{}
	var out []string
	for name, versions := range gatedAPIVersions {
		if !enabled(name) {
			continue
		}
		for _, v := range versions {
			if !seen[v] {
				seen[v] = true
				out = append(out, v)
			}
		}
	}
	sort.Strings(out)
	return out
}
