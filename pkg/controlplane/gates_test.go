package controlplane

import (
	"slices"
	"testing"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	_ "k8s.io/kubernetes/pkg/features"
)

// enabledGates are the gates on.
type enabledGates map[featuregate.Feature]bool

func (g enabledGates) enabled(f featuregate.Feature) bool { return g[f] }

// TestAPIVersionsForGates checks the API versions up turns on for gates.
func TestAPIVersionsForGates(t *testing.T) {
	for _, tc := range []struct {
		gates enabledGates
		want  []string
	}{
		{enabledGates{}, nil},
		{enabledGates{"GenericWorkload": true, "GangScheduling": true, "WorkloadWithJob": true}, []string{"scheduling.k8s.io/v1alpha2"}},
		{enabledGates{"ClusterTrustBundle": true, "PodCertificateRequest": true, "DRAResourcePoolStatus": true}, []string{"certificates.k8s.io/v1beta1", "resource.k8s.io/v1alpha3"}},
	} {
		if got := apiVersionsForGates(tc.gates.enabled); !slices.Equal(got, tc.want) {
			t.Errorf("gates %v: %v, want %v", tc.gates, got, tc.want)
		}
	}
}

// TestGatedAPIVersionsKnown keeps gatedAPIVersions to gates v1.36 has.
func TestGatedAPIVersionsKnown(t *testing.T) {
	known := utilfeature.DefaultMutableFeatureGate.GetAll()
	for name := range gatedAPIVersions {
		if _, ok := known[name]; !ok {
			t.Errorf("%s is no Kubernetes feature gate", name)
		}
	}
}
