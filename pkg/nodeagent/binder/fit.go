package binder

import (
	goruntime "runtime"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
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
	// Scalar are the other resources asked for (ephemeral-storage,
	// hugepages, extended resources such as example.com/gpu), each in its
	// unit (bytes or a count); nil when none.
	Scalar map[corev1.ResourceName]int64
}

// Add returns r+o.
func (r Requests) Add(o Requests) Requests {
	return r.combine(o, 1)
}

// Max returns, resource by resource, the larger of r and o.
func (r Requests) Max(o Requests) Requests {
	out := Requests{CPUMilli: max(r.CPUMilli, o.CPUMilli), Memory: max(r.Memory, o.Memory)}
	for _, s := range []map[corev1.ResourceName]int64{r.Scalar, o.Scalar} {
		for name, v := range s {
			if out.Scalar == nil {
				out.Scalar = map[corev1.ResourceName]int64{}
			}
			out.Scalar[name] = max(out.Scalar[name], v)
		}
	}
	return out
}

// Sub returns r-o.
func (r Requests) Sub(o Requests) Requests {
	return r.combine(o, -1)
}

// combine returns r + sign*o.
func (r Requests) combine(o Requests, sign int64) Requests {
	out := Requests{CPUMilli: r.CPUMilli + sign*o.CPUMilli, Memory: r.Memory + sign*o.Memory}
	if len(r.Scalar)+len(o.Scalar) > 0 {
		out.Scalar = make(map[corev1.ResourceName]int64, len(r.Scalar)+len(o.Scalar))
		for n, v := range r.Scalar {
			out.Scalar[n] = v
		}
		for n, v := range o.Scalar {
			out.Scalar[n] += sign * v
		}
	}
	return out
}

// PodRequests computes a pod's effective requests as the scheduler does,
// with its own helper (k8s.io/component-helpers/resource): the larger of
// what its containers (restartable init containers included) and its
// largest init container ask, pod-level requests where set, plus the pod
// overhead.
func PodRequests(pod *corev1.Pod) Requests {
	return requestsOf(resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}))
}

// BoundPodRequests is what a pod already on the node counts for as the
// scheduler counts it (its NodeInfo, with InPlacePodVerticalScaling):
// container by container, the larger of what the spec asks (a resize
// not yet allocated included) and what the status says the container is
// allocated and runs with, so that room a resize waits for is not given to
// another pod.
func BoundPodRequests(pod *corev1.Pod) Requests {
	return requestsOf(resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{
		UseStatusResources: true, InPlacePodLevelResourcesVerticalScalingEnabled: true}))
}

// requestsOf converts the helper's list.
func requestsOf(list corev1.ResourceList) Requests {
	r := Requests{CPUMilli: list.Cpu().MilliValue(), Memory: list.Memory().Value()}
	for name, q := range list {
		switch name {
		case corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods:
			continue
		}
		if q.IsZero() {
			continue
		}
		if r.Scalar == nil {
			r.Scalar = map[corev1.ResourceName]int64{}
		}
		r.Scalar[name] = q.Value()
	}
	return r
}

// insufficient names, sorted, the resources r asks more of than
// allocatable has beside used, as the scheduler's NodeResourcesFit does:
// only what the pod asks for counts, and the node's memory only when it is
// known.
func insufficient(r, used Requests, allocatable corev1.ResourceList) []string {
	var out []string
	cpu, mem := allocatable[corev1.ResourceCPU], allocatable[corev1.ResourceMemory]
	if r.CPUMilli > 0 && used.CPUMilli+r.CPUMilli > cpu.MilliValue() {
		out = append(out, string(corev1.ResourceCPU))
	}
	if r.Memory > 0 && mem.Value() > 0 && used.Memory+r.Memory > mem.Value() {
		out = append(out, string(corev1.ResourceMemory))
	}
	for name, v := range r.Scalar {
		have := allocatable[name]
		if v > 0 && used.Scalar[name]+v > have.Value() {
			out = append(out, string(name))
		}
	}
	sort.Strings(out)
	return out
}

// insufficientMessage is the scheduler's message for a pod that no node
// has room for.
func insufficientMessage(names []string) string {
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = "1 Insufficient " + n
	}
	return "0/1 nodes are available: " + strings.Join(parts, ", ") + "."
}

// neverFits says why a pod can never run on the node, with the scheduler's
// message, or "" when it can.
func neverFits(pod *corev1.Pod, node *corev1.Node, allocatable corev1.ResourceList) string {
	// The scheduler's NodeAffinity filter: nodeSelector and the required
	// node affinity (label expressions, and fields: metadata.name, which
	// DaemonSet pods carry).
	if ok, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); err != nil || !ok {
		return "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
	}
	if names := insufficient(PodRequests(pod), Requests{}, allocatable); len(names) > 0 {
		return insufficientMessage(names)
	}
	return ""
}

// fitsNow reports whether a pod fits next to what the node already runs.
func fitsNow(r Requests, used Requests, usedPods, maxPods int, allocatable corev1.ResourceList) bool {
	if usedPods+1 > maxPods {
		return false
	}
	return len(insufficient(r, used, allocatable)) == 0
}

// nodeOf is the Node as the binder matches pods against it: the one in
// the API (its labels as users set them), else a Node of name with the
// well-known labels.
func nodeOf(name string, cached *corev1.Node) *corev1.Node {
	if cached != nil {
		return cached
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: NodeLabels(name)}}
}

// NodeLabels are the well-known labels of the node.
func NodeLabels(name string) map[string]string {
	return map[string]string{
		corev1.LabelHostname:   name,
		corev1.LabelOSStable:   goruntime.GOOS,
		corev1.LabelArchStable: goruntime.GOARCH,
	}
}
