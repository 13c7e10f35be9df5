package binder

import (
	"fmt"
	goruntime "runtime"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// ReasonUnschedulable is the PodScheduled=False reason of a pod that can
// never fit the node (the scheduler's reason).
const ReasonUnschedulable = corev1.PodReasonUnschedulable

// Requests is what a pod asks of the node.
type Requests struct {
	// CPUMilli is the CPU request in millicores.
	CPUMilli int64
	// Memory is the memory request in bytes.
	Memory int64
}

// Add returns r+o.
func (r Requests) Add(o Requests) Requests {
	return Requests{CPUMilli: r.CPUMilli + o.CPUMilli, Memory: r.Memory + o.Memory}
}

// PodRequests computes a pod's effective requests as the scheduler does:
// the larger of the sum of its containers and its largest init container,
// plus the pod overhead.
func PodRequests(pod *corev1.Pod) Requests {
	var sum, maxInit Requests
	for _, c := range pod.Spec.Containers {
		sum = sum.Add(containerRequests(&c))
	}
	for _, c := range pod.Spec.InitContainers {
		r := containerRequests(&c)
		maxInit.CPUMilli = max(maxInit.CPUMilli, r.CPUMilli)
		maxInit.Memory = max(maxInit.Memory, r.Memory)
	}
	out := Requests{CPUMilli: max(sum.CPUMilli, maxInit.CPUMilli), Memory: max(sum.Memory, maxInit.Memory)}
	if q, ok := pod.Spec.Overhead[corev1.ResourceCPU]; ok {
		out.CPUMilli += q.MilliValue()
	}
	if q, ok := pod.Spec.Overhead[corev1.ResourceMemory]; ok {
		out.Memory += q.Value()
	}
	return out
}

// containerRequests reads a container's requests (limits when requests are unset).
func containerRequests(c *corev1.Container) Requests {
	var r Requests
	if q, ok := c.Resources.Requests[corev1.ResourceCPU]; ok {
		r.CPUMilli = q.MilliValue()
	} else if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		r.CPUMilli = q.MilliValue()
	}
	if q, ok := c.Resources.Requests[corev1.ResourceMemory]; ok {
		r.Memory = q.Value()
	} else if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		r.Memory = q.Value()
	}
	return r
}

// neverFits says why a pod can never run on the node, with the scheduler's
// message, or "" when it can.
func neverFits(pod *corev1.Pod, nodeLabels map[string]string, allocatable corev1.ResourceList) string {
	if len(pod.Spec.NodeSelector) > 0 && !labels.SelectorFromSet(pod.Spec.NodeSelector).Matches(labels.Set(nodeLabels)) {
		return "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
	}
	r := PodRequests(pod)
	cpu, mem := allocatable[corev1.ResourceCPU], allocatable[corev1.ResourceMemory]
	var insufficient []string
	if r.CPUMilli > cpu.MilliValue() {
		insufficient = append(insufficient, "cpu")
	}
	if mem.Value() > 0 && r.Memory > mem.Value() {
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
func fitsNow(r Requests, used Requests, usedPods, maxPods int, allocatable corev1.ResourceList) bool {
	if usedPods+1 > maxPods {
		return false
	}
	cpu, mem := allocatable[corev1.ResourceCPU], allocatable[corev1.ResourceMemory]
	if r.CPUMilli > 0 && used.CPUMilli+r.CPUMilli > cpu.MilliValue() {
		return false
	}
	if r.Memory > 0 && mem.Value() > 0 && used.Memory+r.Memory > mem.Value() {
		return false
	}
	return true
}

// NodeLabels are the well-known labels of the node.
func NodeLabels(name string) map[string]string {
	return map[string]string{
		corev1.LabelHostname:   name,
		corev1.LabelOSStable:   goruntime.GOOS,
		corev1.LabelArchStable: goruntime.GOARCH,
	}
}
