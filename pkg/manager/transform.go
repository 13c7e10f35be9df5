package manager

import (
	"unique"

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
//     interned, so the pods of a Job hold one copy of its name and UID;
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

// slimPod drops from p the spec and status fields no controller reads.
func slimPod(p *corev1.Pod) {
	spec := corev1.PodSpec{
		NodeName:      p.Spec.NodeName,
		RestartPolicy: p.Spec.RestartPolicy,
	}
	// Only init containers are kept: their restartPolicy tells sidecars apart.
	if len(p.Spec.InitContainers) > 0 {
		spec.InitContainers = make([]corev1.Container, len(p.Spec.InitContainers))
		for i, c := range p.Spec.InitContainers {
			spec.InitContainers[i] = corev1.Container{Name: intern(c.Name), RestartPolicy: c.RestartPolicy}
		}
	}
	p.Spec = spec
	p.Status = corev1.PodStatus{
		Phase:                      corev1.PodPhase(intern(string(p.Status.Phase))),
		Reason:                     intern(p.Status.Reason),
		Conditions:                 slimConditions(p.Status.Conditions),
		StartTime:                  p.Status.StartTime,
		ObservedGeneration:         p.Status.ObservedGeneration,
		InitContainerStatuses:      slimContainerStatuses(p.Status.InitContainerStatuses),
		ContainerStatuses:          slimContainerStatuses(p.Status.ContainerStatuses),
		EphemeralContainerStatuses: slimContainerStatuses(p.Status.EphemeralContainerStatuses),
	}
}

// slimConditions keeps each condition's type, status, reason and times: the
// readiness time orders active pods, DisruptionTarget and its reason match
// pod failure policy rules, and the Ready condition's time feeds backoff.
func slimConditions(in []corev1.PodCondition) []corev1.PodCondition {
	if len(in) == 0 {
		return nil
	}
	out := make([]corev1.PodCondition, len(in))
	for i, c := range in {
		out[i] = corev1.PodCondition{
			Type:               corev1.PodConditionType(intern(string(c.Type))),
			Status:             corev1.ConditionStatus(intern(string(c.Status))),
			Reason:             intern(c.Reason),
			LastTransitionTime: c.LastTransitionTime,
			ObservedGeneration: c.ObservedGeneration,
		}
	}
	return out
}

// slimContainerStatuses keeps what pod failure policies (exit codes by
// container name), restart counting, readiness and finish times read.
func slimContainerStatuses(in []corev1.ContainerStatus) []corev1.ContainerStatus {
	if len(in) == 0 {
		return nil
	}
	out := make([]corev1.ContainerStatus, len(in))
	for i, s := range in {
		out[i] = corev1.ContainerStatus{
			Name:                 intern(s.Name),
			State:                slimContainerState(s.State),
			LastTerminationState: slimContainerState(s.LastTerminationState),
			Ready:                s.Ready,
			RestartCount:         s.RestartCount,
			Started:              s.Started,
		}
	}
	return out
}

func slimContainerState(s corev1.ContainerState) corev1.ContainerState {
	var out corev1.ContainerState
	if w := s.Waiting; w != nil {
		out.Waiting = &corev1.ContainerStateWaiting{Reason: intern(w.Reason)}
	}
	if r := s.Running; r != nil {
		out.Running = &corev1.ContainerStateRunning{StartedAt: r.StartedAt}
	}
	if t := s.Terminated; t != nil {
		out.Terminated = &corev1.ContainerStateTerminated{
			ExitCode:   t.ExitCode,
			Signal:     t.Signal,
			Reason:     intern(t.Reason),
			StartedAt:  t.StartedAt,
			FinishedAt: t.FinishedAt,
		}
	}
	return out
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
	// would cost a second map per pod at every event.
	for k, v := range m.Labels {
		m.Labels[k] = intern(v)
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

// intern returns the canonical copy of s. The copies are weakly held
// (package unique): a string no cached object uses any more is dropped.
func intern(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}
