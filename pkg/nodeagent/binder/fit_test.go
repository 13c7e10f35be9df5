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
	withInit.Spec.InitContainers = []corev1.Container{{Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}}
	withOverhead := podWithCPU("100m")
	withOverhead.Spec.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m")}
	cases := map[string]struct {
		pod  *corev1.Pod
		want Requests
	}{
		"sum of containers": {pod: podWithCPU("100m", "200m"), want: Requests{CPUMilli: 300}},
		"largest init wins": {pod: withInit, want: Requests{CPUMilli: 1000}},
		"overhead is added": {pod: withOverhead, want: Requests{CPUMilli: 150}},
		"no requests":       {pod: &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{}}}}, want: Requests{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, PodRequests(tc.pod), cmp.AllowUnexported(Requests{})); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFit(t *testing.T) {
	alloc := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi")}
	labels := NodeLabels("n1")
	selected := podWithCPU("1")
	selected.Spec.NodeSelector = map[string]string{"disk": "ssd"}
	cases := map[string]struct {
		pod       *corev1.Pod
		used      Requests
		usedPods  int
		maxPods   int
		wantNever string
		wantNow   bool
	}{
		"fits":                 {pod: podWithCPU("1"), maxPods: 10, wantNow: true},
		"node full of pods":    {pod: podWithCPU("1"), usedPods: 10, maxPods: 10, wantNow: false},
		"cpu taken for now":    {pod: podWithCPU("1500m"), used: Requests{CPUMilli: 1000}, maxPods: 10, wantNow: false},
		"best effort always":   {pod: &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{}}}}, used: Requests{CPUMilli: 2000}, maxPods: 10, wantNow: true},
		"too much cpu ever":    {pod: podWithCPU("3"), maxPods: 10, wantNever: "0/1 nodes are available: 1 Insufficient cpu."},
		"node selector misses": {pod: selected, maxPods: 10, wantNever: "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := neverFits(tc.pod, labels, alloc); got != tc.wantNever {
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
