package nodeagent

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// ReasonUnschedulable is the PodScheduled=False reason of a pod that can
// never fit the node (the scheduler's reason).
const ReasonUnschedulable = corev1.PodReasonUnschedulable

// requests is what a pod asks of the node.
type requests struct {
	// cpuMilli is the CPU request in millicores.
	cpuMilli int64
	// memory is the memory request in bytes.
	memory int64
}

// add returns r+o.
func (r requests) add(o requests) requests {
	return requests{cpuMilli: r.cpuMilli + o.cpuMilli, memory: r.memory + o.memory}
}

// podRequests computes a pod's effective requests as the scheduler does:
// the larger of the sum of its containers and its largest init container,
// plus the pod overhead.
func podRequests(pod *corev1.Pod) requests {
	var sum, maxInit requests
	for _, c := range pod.Spec.Containers {
		sum = sum.add(containerRequests(&c))
	}
	for _, c := range pod.Spec.InitContainers {
		r := containerRequests(&c)
		maxInit.cpuMilli = max(maxInit.cpuMilli, r.cpuMilli)
		maxInit.memory = max(maxInit.memory, r.memory)
	}
	out := requests{cpuMilli: max(sum.cpuMilli, maxInit.cpuMilli), memory: max(sum.memory, maxInit.memory)}
	if q, ok := pod.Spec.Overhead[corev1.ResourceCPU]; ok {
		out.cpuMilli += q.MilliValue()
	}
	if q, ok := pod.Spec.Overhead[corev1.ResourceMemory]; ok {
		out.memory += q.Value()
	}
	return out
}

// containerRequests reads a container's requests (limits when requests are unset).
func containerRequests(c *corev1.Container) requests {
	var r requests
	if q, ok := c.Resources.Requests[corev1.ResourceCPU]; ok {
		r.cpuMilli = q.MilliValue()
	} else if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		r.cpuMilli = q.MilliValue()
	}
	if q, ok := c.Resources.Requests[corev1.ResourceMemory]; ok {
		r.memory = q.Value()
	} else if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		r.memory = q.Value()
	}
	return r
}

// neverFits says why a pod can never run on the node, with the scheduler's
// message, or "" when it can.
func neverFits(pod *corev1.Pod, nodeLabels map[string]string, allocatable corev1.ResourceList) string {
	if len(pod.Spec.NodeSelector) > 0 && !labels.SelectorFromSet(pod.Spec.NodeSelector).Matches(labels.Set(nodeLabels)) {
		return "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
	}
	r := podRequests(pod)
	cpu, mem := allocatable[corev1.ResourceCPU], allocatable[corev1.ResourceMemory]
	var insufficient []string
	if r.cpuMilli > cpu.MilliValue() {
		insufficient = append(insufficient, "cpu")
	}
	if mem.Value() > 0 && r.memory > mem.Value() {
		insufficient = append(insufficient, "memory")
	}
	switch len(insufficient) {
	case 0:
		return ""
	case 1:
		return fmt.Sprintf("0/1 nodes are available: 1 Insufficient %s.", insufficient[0])
	default:
		return "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory."
	}
}

// fitsNow reports whether a pod fits next to what the node already runs.
func fitsNow(r requests, used requests, usedPods, maxPods int, allocatable corev1.ResourceList) bool {
	if usedPods+1 > maxPods {
		return false
	}
	cpu, mem := allocatable[corev1.ResourceCPU], allocatable[corev1.ResourceMemory]
	if r.cpuMilli > 0 && used.cpuMilli+r.cpuMilli > cpu.MilliValue() {
		return false
	}
	if r.memory > 0 && mem.Value() > 0 && used.memory+r.memory > mem.Value() {
		return false
	}
	return true
}
