package nodeagent

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// TestHostCapacity: the node advertises the filesystem of its data
// directory as ephemeral-storage and the extended resources it is given.
func TestHostCapacity(t *testing.T) {
	c := hostCapacity(3, t.TempDir()+"/not/yet", map[corev1.ResourceName]int64{"example.com/gpu": 2})
	if q := c[corev1.ResourceEphemeralStorage]; q.Value() <= 0 {
		t.Errorf("ephemeral-storage %v, want the data directory's filesystem size", q.String())
	}
	if q := c["example.com/gpu"]; q.Value() != 2 {
		t.Errorf("example.com/gpu %v, want 2", q.String())
	}
	if q := c[corev1.ResourcePods]; q.Value() != 3 {
		t.Errorf("pods %v, want 3", q.String())
	}
}

// TestHostInfo: kubectl get nodes -o wide shows the kernel and the OS.
func TestHostInfo(t *testing.T) {
	info := hostInfo()
	if info.KernelVersion == "" || info.OSImage == "" || info.BootID == "" {
		t.Errorf("node info %+v lacks the kernel, the OS image or the boot id", info)
	}
	if info.OperatingSystem != "linux" || info.KubeletVersion != KubeletVersion {
		t.Errorf("node info %+v", info)
	}
}

// TestExtendedResourceOptions: a name that is not an extended resource,
// or a negative count, is refused, naming it.
func TestExtendedResourceOptions(t *testing.T) {
	for name, tc := range map[string]struct {
		res  map[corev1.ResourceName]int64
		want string
	}{
		"fine":                 {res: map[corev1.ResourceName]int64{"example.com/gpu": 1}},
		"not domain-qualified": {res: map[corev1.ResourceName]int64{"gpu": 1}, want: `extended resource "gpu": not an extended resource name`},
		"kubernetes.io's":      {res: map[corev1.ResourceName]int64{"kubernetes.io/gpu": 1}, want: `extended resource "kubernetes.io/gpu"`},
		"negative":             {res: map[corev1.ResourceName]int64{"example.com/gpu": -1}, want: `extended resource "example.com/gpu": count -1 is negative`},
	} {
		t.Run(name, func(t *testing.T) {
			o := Options{DataDir: t.TempDir(), ExtendedResources: tc.res}
			err := o.complete()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("complete() = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestAllocatableIsCapacityLessReserved(t *testing.T) {
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi"),
		corev1.ResourcePods: resource.MustParse("110")}
	got := allocatableOf(capacity, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("1Gi")})
	if cpu := got[corev1.ResourceCPU]; cpu.MilliValue() != 1500 {
		t.Errorf("allocatable cpu %s, want 1500m", cpu.String())
	}
	if mem := got[corev1.ResourceMemory]; !mem.IsZero() {
		t.Errorf("allocatable memory %s, want 0 (more reserved than there is)", mem.String())
	}
	if _, ok := got[corev1.ResourceEphemeralStorage]; ok {
		t.Error("a reservation of a resource the node does not report added it")
	}
	if pods := got[corev1.ResourcePods]; pods.Value() != 110 {
		t.Errorf("pods %s", pods.String())
	}
	if c := capacity[corev1.ResourceCPU]; c.MilliValue() != 2000 {
		t.Error("allocatableOf changed the capacity")
	}
	if err := ValidateSystemReserved(corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1")}); err == nil {
		t.Error("reserving pods accepted")
	}
}

// TestSystemReservedLeavesAllocatable: the Node reports its allocatable as
// its capacity less --system-reserved (the binder and resizes use that).
func TestSystemReservedLeavesAllocatable(t *testing.T) {
	opts := Options{MaxPods: 5, Runtime: "simulated", SystemReserved: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}}
	ta := startAgentWith(t, opts)
	var node *corev1.Node
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := ta.client.CoreV1().Nodes().Get(ctx, testNode, metav1.GetOptions{})
		node = n
		return err == nil && len(n.Status.Conditions) > 0, nil
	}); err != nil {
		t.Fatal(err)
	}
	capCPU, allocCPU := node.Status.Capacity[corev1.ResourceCPU], node.Status.Allocatable[corev1.ResourceCPU]
	if capCPU.MilliValue()-allocCPU.MilliValue() != 500 {
		t.Errorf("capacity cpu %s, allocatable %s: want 500m reserved", capCPU.String(), allocCPU.String())
	}
}
