package nodeagent

import (
	"slices"
	"testing"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
)

// TestGatesNotHonoured: the listed gates are v1.36's, off by default, and
// only those turned on are named.
func TestGatesNotHonoured(t *testing.T) {
	all := utilfeature.DefaultMutableFeatureGate.GetAll()
	for gate := range unhonouredGates {
		spec, ok := all[gate]
		if !ok {
			t.Errorf("%s is no v1.36 feature gate", gate)
			continue
		}
		if spec.Default {
			t.Errorf("%s is on by default: up could never start", gate)
		}
	}
	if got := GatesNotHonoured(utilfeature.DefaultFeatureGate.Enabled); len(got) != 0 {
		t.Errorf("at the default gates: %v, want none", got)
	}
	on := map[featuregate.Feature]bool{"ContainerStopSignals": true, "GangScheduling": true, "MemoryQoS": true}
	got := GatesNotHonoured(func(f featuregate.Feature) bool { return on[f] })
	want := []string{"ContainerStopSignals (containers' lifecycle.stopSignal)", "MemoryQoS (memory.high throttling (cgroup v2 memory QoS))"}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
