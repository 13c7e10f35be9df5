package manager

import (
	"sync"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// CacheTransform is the shared informers' transform. It keeps in the cache
// only what jobkeeper's controllers read, so that a cluster's pods and Jobs
// cost less memory than in kube-controller-manager (which only drops
// managedFields). Tests that build their own informers use it too, so that
// the controllers see the cache the manager builds.
//
//   - every object loses its managedFields;
//   - a pod keeps its metadata, spec.nodeName and restartPolicy, its init
//     containers' names and restartPolicy (which makes one a sidecar), and
//     the status fields the Job and TTL controllers read: phase, reason,
//     conditions, start time and each container's state, last state,
//     readiness and restart count (not images, IDs, resources, addresses or
//     termination messages);
//   - the strings many pods share (namespace, label values, owner
//     references, finalizers, condition and container-state words) are
//     interned in a bounded table, so the pods of a Job hold one copy of
//     its name and UID;
//   - a finished Job keeps everything but its pod template, which nothing
//     reads once no pod will be created (only restartPolicy is kept).
//
// Cached objects are never written back whole: pods are only patched, and a
// Job's status write goes to the status subresource, where the apiserver
// takes the spec from the stored object. The transform is idempotent, as
// client-go requires.
func CacheTransform(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		o.ManagedFields = nil
		slimPod(o)
		internMeta(&o.ObjectMeta)
	case *batchv1.Job:
		o.ManagedFields = nil
		if jobFinished(o) {
			slimJobTemplate(o)
		}
	default:
		if m, err := meta.Accessor(obj); err == nil && m.GetManagedFields() != nil {
			m.SetManagedFields(nil)
		}
	}
	return obj, nil
}

// slimPod drops from p the spec and status fields no controller reads. It
// works in place, reusing the decoded slices, so that trimming a pod costs
// no allocation at each watch event.
func slimPod(p *corev1.Pod) {
	// Only init containers are kept: their restartPolicy tells sidecars apart.
	inits := p.Spec.InitContainers
	for i := range inits {
		c := &inits[i]
		*c = corev1.Container{Name: intern(c.Name), RestartPolicy: c.RestartPolicy}
	}
	p.Spec = corev1.PodSpec{
		NodeName:       p.Spec.NodeName,
		RestartPolicy:  p.Spec.RestartPolicy,
		InitContainers: inits,
		// The PodGroup protection controller under up (GenericWorkload)
		// finds the pods of a PodGroup by it.
		SchedulingGroup: p.Spec.SchedulingGroup,
	}
	slimConditions(p.Status.Conditions)
	slimContainerStatuses(p.Status.InitContainerStatuses)
	slimContainerStatuses(p.Status.ContainerStatuses)
	slimContainerStatuses(p.Status.EphemeralContainerStatuses)
	p.Status = corev1.PodStatus{
		Phase:                      corev1.PodPhase(intern(string(p.Status.Phase))),
		Reason:                     intern(p.Status.Reason),
		Conditions:                 p.Status.Conditions,
		StartTime:                  p.Status.StartTime,
		ObservedGeneration:         p.Status.ObservedGeneration,
		InitContainerStatuses:      p.Status.InitContainerStatuses,
		ContainerStatuses:          p.Status.ContainerStatuses,
		EphemeralContainerStatuses: p.Status.EphemeralContainerStatuses,
	}
}

// slimConditions keeps each condition's type, status, reason and times: the
// readiness time orders active pods, DisruptionTarget and its reason match
// pod failure policy rules, and the Ready condition's time feeds backoff.
func slimConditions(conds []corev1.PodCondition) {
	for i := range conds {
		c := &conds[i]
		*c = corev1.PodCondition{
			Type:               corev1.PodConditionType(intern(string(c.Type))),
			Status:             corev1.ConditionStatus(intern(string(c.Status))),
			Reason:             intern(c.Reason),
			LastTransitionTime: c.LastTransitionTime,
			ObservedGeneration: c.ObservedGeneration,
		}
	}
}

// slimContainerStatuses keeps what pod failure policies (exit codes by
// container name), restart counting, readiness and finish times read.
func slimContainerStatuses(statuses []corev1.ContainerStatus) {
	for i := range statuses {
		s := &statuses[i]
		slimContainerState(&s.State)
		slimContainerState(&s.LastTerminationState)
		*s = corev1.ContainerStatus{
			Name:                 intern(s.Name),
			State:                s.State,
			LastTerminationState: s.LastTerminationState,
			Ready:                s.Ready,
			RestartCount:         s.RestartCount,
			Started:              s.Started,
		}
	}
}

func slimContainerState(s *corev1.ContainerState) {
	if w := s.Waiting; w != nil {
		*w = corev1.ContainerStateWaiting{Reason: intern(w.Reason)}
	}
	if t := s.Terminated; t != nil {
		*t = corev1.ContainerStateTerminated{
			ExitCode:   t.ExitCode,
			Signal:     t.Signal,
			Reason:     intern(t.Reason),
			StartedAt:  t.StartedAt,
			FinishedAt: t.FinishedAt,
		}
	}
}

// jobFinished reports whether j has a Complete or Failed condition that is
// True. Those conditions are final: the apiserver refuses to remove them.
func jobFinished(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// slimJobTemplate empties a finished Job's pod template but for its
// restartPolicy.
func slimJobTemplate(j *batchv1.Job) {
	t := &j.Spec.Template
	if t.Labels == nil && t.Annotations == nil && len(t.Spec.Containers) == 0 && len(t.Spec.InitContainers) == 0 && len(t.Spec.Volumes) == 0 {
		return
	}
	j.Spec.Template = corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: t.Spec.RestartPolicy}}
}

// internMeta interns the metadata strings that the pods of one Job (or of
// one namespace) share: namespace, generateName, label values, owner
// references and finalizers. Names, UIDs and resourceVersions are each object's
// own and are left alone.
func internMeta(m *metav1.ObjectMeta) {
	m.Namespace = intern(m.Namespace)
	m.GenerateName = intern(m.GenerateName)
	// Values are replaced in place; keys stay as decoded, since re-keying
	// would cost a second map per pod at every event. A completion index is
	// each pod's own and would only crowd the table.
	for k, v := range m.Labels {
		if k != batchv1.JobCompletionIndexAnnotation {
			m.Labels[k] = intern(v)
		}
	}
	for i := range m.OwnerReferences {
		r := &m.OwnerReferences[i]
		r.APIVersion, r.Kind, r.Name = intern(r.APIVersion), intern(r.Kind), intern(r.Name)
		r.UID = types.UID(intern(string(r.UID)))
	}
	for i, f := range m.Finalizers {
		m.Finalizers[i] = intern(f)
	}
}

// intern returns the canonical copy of s from internTable.
func intern(s string) string { return internTable.intern(s) }

// maxInterned bounds the intern table. When it is full it starts over: the
// copies cached objects hold stay shared, and newer objects share newer
// copies. 16,384 entries cost at most about 1.5 MB, and hold the few
// strings (names, UIDs, label values) of some 3,000 Jobs.
const maxInterned = 1 << 14

// internTable is the strings interned by CacheTransform. It holds its
// copies strongly: package unique holds them weakly, so a copy that only
// cached objects reference is dropped at the next GC and the next object
// gets a fresh one, which defeats sharing across a long-lived cache.
var internTable = &stringTable{m: make(map[string]string)}

// stringTable is a bounded set of canonical strings, safe for concurrent
// use (informers transform objects from their own goroutines).
type stringTable struct {
	mu sync.Mutex
	m  map[string]string
}

func (t *stringTable) intern(s string) string {
	if s == "" {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if c, ok := t.m[s]; ok {
		return c
	}
	if len(t.m) >= maxInterned {
		clear(t.m)
	}
	t.m[s] = s
	return s
}
