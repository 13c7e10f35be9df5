package cgroup

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	v1qos "k8s.io/kubernetes/pkg/apis/core/v1/helper/qos"
	"k8s.io/kubernetes/pkg/kubelet/cm"
)

// podsName is the kubelet's top cgroup of pods, below the root.
const podsName = "kubepods"

// Name is a cgroup's name relative to the top of its hierarchy, as the
// kubelet's cgroup manager takes it: one element per level.
type Name = cm.CgroupName

// qosParent is the cgroup below root where the kubelet puts the pods of a
// QoS class.
func qosParent(root Name, qos corev1.PodQOSClass) Name {
	switch qos {
	case corev1.PodQOSBurstable:
		return cm.NewCgroupName(root, podsName, "burstable")
	case corev1.PodQOSBestEffort:
		return cm.NewCgroupName(root, podsName, "besteffort")
	default:
		return cm.NewCgroupName(root, podsName)
	}
}

// PodName is the pod's cgroup below root.
func PodName(root Name, pod *corev1.Pod) Name {
	return cm.NewCgroupName(qosParent(root, v1qos.GetPodQOS(pod)), cm.GetPodCgroupNameSuffix(pod.UID))
}

// podNames are every cgroup the pod of uid may have below root (its QoS
// class decides which), for removing one whose pod is gone.
func podNames(root Name, uid string) []Name {
	var out []Name
	for _, q := range []corev1.PodQOSClass{corev1.PodQOSGuaranteed, corev1.PodQOSBurstable, corev1.PodQOSBestEffort} {
		out = append(out, cm.NewCgroupName(qosParent(root, q), "pod"+uid))
	}
	return out
}

// ContainerName is the cgroup of a container's attempt below its pod's.
func ContainerName(pod Name, container string, attempt int32) Name {
	return cm.NewCgroupName(pod, fmt.Sprintf("%s-%d", container, attempt))
}

// PodResources is what the kubelet writes into a pod's cgroup.
func PodResources(pod *corev1.Pod) *cm.ResourceConfig {
	return cm.ResourceConfigForPod(pod, true, cm.QuotaPeriod, false, "")
}

// ContainerResources is what the kubelet asks its runtime to write into
// a container's cgroup: the memory limit, CPU shares from the request (or
// the limit when only that is set), the CFS quota from the CPU limit over
// the default period, and, on cgroup v2 (unified), an OOM kill of the
// whole container rather than of one of its processes, as the kubelet
// asks by default there.
func ContainerResources(c *corev1.Container, unified bool) *cm.ResourceConfig {
	req, hasReq := c.Resources.Requests[corev1.ResourceCPU]
	lim, hasLim := c.Resources.Limits[corev1.ResourceCPU]
	var shares uint64
	if !hasReq && hasLim {
		shares = cm.MilliCPUToShares(lim.MilliValue())
	} else {
		shares = cm.MilliCPUToShares(req.MilliValue())
	}
	period := uint64(cm.QuotaPeriod)
	quota := cm.MilliCPUToQuota(lim.MilliValue(), int64(period))
	rc := &cm.ResourceConfig{CPUShares: &shares, CPUPeriod: &period}
	if quota > 0 {
		rc.CPUQuota = &quota
	}
	if m, ok := c.Resources.Limits[corev1.ResourceMemory]; ok && !m.IsZero() {
		v := m.Value()
		rc.Memory = &v
	}
	if unified {
		rc.Unified = map[string]string{"memory.oom.group": "1"}
		if rc.Memory != nil {
			// No swap, as the kubelet's default NoSwap behaviour.
			rc.Unified["memory.swap.max"] = "0"
		}
	}
	return rc
}

// Describe says, for messages, what a resource config limits.
func Describe(rc *cm.ResourceConfig) string {
	var parts []string
	if rc.Memory != nil {
		parts = append(parts, "memory "+resource.NewQuantity(*rc.Memory, resource.BinarySI).String())
	}
	if rc.CPUQuota != nil && rc.CPUPeriod != nil && *rc.CPUPeriod > 0 {
		parts = append(parts, fmt.Sprintf("cpu %dm", cm.QuotaToMilliCPU(*rc.CPUQuota, int64(*rc.CPUPeriod))))
	}
	if len(parts) == 0 {
		return "no limits"
	}
	return strings.Join(parts, ", ")
}
