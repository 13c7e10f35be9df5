package manager

import (
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

func fullPod() *corev1.Pod {
	t0 := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	always := corev1.ContainerRestartPolicyAlways
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "p", Namespace: "ns", UID: "u", ResourceVersion: "7",
			Labels:          map[string]string{batchv1.JobNameLabel: "j"},
			Annotations:     map[string]string{batchv1.JobCompletionIndexAnnotation: "3"},
			Finalizers:      []string{batchv1.JobTrackingFinalizer},
			OwnerReferences: []metav1.OwnerReference{{Kind: "Job", Name: "j", UID: "ju", Controller: ptr.To(true)}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "m"}},
		},
		Spec: corev1.PodSpec{
			NodeName:       "node",
			RestartPolicy:  corev1.RestartPolicyNever,
			InitContainers: []corev1.Container{{Name: "sidecar", Image: "img", RestartPolicy: &always, Command: []string{"x"}}},
			Containers: []corev1.Container{{Name: "main", Image: "img", Command: []string{"sh", "-c", "exit 3"},
				Env:       []corev1.EnvVar{{Name: "A", Value: "b"}},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}},
			Tolerations: []corev1.Toleration{{Key: "k"}},
			Volumes:     []corev1.Volume{{Name: "v"}},
		},
		Status: corev1.PodStatus{
			Phase:      corev1.PodFailed,
			Reason:     "Evicted",
			Message:    "long message",
			HostIP:     "10.0.0.1",
			PodIP:      "10.1.0.1",
			QOSClass:   corev1.PodQOSBurstable,
			StartTime:  &t0,
			Conditions: []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI", Message: "m", LastTransitionTime: t0, LastProbeTime: t0}},
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "sidecar", Image: "img", ImageID: "id", ContainerID: "cid", Ready: true, Started: ptr.To(true),
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t0}}}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "main", Image: "img", ImageID: "id", ContainerID: "cid", RestartCount: 2,
				State:                corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3, Signal: 9, Reason: "Error", Message: "termination log", StartedAt: t0, FinishedAt: t0, ContainerID: "cid"}},
				LastTerminationState: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off"}}}},
		},
	}
}

func TestCacheTransformPod(t *testing.T) {
	in := fullPod()
	t0 := *in.Status.StartTime
	always := corev1.ContainerRestartPolicyAlways
	want := &corev1.Pod{
		ObjectMeta: *in.ObjectMeta.DeepCopy(),
		Spec: corev1.PodSpec{
			NodeName:       "node",
			RestartPolicy:  corev1.RestartPolicyNever,
			InitContainers: []corev1.Container{{Name: "sidecar", RestartPolicy: &always}},
		},
		Status: corev1.PodStatus{
			Phase:                 corev1.PodFailed,
			Reason:                "Evicted",
			StartTime:             &t0,
			Conditions:            []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI", LastTransitionTime: t0}},
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "sidecar", Ready: true, Started: ptr.To(true), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t0}}}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "main", RestartCount: 2,
				State:                corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3, Signal: 9, Reason: "Error", StartedAt: t0, FinishedAt: t0}},
				LastTerminationState: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}},
		},
	}
	want.ManagedFields = nil
	got, err := CacheTransform(in)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("transformed pod (-want +got):\n%s", d)
	}
	// Two pods of one Job, decoded separately (separate string copies), share
	// their Job's name and UID once transformed.
	decoded := func() *corev1.Pod {
		p := fullPod()
		p.Labels[batchv1.JobNameLabel] = strings.Clone(p.Labels[batchv1.JobNameLabel])
		p.OwnerReferences[0].UID = types.UID(strings.Clone(string(p.OwnerReferences[0].UID)))
		return p
	}
	one, _ := CacheTransform(decoded())
	two, _ := CacheTransform(decoded())
	p1, p2 := one.(*corev1.Pod), two.(*corev1.Pod)
	if unsafe.StringData(p1.Labels[batchv1.JobNameLabel]) != unsafe.StringData(p2.Labels[batchv1.JobNameLabel]) {
		t.Errorf("two pods of one Job hold two copies of its name label")
	}
	if unsafe.StringData(string(p1.OwnerReferences[0].UID)) != unsafe.StringData(string(p2.OwnerReferences[0].UID)) {
		t.Errorf("two pods of one Job hold two copies of its UID")
	}
	again, _ := CacheTransform(got.(*corev1.Pod).DeepCopy())
	if d := cmp.Diff(got, again); d != "" {
		t.Errorf("the transform is not idempotent (-once +twice):\n%s", d)
	}
}

func TestCacheTransformJob(t *testing.T) {
	job := func(finished bool) *batchv1.Job {
		j := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: "j", Annotations: map[string]string{"a": "b"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}},
			Spec: batchv1.JobSpec{
				Completions:             ptr.To[int32](3),
				TTLSecondsAfterFinished: ptr.To[int32](10),
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"l": "v"}},
					Spec:       corev1.PodSpec{RestartPolicy: corev1.RestartPolicyOnFailure, Containers: []corev1.Container{{Name: "c", Image: "i"}}},
				},
			},
		}
		if finished {
			j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
		}
		return j
	}
	running, _ := CacheTransform(job(false))
	want := job(false)
	want.ManagedFields = nil
	if d := cmp.Diff(want, running); d != "" {
		t.Errorf("an unfinished Job must keep its template (-want +got):\n%s", d)
	}
	finished, _ := CacheTransform(job(true))
	want = job(true)
	want.ManagedFields = nil
	want.Spec.Template = corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyOnFailure}}
	if d := cmp.Diff(want, finished); d != "" {
		t.Errorf("finished Job (-want +got):\n%s", d)
	}
}

func TestStringTableBounded(t *testing.T) {
	tab := &stringTable{m: map[string]string{}}
	for i := range maxInterned + 10 {
		tab.intern(strings.Repeat("x", i%50) + string(rune('a'+i%26)) + strconv.Itoa(i))
	}
	if len(tab.m) > maxInterned {
		t.Errorf("%d strings held, want at most %d", len(tab.m), maxInterned)
	}
	a := tab.intern(strings.Clone("shared"))
	if b := tab.intern(strings.Clone("shared")); unsafe.StringData(a) != unsafe.StringData(b) {
		t.Errorf("equal strings interned twice are not one copy")
	}
}
