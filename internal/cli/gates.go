package cli

import (
	"fmt"
	"sort"

	"github.com/spf13/pflag"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	// Registers Kubernetes' own gates (with their dependencies) in the
	// process-wide gate set, as kube-controller-manager and kube-apiserver
	// link them.
	_ "k8s.io/kubernetes/pkg/features"
)

// FeatureGatesFlag is the flag that sets Kubernetes feature gates.
const FeatureGatesFlag = "feature-gates"

// addFeatureGatesFlag binds --feature-gates to the process-wide gate set
// (k8s.io/apiserver's DefaultMutableFeatureGate) that the embedded
// apiserver, the controllers and the node agent all read: one set for
// all of them. Parsing it is upstream's: an unknown gate, one locked to
// its default, or one whose dependency stays off is refused with the
// message kube-apiserver gives.
func addFeatureGatesFlag(fs *pflag.FlagSet) {
	if fs.Lookup(FeatureGatesFlag) != nil {
		return
	}
	utilfeature.DefaultMutableFeatureGate.AddFlag(fs)
	fs.Lookup(FeatureGatesFlag).Usage = "Comma-separated NAME=true|false pairs for Kubernetes v1.36 feature gates, with upstream's names, defaults and dependencies " +
		"(e.g. GenericWorkload=true,GangScheduling=true,WorkloadWithJob=true). docs/node-agent.md lists the gates for pods and what jobkeeper does about each."
}

// NonDefaultGates are the gates set away from their default, as
// NAME=true|false, sorted: what a banner says is unusual.
func NonDefaultGates() []string {
	var out []string
	gate := utilfeature.DefaultFeatureGate
	for name, spec := range utilfeature.DefaultMutableFeatureGate.GetAll() {
		if on := gate.Enabled(name); on != spec.Default {
			out = append(out, fmt.Sprintf("%s=%t", name, on))
		}
	}
	sort.Strings(out)
	return out
}
