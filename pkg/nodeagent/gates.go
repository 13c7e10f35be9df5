package nodeagent

import (
	"sort"

	"k8s.io/component-base/featuregate"
)

// unhonouredGates are the v1.36 gates, off by default, that change what a
// kubelet does for pods and that the agent does not do: turned on (up
// --feature-gates), the apiserver would accept the fields they guard and
// the agent would run such pods as something else, so up refuses to
// start instead (GatesNotHonoured). Gates that only change how a kubelet
// works inside (EventedPLEG, CRIListStreaming,
// PodAndContainerStatsFromCRI), concern what up has not (Windows, CPU and
// topology managers' options, several nodes), or that the agent honours
// (GangScheduling, docs/node-agent.md) are not listed.
var unhonouredGates = map[featuregate.Feature]string{
	"ContainerStopSignals":                     "containers' lifecycle.stopSignal",
	"ClusterTrustBundleProjection":             "clusterTrustBundle projected volumes",
	"PodCertificateRequest":                    "podCertificate projected volumes",
	"ImageVolumeWithDigest":                    "the image digest in the status of image volumes",
	"InPlacePodVerticalScalingExclusiveCPUs":   "resizing pods with exclusive CPUs",
	"InPlacePodVerticalScalingExclusiveMemory": "resizing pods with exclusive memory",
	"MemoryQoS":                          "memory.high throttling (cgroup v2 memory QoS)",
	"PodLevelResourceManagers":           "pod-level resources in the CPU, memory and topology managers",
	"PodLogsQuerySplitStreams":           "logs of one stream (stdout or stderr) only",
	"ReduceDefaultCrashLoopBackOffDecay": "a shorter crash-loop back-off",
	"SELinuxMount":                       "SELinux labels by mount option",
	"DRAWorkloadResourceClaims":          "resource claims of workloads",
	"QOSReserved":                        "memory reserved from lower QoS classes",
	"PodsAPI":                            "the kubelet's pods API",
}

// GatesNotHonoured lists, sorted, the gates enabled (by enabled) that the
// agent does not honour, each with what it would have turned on.
func GatesNotHonoured(enabled func(featuregate.Feature) bool) []string {
	var out []string
	for gate, what := range unhonouredGates {
		if enabled(gate) {
			out = append(out, string(gate)+" ("+what+")")
		}
	}
	sort.Strings(out)
	return out
}
