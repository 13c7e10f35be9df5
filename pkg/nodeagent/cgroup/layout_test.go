package cgroup

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm"
)

func TestPodName(t *testing.T) {
	root := cm.ParseCgroupfsToCgroupName("/r")
	res := func(req, lim string) corev1.ResourceRequirements {
		r := corev1.ResourceRequirements{}
		if req != "" {
			r.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(req), corev1.ResourceMemory: resource.MustParse("1Gi")}
		}
		if lim != "" {
			r.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(lim), corev1.ResourceMemory: resource.MustParse("1Gi")}
		}
		return r
	}
	for name, tc := range map[string]struct {
		res  corev1.ResourceRequirements
		want string
	}{
		"Guaranteed": {res("1", "1"), "/r/kubepods/podu1"},
		"Burstable":  {res("500m", "1"), "/r/kubepods/burstable/podu1"},
		"BestEffort": {res("", ""), "/r/kubepods/besteffort/podu1"},
	} {
		t.Run(name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u1"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: tc.res}}}}
			if got := PodName(root, pod).ToCgroupfs(); got != tc.want {
				t.Errorf("PodName = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestContainerResources(t *testing.T) {
	for name, tc := range map[string]struct {
		requests, limits corev1.ResourceList
		unified          bool
		want             *runtimeapi.LinuxContainerResources
	}{
		"nothing: the smallest weight, no quota": {
			want: &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuShares: 2},
		},
		"cpu request and limit, memory limit": {
			requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")},
			limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
			want:     &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuShares: 256, CpuQuota: 50000, MemoryLimitInBytes: 32 << 20, MemorySwapLimitInBytes: 32 << 20},
		},
		"cpu limit only: the weight follows it": {
			limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
			want:   &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuShares: 2048, CpuQuota: 200000},
		},
		"v2: the whole container is OOM killed": {
			limits:  corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
			unified: true,
			want:    &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuShares: 2, MemoryLimitInBytes: 1 << 30, MemorySwapLimitInBytes: 1 << 30, Unified: map[string]string{"memory.oom.group": "1"}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := &corev1.Container{Resources: corev1.ResourceRequirements{Requests: tc.requests, Limits: tc.limits}}
			if diff := cmp.Diff(tc.want, ContainerResources(nil, c, tc.unified), protocmp.Transform()); diff != "" {
				t.Errorf("ContainerResources (-want +got):\n%s", diff)
			}
		})
	}
}

func TestResourceConfigNoSwapOnV2(t *testing.T) {
	r := &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuShares: 2, MemoryLimitInBytes: 1 << 20, MemorySwapLimitInBytes: 1 << 20, Unified: map[string]string{"memory.oom.group": "1"}}
	rc := resourceConfig(r, true)
	if rc.Memory == nil || *rc.Memory != 1<<20 || rc.CPUQuota != nil {
		t.Errorf("memory %v, quota %v; want 1MiB and none", rc.Memory, rc.CPUQuota)
	}
	if diff := cmp.Diff(map[string]string{"memory.oom.group": "1", "memory.swap.max": "0"}, rc.Unified); diff != "" {
		t.Errorf("unified (-want +got):\n%s", diff)
	}
	if v1 := resourceConfig(r, false); v1.Unified != nil {
		t.Errorf("unified files on v1: %v", v1.Unified)
	}
}

func TestWidest(t *testing.T) {
	i := func(v int64) *int64 { return &v }
	u := func(v uint64) *uint64 { return &v }
	a := &cm.ResourceConfig{Memory: i(100), CPUQuota: i(-1), CPUShares: u(512), CPUPeriod: u(100000)}
	b := &cm.ResourceConfig{Memory: i(200), CPUQuota: i(50000), CPUShares: u(256), CPUPeriod: u(100000)}
	w := Widest(a, b)
	if *w.Memory != 200 || *w.CPUQuota != -1 || *w.CPUShares != 512 {
		t.Errorf("Widest = memory %d, quota %d, shares %d; want 200, -1 (none), 512", *w.Memory, *w.CPUQuota, *w.CPUShares)
	}
	if w = Widest(&cm.ResourceConfig{}, b); *w.Memory != 200 || *w.CPUQuota != 50000 {
		t.Errorf("Widest of nothing and b = memory %d, quota %d; want b's", *w.Memory, *w.CPUQuota)
	}
}
