package cgroup

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
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

// ContainerLeaf is the name of a container attempt's cgroup below its
// pod's.
func ContainerLeaf(container string, attempt int32) string {
	return fmt.Sprintf("%s-%d", container, attempt)
}

// PodResources is what the kubelet writes into a pod's cgroup.
func PodResources(pod *corev1.Pod) *cm.ResourceConfig {
	return cm.ResourceConfigForPod(pod, true, cm.QuotaPeriod, false, "")
}

// ContainerResources is what the kubelet asks its runtime to write into
// the cgroup of container c of pod, in CRI's terms: the memory limit (and
// no swap beyond it), CPU shares from the request (or the limit when only
// that is set), the CFS quota from the CPU limit over the default period,
// and, on cgroup v2 (unified), an OOM kill of the whole container rather
// than of one of its processes, as the kubelet asks by default there. A
// limit the container does not set is the pod's (pod-level resources),
// where the pod sets one. pod may be nil (no pod-level resources).
func ContainerResources(pod *corev1.Pod, c *corev1.Container, unified bool) *runtimeapi.LinuxContainerResources {
	req, hasReq := c.Resources.Requests[corev1.ResourceCPU]
	lim, hasLim := c.Resources.Limits[corev1.ResourceCPU]
	memLimit, hasMemLimit := c.Resources.Limits[corev1.ResourceMemory]
	if pod != nil && resourcehelper.IsPodLevelResourcesSet(pod) {
		if lim.IsZero() {
			lim, hasLim = pod.Spec.Resources.Limits[corev1.ResourceCPU]
		}
		if memLimit.IsZero() {
			memLimit, hasMemLimit = pod.Spec.Resources.Limits[corev1.ResourceMemory]
		}
	}
	r := &runtimeapi.LinuxContainerResources{CpuPeriod: int64(cm.QuotaPeriod)}
	if !hasReq && hasLim {
		r.CpuShares = int64(cm.MilliCPUToShares(lim.MilliValue()))
	} else {
		r.CpuShares = int64(cm.MilliCPUToShares(req.MilliValue()))
	}
	r.CpuQuota = cm.MilliCPUToQuota(lim.MilliValue(), r.CpuPeriod)
	if hasMemLimit && !memLimit.IsZero() {
		r.MemoryLimitInBytes = memLimit.Value()
		r.MemorySwapLimitInBytes = r.MemoryLimitInBytes
	}
	if unified {
		r.Unified = map[string]string{"memory.oom.group": "1"}
	}
	return r
}

// resourceConfig is how the kubelet's cgroup manager takes a container's
// resources.
func resourceConfig(r *runtimeapi.LinuxContainerResources, unified bool) *cm.ResourceConfig {
	shares := uint64(r.CpuShares)
	period := uint64(r.CpuPeriod)
	rc := &cm.ResourceConfig{CPUShares: &shares, CPUPeriod: &period}
	if r.CpuQuota > 0 {
		quota := r.CpuQuota
		rc.CPUQuota = &quota
	}
	if r.MemoryLimitInBytes > 0 {
		mem := r.MemoryLimitInBytes
		rc.Memory = &mem
	}
	if unified {
		rc.Unified = map[string]string{}
		for k, v := range r.Unified {
			rc.Unified[k] = v
		}
		if r.MemoryLimitInBytes > 0 && r.MemorySwapLimitInBytes == r.MemoryLimitInBytes {
			// v2 counts swap apart from memory.
			rc.Unified["memory.swap.max"] = "0"
		}
	}
	return rc
}

// Widest is, field by field, the larger of two pod cgroup configs (a
// lifted limit, -1, being the largest): what a pod's cgroup holds while
// an in-place resize moves its containers from a to b, so that it is
// never below what any of them has on the way.
func Widest(a, b *cm.ResourceConfig) *cm.ResourceConfig {
	limit := func(x, y *int64) *int64 {
		switch {
		case x == nil:
			return y
		case y == nil:
			return x
		case *x < 0 || *y < 0:
			v := int64(-1)
			return &v
		case *x > *y:
			return x
		default:
			return y
		}
	}
	out := *b
	out.Memory = limit(a.Memory, b.Memory)
	out.CPUQuota = limit(a.CPUQuota, b.CPUQuota)
	if a.CPUShares != nil && (b.CPUShares == nil || *a.CPUShares > *b.CPUShares) {
		out.CPUShares = a.CPUShares
	}
	return &out
}
