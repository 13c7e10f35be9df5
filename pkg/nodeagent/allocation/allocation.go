// Package allocation decides in-place pod resizes as the kubelet's
// allocation manager does (InPlacePodVerticalScaling, GA in Kubernetes
// v1.35; pod-level resources, beta and on in v1.36): what a pod's
// containers are allocated, whether a resize asked through the pod's
// resize subresource fits the node now (allocated), later (Deferred) or
// never (Infeasible), and what each running container needs for its
// resources to match its allocation (an update of its cgroup in place, or
// a restart when its resizePolicy asks for one).
//
// Everything here is pure: the node agent's worker holds the state,
// carries out the decisions and reports them in the pod's status.
package allocation

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/binder"
)

// Allocation is what the node allocated to one pod: the resources of each
// of its containers (init and regular, by name) and its pod-level ones.
type Allocation struct {
	// Containers are the containers' resources, by name.
	Containers map[string]corev1.ResourceRequirements
	// Pod are the pod-level resources; nil when the pod has none.
	Pod *corev1.ResourceRequirements
}

// FromSpec is the allocation a pod's spec asks for: what the node
// allocates when it admits the pod, and what a resize asks for.
func FromSpec(pod *corev1.Pod) Allocation {
	a := Allocation{Containers: make(map[string]corev1.ResourceRequirements, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))}
	for _, c := range pod.Spec.InitContainers {
		a.Containers[c.Name] = *c.Resources.DeepCopy()
	}
	for _, c := range pod.Spec.Containers {
		a.Containers[c.Name] = *c.Resources.DeepCopy()
	}
	if pod.Spec.Resources != nil {
		a.Pod = pod.Spec.Resources.DeepCopy()
	}
	return a
}

// Restore is the allocation of a pod the agent admitted in an earlier
// run, as its status reports what was actuated: a container's
// status.resources where the status has them, its spec's otherwise. The
// API is the agent's checkpoint; a resize that was not through when the
// agent stopped is decided again.
func Restore(pod *corev1.Pod) Allocation {
	a := FromSpec(pod)
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, st := range list {
			if _, ok := a.Containers[st.Name]; ok && st.Resources != nil {
				a.Containers[st.Name] = *st.Resources.DeepCopy()
			}
		}
	}
	if a.Pod != nil && pod.Status.Resources != nil {
		a.Pod = pod.Status.Resources.DeepCopy()
	}
	return a
}

// Equal reports whether two allocations are the same, quantities compared
// by value (1000m and 1 are equal).
func (a Allocation) Equal(b Allocation) bool {
	if len(a.Containers) != len(b.Containers) || !equality.Semantic.DeepEqual(a.Pod, b.Pod) {
		return false
	}
	for name, r := range a.Containers {
		o, ok := b.Containers[name]
		if !ok || !SameResources(r, o) {
			return false
		}
	}
	return true
}

// SameResources reports whether two containers' resources are the same,
// an empty list and none being the same.
func SameResources(a, b corev1.ResourceRequirements) bool {
	return sameList(a.Requests, b.Requests) && sameList(a.Limits, b.Limits)
}

// sameList compares resource lists by value.
func sameList(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for name, q := range a {
		o, ok := b[name]
		if !ok || q.Cmp(o) != 0 {
			return false
		}
	}
	return true
}

// Apply returns a copy of pod whose spec carries the allocation, as the
// kubelet runs a pod: its containers start, and its cgroups are written,
// with what was allocated, not with what a pending resize asks.
func (a Allocation) Apply(pod *corev1.Pod) *corev1.Pod {
	out := pod.DeepCopy()
	for i := range out.Spec.InitContainers {
		if r, ok := a.Containers[out.Spec.InitContainers[i].Name]; ok {
			out.Spec.InitContainers[i].Resources = *r.DeepCopy()
		}
	}
	for i := range out.Spec.Containers {
		if r, ok := a.Containers[out.Spec.Containers[i].Name]; ok {
			out.Spec.Containers[i].Resources = *r.DeepCopy()
		}
	}
	if a.Pod != nil {
		out.Spec.Resources = a.Pod.DeepCopy()
	}
	return out
}

// Verdict is the decision on a resize.
type Verdict struct {
	// Fit is true when the resize is allocated now.
	Fit bool
	// Reason is corev1.PodReasonDeferred or corev1.PodReasonInfeasible
	// when it is not; Message says why, as the kubelet says it.
	Reason, Message string
}

// Admit decides a resize as the kubelet's admission does it for a resize:
// the pod's requests with the resize (want) must fit the node's
// allocatable beside what the other admitted pods are allocated (others).
// A resize that does not fit now waits (Deferred): the kubelet tries it
// again as other pods end or shrink. The message names the first resource
// short, in the scheduler's order: cpu, memory, ephemeral-storage, then
// the others by name.
func Admit(want, others binder.Requests, allocatable corev1.ResourceList) Verdict {
	type check struct {
		name            corev1.ResourceName
		req, used, have int64
	}
	cpu, mem := allocatable[corev1.ResourceCPU], allocatable[corev1.ResourceMemory]
	checks := []check{
		{corev1.ResourceCPU, want.CPUMilli, others.CPUMilli, cpu.MilliValue()},
		{corev1.ResourceMemory, want.Memory, others.Memory, mem.Value()},
	}
	var names []corev1.ResourceName
	for name := range want.Scalar {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool {
		// ephemeral-storage first, as the scheduler checks it.
		if (names[i] == corev1.ResourceEphemeralStorage) != (names[j] == corev1.ResourceEphemeralStorage) {
			return names[i] == corev1.ResourceEphemeralStorage
		}
		return names[i] < names[j]
	})
	for _, name := range names {
		have := allocatable[name]
		checks = append(checks, check{name, want.Scalar[name], others.Scalar[name], have.Value()})
	}
	for _, c := range checks {
		if c.req > 0 && c.used+c.req > c.have {
			return Verdict{Reason: corev1.PodReasonDeferred, Message: fmt.Sprintf(
				"Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d", c.name, c.req, c.used, c.have)}
		}
	}
	return Verdict{Fit: true}
}

// NeedsRestart reports whether a running container given actual must be
// restarted to get allocated, as the kubelet decides it: when one of the
// values that changed (CPU or memory, request or limit) belongs to a
// resource whose resizePolicy is RestartContainer. Other changes are made
// in place; a resource without a policy is NotRequired.
func NeedsRestart(c *corev1.Container, actual, allocated corev1.ResourceRequirements) bool {
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if sameValue(actual.Requests, allocated.Requests, name) && sameValue(actual.Limits, allocated.Limits, name) {
			continue
		}
		for _, p := range c.ResizePolicy {
			if p.ResourceName == name && p.RestartPolicy == corev1.RestartContainer {
				return true
			}
		}
	}
	return false
}

// sameValue reports whether two lists have the same value of name (both
// without it counting as the same).
func sameValue(a, b corev1.ResourceList, name corev1.ResourceName) bool {
	qa, oka := a[name]
	qb, okb := b[name]
	return oka == okb && qa.Cmp(qb) == 0
}

// Effective are a container's resources as its cgroup gets them: a CPU or
// memory limit it does not set is the pod's (pod-level resources).
func Effective(podLevel *corev1.ResourceRequirements, c corev1.ResourceRequirements) corev1.ResourceRequirements {
	if podLevel == nil {
		return c
	}
	out := *c.DeepCopy()
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := out.Limits[name]; ok && !q.IsZero() {
			continue
		}
		if q, ok := podLevel.Limits[name]; ok {
			if out.Limits == nil {
				out.Limits = corev1.ResourceList{}
			}
			out.Limits[name] = q.DeepCopy()
		}
	}
	return out
}
