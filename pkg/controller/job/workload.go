package job

import (
	"context"
	"fmt"
	"hash/fnv"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha2 "k8s.io/api/scheduling/v1alpha2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/validation"
	schedulinginformers "k8s.io/client-go/informers/scheduling/v1alpha2"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	hashutil "k8s.io/kubernetes/pkg/util/hash"
)

// WorkloadWithJob (KEP-5547, alpha in v1.36): a Job whose pods must be
// scheduled all together gets a Workload with one gang pod group template
// and a PodGroup made from it before any of its pods, and its pods name
// the PodGroup. The controller only ever creates them: garbage collection
// removes them with the Job, and a Workload or PodGroup it did not make
// (another controller's, or one of an unexpected shape) makes the Job
// fall back to plain scheduling, as upstream's.

// Event reason of a Workload created for a Job.
const ReasonWorkloadCreated = "WorkloadCreated"

// Indexes of the Workload and PodGroup informers. Workload.spec.controllerRef
// and PodGroup.spec.podGroupTemplateRef carry names only, so both index by
// "<namespace>/<name>" of what they point at; ownership is checked by UID
// on the objects found.
const (
	workloadByJobIndex      = "workloadByJobName"
	podGroupByWorkloadIndex = "podGroupByWorkloadName"
)

// Group-resources of the read-your-writes records (consistency.go).
var (
	workloadsResource = schedulingv1alpha2.SchemeGroupVersion.WithResource("workloads").GroupResource()
	podGroupsResource = schedulingv1alpha2.SchemeGroupVersion.WithResource("podgroups").GroupResource()
)

// WorkloadInformers are the informers WorkloadWithJob reads.
type WorkloadInformers struct {
	Workloads schedulinginformers.WorkloadInformer
	PodGroups schedulinginformers.PodGroupInformer
}

// gangEligible reports whether the Job's pods form one gang: Indexed, more
// than one pod in parallel, as many completions as parallel pods, and a
// template that does not already name a scheduling group (a higher-level
// controller's).
func gangEligible(job *batchv1.Job) bool {
	p, c := job.Spec.Parallelism, job.Spec.Completions
	return isIndexed(job) && p != nil && *p > 1 && c != nil && *c == *p &&
		job.Spec.Template.Spec.SchedulingGroup == nil
}

// gangIsNew reports whether the Job never started: no pod, no start time,
// no finished pod counted, never suspended. Only such a Job gets a
// Workload: one that ran before the gate was on keeps plain scheduling.
func gangIsNew(job *batchv1.Job, pods []*corev1.Pod) bool {
	return len(pods) == 0 && job.Status.StartTime == nil && job.Status.Succeeded == 0 && job.Status.Failed == 0 &&
		findCondition(job.Status.Conditions, batchv1.JobSuspended) == nil
}

// workloadName is the Job's Workload's name: the Job's name, cut to fit,
// and a hash of its UID, stable across restarts and unique per Job.
func workloadName(job *batchv1.Job) string {
	h := fnv.New32a()
	hashutil.DeepHashObject(h, job.UID)
	suffix := rand.SafeEncodeString(fmt.Sprint(h.Sum32()))
	prefix := job.Name
	if limit := validation.DNS1123SubdomainMaxLength - len(suffix) - 1; len(prefix) > limit {
		prefix = prefix[:limit]
	}
	return prefix + "-" + suffix
}

// podGroupTemplateName is the name of the Job's one pod group template.
func podGroupTemplateName(job *batchv1.Job) string {
	return job.Name + "-pgt-0"
}

// podGroupName is the name of the PodGroup made from template of workload:
// both names, each cut to its share when together too long, and a hash of
// both.
func podGroupName(workload, template string) string {
	h := fnv.New32a()
	h.Write([]byte(workload))
	h.Write([]byte(template))
	suffix := rand.SafeEncodeString(fmt.Sprint(h.Sum32()))
	room := validation.DNS1123SubdomainMaxLength - len(suffix) - 2
	if len(workload)+len(template) > room {
		half := room / 2
		switch {
		case len(workload) <= half:
			template = template[:room-len(workload)]
		case len(template) <= half:
			workload = workload[:room-len(template)]
		default:
			workload, template = workload[:room-half], template[:half]
		}
	}
	return workload + "-" + template + "-" + suffix
}

// newWorkload is the Workload of a gang-eligible Job.
func newWorkload(job *batchv1.Job) *schedulingv1alpha2.Workload {
	return &schedulingv1alpha2.Workload{
		ObjectMeta: metav1.ObjectMeta{
			Name:            workloadName(job),
			Namespace:       job.Namespace,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))},
		},
		Spec: schedulingv1alpha2.WorkloadSpec{
			ControllerRef: &schedulingv1alpha2.TypedLocalObjectReference{APIGroup: batchv1.GroupName, Kind: "Job", Name: job.Name},
			PodGroupTemplates: []schedulingv1alpha2.PodGroupTemplate{{
				Name: podGroupTemplateName(job),
				SchedulingPolicy: schedulingv1alpha2.PodGroupSchedulingPolicy{
					Gang: &schedulingv1alpha2.GangSchedulingPolicy{MinCount: *job.Spec.Parallelism},
				},
			}},
		},
	}
}

// newPodGroup is the PodGroup made from workload's one template for job:
// controlled by the Job, also owned by the Workload (not blocking its
// deletion).
func newPodGroup(job *batchv1.Job, workload *schedulingv1alpha2.Workload) *schedulingv1alpha2.PodGroup {
	tmpl := workload.Spec.PodGroupTemplates[0]
	return &schedulingv1alpha2.PodGroup{
		ObjectMeta: metav1.ObjectMeta{
			Name:      podGroupName(workload.Name, tmpl.Name),
			Namespace: job.Namespace,
			OwnerReferences: []metav1.OwnerReference{
				*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job")),
				{APIVersion: schedulingv1alpha2.SchemeGroupVersion.String(), Kind: "Workload", Name: workload.Name, UID: workload.UID},
			},
		},
		Spec: schedulingv1alpha2.PodGroupSpec{
			PodGroupTemplateRef: &schedulingv1alpha2.PodGroupTemplateReference{
				Workload: &schedulingv1alpha2.WorkloadPodGroupTemplateReference{WorkloadName: workload.Name, PodGroupTemplateName: tmpl.Name},
			},
			SchedulingPolicy: *tmpl.SchedulingPolicy.DeepCopy(),
		},
	}
}

// podGroupOwnerRef is the reference a gang pod carries to its PodGroup
// (not its controller, not blocking the PodGroup's deletion).
func podGroupOwnerRef(pg *schedulingv1alpha2.PodGroup) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: schedulingv1alpha2.SchemeGroupVersion.String(), Kind: "PodGroup", Name: pg.Name, UID: pg.UID}
}

// gangIndexes are the informers' index functions.
func gangIndexers() (workloads, podGroups cache.Indexers) {
	key := func(ns, name string) []string { return []string{cache.NewObjectName(ns, name).String()} }
	workloads = cache.Indexers{workloadByJobIndex: func(obj any) ([]string, error) {
		wl, ok := obj.(*schedulingv1alpha2.Workload)
		if !ok {
			return nil, nil
		}
		ref := wl.Spec.ControllerRef
		if ref == nil || ref.APIGroup != batchv1.GroupName || ref.Kind != "Job" || ref.Name == "" {
			return nil, nil
		}
		return key(wl.Namespace, ref.Name), nil
	}}
	podGroups = cache.Indexers{podGroupByWorkloadIndex: func(obj any) ([]string, error) {
		pg, ok := obj.(*schedulingv1alpha2.PodGroup)
		if !ok {
			return nil, nil
		}
		ref := pg.Spec.PodGroupTemplateRef
		if ref == nil || ref.Workload == nil || ref.Workload.WorkloadName == "" {
			return nil, nil
		}
		return key(pg.Namespace, ref.Workload.WorkloadName), nil
	}}
	return workloads, podGroups
}

// gangState is the controller's view of WorkloadWithJob: nil when off.
type gangState struct {
	workloads, podGroups cache.Indexer
}

// newGangState adds the indexes to the informers and returns the view of
// them, with the informers' sync checks.
func newGangState(inf *WorkloadInformers) (*gangState, []cache.DoneChecker, error) {
	wlIdx, pgIdx := gangIndexers()
	if err := inf.Workloads.Informer().AddIndexers(wlIdx); err != nil {
		return nil, nil, fmt.Errorf("adding Workload index: %w", err)
	}
	if err := inf.PodGroups.Informer().AddIndexers(pgIdx); err != nil {
		return nil, nil, fmt.Errorf("adding PodGroup index: %w", err)
	}
	return &gangState{workloads: inf.Workloads.Informer().GetIndexer(), podGroups: inf.PodGroups.Informer().GetIndexer()},
		[]cache.DoneChecker{inf.Workloads.Informer().HasSyncedChecker(), inf.PodGroups.Informer().HasSyncedChecker()}, nil
}

// ensurePodGroup finds or creates the Job's Workload and then its
// PodGroup, and returns the PodGroup its pods are to name; nil (and no
// error) means plain scheduling: the Job is not new and has no Workload,
// or what is there is not this Job's or not of the shape it makes. A
// create that finds the name taken (its own earlier create, whose answer
// was lost, not cached yet) reads the cache again, a few times, as
// upstream's; an error fails the sync, which is retried.
func (c *Controller) ensurePodGroup(ctx context.Context, job *batchv1.Job, pods []*corev1.Pod) (*schedulingv1alpha2.PodGroup, error) {
	wl, err := c.ensureWorkload(ctx, job, pods)
	if err != nil || wl == nil {
		return nil, err
	}
	logger := klog.FromContext(ctx)
	var pg *schedulingv1alpha2.PodGroup
	err = retry.OnError(retry.DefaultRetry, apierrors.IsAlreadyExists, func() error {
		found, err := c.gang.podGroups.ByIndex(podGroupByWorkloadIndex, cache.NewObjectName(wl.Namespace, wl.Name).String())
		if err != nil {
			return err
		}
		switch len(found) {
		case 0:
			created, err := c.client.SchedulingV1alpha2().PodGroups(job.Namespace).Create(ctx, newPodGroup(job, wl), metav1.CreateOptions{FieldManager: FieldManager})
			if err != nil {
				return err
			}
			c.writes.wrote(jobKey(job), job.UID, podGroupsResource, created.ResourceVersion)
			pg = created
		case 1:
			got := found[0].(*schedulingv1alpha2.PodGroup)
			if !metav1.IsControlledBy(got, job) {
				logger.V(2).Info("PodGroup not controlled by the Job: plain scheduling", "job", klog.KObj(job), "podGroup", klog.KObj(got))
				return nil
			}
			pg = got
		default:
			logger.Info("Several PodGroups reference the Job's Workload: plain scheduling", "job", klog.KObj(job), "workload", klog.KObj(wl), "count", len(found))
		}
		return nil
	})
	return pg, err
}

// ensureWorkload is ensurePodGroup's first step, for the Workload.
func (c *Controller) ensureWorkload(ctx context.Context, job *batchv1.Job, pods []*corev1.Pod) (*schedulingv1alpha2.Workload, error) {
	logger := klog.FromContext(ctx)
	var wl *schedulingv1alpha2.Workload
	err := retry.OnError(retry.DefaultRetry, apierrors.IsAlreadyExists, func() error {
		found, err := c.gang.workloads.ByIndex(workloadByJobIndex, cache.NewObjectName(job.Namespace, job.Name).String())
		if err != nil {
			return err
		}
		switch len(found) {
		case 0:
			if !gangIsNew(job, pods) {
				return nil
			}
			created, err := c.client.SchedulingV1alpha2().Workloads(job.Namespace).Create(ctx, newWorkload(job), metav1.CreateOptions{FieldManager: FieldManager})
			if err != nil {
				return err
			}
			c.writes.wrote(jobKey(job), job.UID, workloadsResource, created.ResourceVersion)
			c.recorder.Eventf(job, corev1.EventTypeNormal, ReasonWorkloadCreated, "Created Workload %s for Job %s", created.Name, job.Name)
			wl = created
		case 1:
			got := found[0].(*schedulingv1alpha2.Workload)
			switch {
			case !metav1.IsControlledBy(got, job):
				logger.V(2).Info("Workload not controlled by the Job: plain scheduling", "job", klog.KObj(job), "workload", klog.KObj(got))
			case len(got.Spec.PodGroupTemplates) != 1:
				logger.V(2).Info("Workload has other than one pod group template: plain scheduling", "job", klog.KObj(job), "workload", klog.KObj(got), "count", len(got.Spec.PodGroupTemplates))
			default:
				wl = got
			}
		default:
			logger.Info("Several Workloads reference the Job: plain scheduling", "job", klog.KObj(job), "count", len(found))
		}
		return nil
	})
	return wl, err
}
