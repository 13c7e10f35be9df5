package binder

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func podWithCPU(cpu ...string) *corev1.Pod {
	p := &corev1.Pod{}
	for _, c := range cpu {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(c)}}})
	}
	return p
}

func TestPodRequests(t *testing.T) {
	withInit := podWithCPU("100m", "200m")
	// Requests as the apiserver defaults them (from the limits).
	withInit.Spec.InitContainers = []corev1.Container{{Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}}
	always := corev1.ContainerRestartPolicyAlways
	withSidecar := podWithCPU("100m")
	withSidecar.Spec.InitContainers = []corev1.Container{{RestartPolicy: &always, Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m")}}}}
	withGPU := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
		"example.com/gpu": resource.MustParse("2"), corev1.ResourceEphemeralStorage: resource.MustParse("1Ki")}}}}}}
	withOverhead := podWithCPU("100m")
	withOverhead.Spec.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m")}
	cases := map[string]struct {
		pod  *corev1.Pod
		want Requests
	}{
		"sum of containers":                        {pod: podWithCPU("100m", "200m"), want: Requests{CPUMilli: 300}},
		"largest init wins":                        {pod: withInit, want: Requests{CPUMilli: 1000}},
		"overhead is added":                        {pod: withOverhead, want: Requests{CPUMilli: 150}},
		"no requests":                              {pod: &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{}}}}, want: Requests{}},
		"a sidecar adds to the containers":         {pod: withSidecar, want: Requests{CPUMilli: 150}},
		"extended resources and ephemeral storage": {pod: withGPU, want: Requests{Scalar: map[corev1.ResourceName]int64{"example.com/gpu": 2, corev1.ResourceEphemeralStorage: 1024}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, PodRequests(tc.pod), cmp.AllowUnexported(Requests{})); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBoundPodRequests: a pod on the node counts, container by
// container, for the larger of its spec (a resize not yet allocated) and
// its status (allocated, running with), as the scheduler counts it.
func TestBoundPodRequests(t *testing.T) {
	cpu := func(q string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(q)}
	}
	withStatus := func(spec, allocated, running string) *corev1.Pod {
		p := podWithCPU(spec)
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: p.Spec.Containers[0].Name,
			AllocatedResources: cpu(allocated), Resources: &corev1.ResourceRequirements{Requests: cpu(running)}}}
		return p
	}
	cases := map[string]struct {
		pod  *corev1.Pod
		want int64
	}{
		"no status: the spec":            {pod: podWithCPU("100m"), want: 100},
		"a resize up not yet allocated":  {pod: withStatus("500m", "100m", "100m"), want: 500},
		"a resize down not yet actuated": {pod: withStatus("100m", "100m", "500m"), want: 500},
		"allocated and running the spec": {pod: withStatus("200m", "200m", "200m"), want: 200},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := BoundPodRequests(tc.pod).CPUMilli; got != tc.want {
				t.Errorf("cpu %dm, want %dm", got, tc.want)
			}
		})
	}
	if got := (Requests{CPUMilli: 1, Memory: 5, Scalar: map[corev1.ResourceName]int64{"a": 1}}).Max(Requests{CPUMilli: 3, Memory: 2, Scalar: map[corev1.ResourceName]int64{"a": 2, "b": 1}}); !cmp.Equal(got, Requests{CPUMilli: 3, Memory: 5, Scalar: map[corev1.ResourceName]int64{"a": 2, "b": 1}}) {
		t.Errorf("Max %+v", got)
	}
}

func TestFit(t *testing.T) {
	alloc := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi"), "example.com/gpu": resource.MustParse("1")}
	gpus := func(n string, cpu string) *corev1.Pod {
		p := podWithCPU(cpu)
		p.Spec.Containers[0].Resources.Requests[corev1.ResourceName("example.com/gpu")] = resource.MustParse(n)
		return p
	}
	tpu := podWithCPU("3")
	tpu.Spec.Containers[0].Resources.Requests["example.com/tpu"] = resource.MustParse("1")
	node := nodeOf("n1", nil)
	labelled := node.DeepCopy()
	labelled.Labels["disk"] = "ssd"
	pinned := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{}}, Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"n1"}}}}}}}}}}
	elsewhere := pinned.DeepCopy()
	elsewhere.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields[0].Values = []string{"n2"}
	selected := podWithCPU("1")
	selected.Spec.NodeSelector = map[string]string{"disk": "ssd"}
	cases := map[string]struct {
		pod       *corev1.Pod
		node      *corev1.Node
		used      Requests
		usedPods  int
		maxPods   int
		wantNever string
		wantNow   bool
	}{
		"fits":                                {pod: podWithCPU("1"), maxPods: 10, wantNow: true},
		"node full of pods":                   {pod: podWithCPU("1"), usedPods: 10, maxPods: 10, wantNow: false},
		"cpu taken for now":                   {pod: podWithCPU("1500m"), used: Requests{CPUMilli: 1000}, maxPods: 10, wantNow: false},
		"best effort always":                  {pod: &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{}}}}, used: Requests{CPUMilli: 2000}, maxPods: 10, wantNow: true},
		"too much cpu ever":                   {pod: podWithCPU("3"), maxPods: 10, wantNever: "0/1 nodes are available: 1 Insufficient cpu."},
		"an extended resource the node has":   {pod: gpus("1", "1"), maxPods: 10, wantNow: true},
		"an extended resource taken for now":  {pod: gpus("1", "1"), used: Requests{Scalar: map[corev1.ResourceName]int64{"example.com/gpu": 1}}, maxPods: 10, wantNow: false},
		"more of it than the node has":        {pod: gpus("2", "1"), maxPods: 10, wantNever: "0/1 nodes are available: 1 Insufficient example.com/gpu."},
		"one the node lacks, and cpu, sorted": {pod: tpu, maxPods: 10, wantNever: "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient example.com/tpu."},
		"node selector misses":                {pod: selected, maxPods: 10, wantNever: "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."},
		"a label the user set":                {pod: selected, node: labelled, maxPods: 10, wantNow: true},
		"affinity to this node's name":        {pod: pinned, maxPods: 10, wantNow: true},
		"affinity to another node":            {pod: elsewhere, maxPods: 10, wantNever: "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			n := node
			if tc.node != nil {
				n = tc.node
			}
			if got := neverFits(tc.pod, n, alloc); got != tc.wantNever {
				t.Errorf("neverFits() = %q, want %q", got, tc.wantNever)
			}
			if tc.wantNever != "" {
				return
			}
			if got := fitsNow(PodRequests(tc.pod), tc.used, tc.usedPods, tc.maxPods, alloc); got != tc.wantNow {
				t.Errorf("fitsNow() = %v, want %v", got, tc.wantNow)
			}
		})
	}
}
