package allocation

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/binder"
)

func resources(cpu, mem string) corev1.ResourceRequirements {
	l := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
	return corev1.ResourceRequirements{Requests: l, Limits: l.DeepCopy()}
}

func pod(cpu, mem string) *corev1.Pod {
	return &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init", Resources: resources("100m", "10Mi")}},
		Containers:     []corev1.Container{{Name: "main", Resources: resources(cpu, mem)}},
	}}
}

func TestEqualComparesByValue(t *testing.T) {
	a, b := FromSpec(pod("1", "1Gi")), FromSpec(pod("1000m", "1024Mi"))
	if !a.Equal(b) {
		t.Error("1 and 1000m (1Gi and 1024Mi) differ")
	}
	if a.Equal(FromSpec(pod("2", "1Gi"))) {
		t.Error("1 and 2 CPUs equal")
	}
	noLimits := pod("1", "1Gi")
	noLimits.Spec.Containers[0].Resources.Limits = corev1.ResourceList{}
	withNil := pod("1", "1Gi")
	withNil.Spec.Containers[0].Resources.Limits = nil
	if !FromSpec(noLimits).Equal(FromSpec(withNil)) {
		t.Error("empty and nil limits differ")
	}
}

func TestRestorePrefersWhatTheStatusReports(t *testing.T) {
	p := pod("2", "2Gi") // a resize asked while the agent was away
	actual := resources("1", "1Gi")
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", Resources: &actual}}
	a := Restore(p)
	if !SameResources(a.Containers["main"], actual) {
		t.Errorf("restored %v, want the status's %v", a.Containers["main"], actual)
	}
	if !SameResources(a.Containers["init"], resources("100m", "10Mi")) {
		t.Errorf("a container without status resources restored as %v, want its spec's", a.Containers["init"])
	}
	applied := a.Apply(p)
	if got := applied.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU]; got.Cmp(resource.MustParse("1")) != 0 {
		t.Errorf("applied cpu limit %s, want 1", got.String())
	}
	if got := p.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU]; got.Cmp(resource.MustParse("2")) != 0 {
		t.Error("Apply changed the pod it was given")
	}
}

func TestAdmit(t *testing.T) {
	alloc := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("4Gi"), "example.com/gpu": resource.MustParse("1")}
	for _, tc := range []struct {
		name         string
		want, others binder.Requests
		fit          bool
		message      string
	}{
		{name: "fits", want: binder.Requests{CPUMilli: 2000, Memory: 1 << 30}, others: binder.Requests{CPUMilli: 2000}, fit: true},
		{name: "cpu beyond what is left", want: binder.Requests{CPUMilli: 3000}, others: binder.Requests{CPUMilli: 2000},
			message: "Node didn't have enough resource: cpu, requested: 3000, used: 2000, capacity: 4000"},
		{name: "memory beyond the node", want: binder.Requests{CPUMilli: 100, Memory: 5 << 30},
			message: "Node didn't have enough resource: memory, requested: 5368709120, used: 0, capacity: 4294967296"},
		{name: "cpu named before memory", want: binder.Requests{CPUMilli: 5000, Memory: 5 << 30},
			message: "Node didn't have enough resource: cpu, requested: 5000, used: 0, capacity: 4000"},
		{name: "extended resource", want: binder.Requests{Scalar: map[corev1.ResourceName]int64{"example.com/gpu": 1}},
			others:  binder.Requests{Scalar: map[corev1.ResourceName]int64{"example.com/gpu": 1}},
			message: "Node didn't have enough resource: example.com/gpu, requested: 1, used: 1, capacity: 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Admit(tc.want, tc.others, alloc)
			if v.Fit != tc.fit || v.Message != tc.message {
				t.Errorf("Admit = %+v, want fit %v message %q", v, tc.fit, tc.message)
			}
			if !v.Fit && v.Reason != corev1.PodReasonDeferred {
				t.Errorf("reason %q, want Deferred (the kubelet retries a resize the node has no room for)", v.Reason)
			}
		})
	}
}

func TestNeedsRestart(t *testing.T) {
	c := &corev1.Container{Name: "main", ResizePolicy: []corev1.ContainerResizePolicy{
		{ResourceName: corev1.ResourceMemory, RestartPolicy: corev1.RestartContainer},
		{ResourceName: corev1.ResourceCPU, RestartPolicy: corev1.NotRequired},
	}}
	if NeedsRestart(c, resources("1", "1Gi"), resources("2", "1Gi")) {
		t.Error("a CPU change (NotRequired) needs a restart")
	}
	if !NeedsRestart(c, resources("1", "1Gi"), resources("1", "2Gi")) {
		t.Error("a memory change (RestartContainer) needs no restart")
	}
	c.ResizePolicy = nil
	if NeedsRestart(c, resources("1", "1Gi"), resources("2", "2Gi")) {
		t.Error("without a policy (NotRequired by default) a change needs a restart")
	}
}
