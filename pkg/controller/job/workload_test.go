package job

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha2 "k8s.io/api/scheduling/v1alpha2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/test/builder"
)

// TestGangNames checks the Workload's and PodGroup's names against those
// upstream's v1.36.3 Job controller computes for the same Job (vectors
// printed by its own functions): a user's tooling that looks them up by
// name finds the same objects.
func TestGangNames(t *testing.T) {
	uid := types.UID("3f2c9a4e-1b7d-4c2e-9a51-0d6e8f7b2c11")
	long := strings.Repeat("a", 250)
	for _, tc := range []struct {
		job, workload, podGroup string
	}{
		{"gang", "gang-555c84865f", "gang-555c84865f-gang-pgt-0-58fcf6b66b"},
		{long, strings.Repeat("a", 242) + "-555c84865f", strings.Repeat("a", 121) + "-" + strings.Repeat("a", 120) + "-5f6b9598d8"},
	} {
		job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: tc.job, UID: uid}}
		wl := workloadName(job)
		if wl != tc.workload {
			t.Errorf("Workload of %.10s...: %s, want %s", tc.job, wl, tc.workload)
		}
		if pg := podGroupName(wl, podGroupTemplateName(job)); pg != tc.podGroup {
			t.Errorf("PodGroup of %.10s...: %s, want %s", tc.job, pg, tc.podGroup)
		}
	}
}

// gangJob is an Indexed Job of n pods in parallel, n completions.
func gangJob(n int32) *builder.JobWrapper {
	w := builder.MakeJob("gang", ns).Selector("u").ManagedBy(DefaultManagedBy).Indexed().Parallelism(n).Completions(n)
	w.Job.UID = "gang-uid"
	return w
}

// uidOnCreate makes the fake clientset give created Workloads and
// PodGroups a UID, as the apiserver does.
func uidOnCreate(h *harness) {
	h.client.PrependReactor("create", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		switch o := a.(k8stesting.CreateAction).GetObject().(type) {
		case *schedulingv1alpha2.Workload:
			o.UID = types.UID("uid-" + o.Name)
		case *schedulingv1alpha2.PodGroup:
			o.UID = types.UID("uid-" + o.Name)
		}
		return false, nil, nil
	})
}

// TestGangWorkloadAndPodGroup: a new gang-eligible Job gets a Workload and
// a PodGroup before its pods, as upstream's controller makes them, and its
// pods name the PodGroup.
func TestGangWorkloadAndPodGroup(t *testing.T) {
	job := gangJob(4).Obj()
	h := newHarness(t, Options{Workloads: &WorkloadInformers{}}, job)
	uidOnCreate(h)
	h.client.ClearActions()
	_, pods := h.sync(t, job)

	var order []string
	for _, a := range h.client.Actions() {
		if a.GetVerb() == "create" && a.GetResource().Resource != "events" {
			order = append(order, a.GetResource().Resource)
		}
	}
	if diff := cmp.Diff([]string{"workloads", "podgroups", "pods", "pods", "pods", "pods"}, order); diff != "" {
		t.Errorf("creates (-want +got):\n%s", diff)
	}
	wls, _ := h.client.SchedulingV1alpha2().Workloads(ns).List(h.ctx, metav1.ListOptions{})
	pgs, _ := h.client.SchedulingV1alpha2().PodGroups(ns).List(h.ctx, metav1.ListOptions{})
	if len(wls.Items) != 1 || len(pgs.Items) != 1 {
		t.Fatalf("%d Workloads and %d PodGroups, want one each", len(wls.Items), len(pgs.Items))
	}
	wl, pg := wls.Items[0], pgs.Items[0]
	jobRef := metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: "gang", UID: "gang-uid", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
	wantWL := schedulingv1alpha2.WorkloadSpec{
		ControllerRef: &schedulingv1alpha2.TypedLocalObjectReference{APIGroup: "batch", Kind: "Job", Name: "gang"},
		PodGroupTemplates: []schedulingv1alpha2.PodGroupTemplate{{
			Name:             "gang-pgt-0",
			SchedulingPolicy: schedulingv1alpha2.PodGroupSchedulingPolicy{Gang: &schedulingv1alpha2.GangSchedulingPolicy{MinCount: 4}},
		}},
	}
	if diff := cmp.Diff(wantWL, wl.Spec); diff != "" {
		t.Errorf("Workload spec (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]metav1.OwnerReference{jobRef}, wl.OwnerReferences); diff != "" {
		t.Errorf("Workload owners (-want +got):\n%s", diff)
	}
	wantPG := schedulingv1alpha2.PodGroupSpec{
		PodGroupTemplateRef: &schedulingv1alpha2.PodGroupTemplateReference{
			Workload: &schedulingv1alpha2.WorkloadPodGroupTemplateReference{WorkloadName: wl.Name, PodGroupTemplateName: "gang-pgt-0"},
		},
		SchedulingPolicy: schedulingv1alpha2.PodGroupSchedulingPolicy{Gang: &schedulingv1alpha2.GangSchedulingPolicy{MinCount: 4}},
	}
	if diff := cmp.Diff(wantPG, pg.Spec); diff != "" {
		t.Errorf("PodGroup spec (-want +got):\n%s", diff)
	}
	wlRef := metav1.OwnerReference{APIVersion: "scheduling.k8s.io/v1alpha2", Kind: "Workload", Name: wl.Name, UID: wl.UID}
	if diff := cmp.Diff([]metav1.OwnerReference{jobRef, wlRef}, pg.OwnerReferences); diff != "" {
		t.Errorf("PodGroup owners (-want +got):\n%s", diff)
	}
	pgRef := metav1.OwnerReference{APIVersion: "scheduling.k8s.io/v1alpha2", Kind: "PodGroup", Name: pg.Name, UID: pg.UID}
	for _, p := range pods {
		if p.Spec.SchedulingGroup == nil || ptr.Deref(p.Spec.SchedulingGroup.PodGroupName, "") != pg.Name {
			t.Errorf("pod %s: schedulingGroup %v, want podGroupName %s", p.Name, p.Spec.SchedulingGroup, pg.Name)
		}
		if diff := cmp.Diff([]metav1.OwnerReference{jobRef, pgRef}, p.OwnerReferences); diff != "" {
			t.Errorf("pod %s owners (-want +got):\n%s", p.Name, diff)
		}
	}
	if diff := cmp.Diff([]string{ReasonWorkloadCreated, "SuccessfulCreate", "SuccessfulCreate", "SuccessfulCreate", "SuccessfulCreate"}, h.drainEvents()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// TestGangFallsBack: Jobs that are not one gang, or whose scheduling
// objects are not the controller's to use, get plain pods and no new
// Workload or PodGroup.
func TestGangFallsBack(t *testing.T) {
	foreign := func(name string) *schedulingv1alpha2.Workload {
		return &schedulingv1alpha2.Workload{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: schedulingv1alpha2.WorkloadSpec{
				ControllerRef:     &schedulingv1alpha2.TypedLocalObjectReference{APIGroup: "batch", Kind: "Job", Name: "gang"},
				PodGroupTemplates: []schedulingv1alpha2.PodGroupTemplate{{Name: "t"}},
			},
		}
	}
	for name, tc := range map[string]struct {
		job       *batchv1.Job
		workloads []*schedulingv1alpha2.Workload
		wantPods  int
	}{
		"NonIndexed":    {job: builder.MakeJob("gang", ns).Selector("u").ManagedBy(DefaultManagedBy).Parallelism(3).Completions(3).Obj(), wantPods: 3},
		"parallelism 1": {job: gangJob(1).Obj(), wantPods: 1},
		"completions other than parallelism": {
			job: builder.MakeJob("gang", ns).Selector("u").ManagedBy(DefaultManagedBy).Indexed().Parallelism(2).Completions(5).Obj(), wantPods: 2,
		},
		"a scheduling group in the template": {
			job: func() *batchv1.Job {
				j := gangJob(4).Obj()
				j.Spec.Template.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To("external")}
				return j
			}(),
			wantPods: 4,
		},
		"a Job that started before": {
			job:      gangJob(4).Status(batchv1.JobStatus{StartTime: ptr.To(metav1.NewTime(t0))}).Obj(),
			wantPods: 4,
		},
		"a Workload the Job does not control": {job: gangJob(4).Obj(), workloads: []*schedulingv1alpha2.Workload{foreign("other")}, wantPods: 4},
		"two Workloads for the Job":           {job: gangJob(4).Obj(), workloads: []*schedulingv1alpha2.Workload{foreign("a"), foreign("b")}, wantPods: 4},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, Options{Workloads: &WorkloadInformers{}}, tc.job)
			for _, wl := range tc.workloads {
				if err := h.factory.Scheduling().V1alpha2().Workloads().Informer().GetIndexer().Add(wl); err != nil {
					t.Fatal(err)
				}
			}
			h.client.ClearActions()
			_, pods := h.sync(t, tc.job)
			if len(pods) != tc.wantPods {
				t.Errorf("%d pods, want %d", len(pods), tc.wantPods)
			}
			for _, p := range pods {
				if g := p.Spec.SchedulingGroup; g != nil && ptr.Deref(g.PodGroupName, "") != "external" {
					t.Errorf("pod %s names a PodGroup: %v", p.Name, g)
				}
				if len(p.OwnerReferences) != 1 {
					t.Errorf("pod %s owners %v, want the Job only", p.Name, p.OwnerReferences)
				}
			}
			if w := h.writes(); w["create workloads"]+w["create podgroups"] != 0 {
				t.Errorf("writes %v: no Workload or PodGroup to create", w)
			}
		})
	}
}

// TestGangReusesItsObjects: a later sync (a replacement pod, a restarted
// controller) finds the Job's Workload and PodGroup in the caches and
// creates neither again; a create answered AlreadyExists (an earlier
// create whose answer was lost) reads the cache again.
func TestGangReusesItsObjects(t *testing.T) {
	job := gangJob(2).Obj()
	h := newHarness(t, Options{Workloads: &WorkloadInformers{}}, job)
	uidOnCreate(h)
	h.sync(t, job)
	wls, _ := h.client.SchedulingV1alpha2().Workloads(ns).List(h.ctx, metav1.ListOptions{})
	pgs, _ := h.client.SchedulingV1alpha2().PodGroups(ns).List(h.ctx, metav1.ListOptions{})
	if err := h.factory.Scheduling().V1alpha2().Workloads().Informer().GetIndexer().Add(&wls.Items[0]); err != nil {
		t.Fatal(err)
	}
	// The PodGroup is not cached yet: its create is refused as taken,
	// then the cache shows it.
	pgStore := h.factory.Scheduling().V1alpha2().PodGroups().Informer().GetIndexer()
	h.client.PrependReactor("create", "podgroups", func(k8stesting.Action) (bool, runtime.Object, error) {
		if err := pgStore.Add(&pgs.Items[0]); err != nil {
			t.Error(err)
		}
		return false, nil, nil
	})
	pg, err := h.c.ensurePodGroup(h.ctx, job, nil)
	if err != nil {
		t.Fatal(err)
	}
	if pg == nil || pg.UID != pgs.Items[0].UID {
		t.Fatalf("PodGroup %v, want the one created first (%s)", pg, pgs.Items[0].UID)
	}
	h.client.ClearActions()
	started := job.DeepCopy()
	started.Status.StartTime = ptr.To(metav1.NewTime(t0))
	pg, err = h.c.ensurePodGroup(h.ctx, started, nil)
	if err != nil || pg == nil || pg.UID != pgs.Items[0].UID {
		t.Fatalf("PodGroup %v (%v), want the cached one", pg, err)
	}
	if w := h.writes(); len(w) != 0 {
		t.Errorf("writes %v, want none", w)
	}
}

// TestGangCreatesAreReadBeforeTheNextSync: the next sync waits until the
// informers show the Workload and PodGroup a sync created (read-your-writes),
// so that it never takes the Job, its pods created, for one that ran
// before the gate and creates plain pods.
func TestGangCreatesAreReadBeforeTheNextSync(t *testing.T) {
	job := gangJob(2).Obj()
	h := newHarness(t, Options{Workloads: &WorkloadInformers{}}, job)
	uidOnCreate(h)
	h.client.PrependReactor("create", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if o, ok := a.(k8stesting.CreateAction).GetObject().(metav1.Object); ok {
			o.SetResourceVersion("100")
		}
		return false, nil, nil
	})
	h.sync(t, job)
	for _, gr := range []string{"workloads", "podgroups"} {
		found := false
		for vk, rv := range h.c.writes.jobs[jobKey(job)].versions {
			if vk.resource.Resource == gr && rv == "100" {
				found = true
			}
		}
		if !found {
			t.Errorf("the %s create is not recorded for read-your-writes: %v", gr, h.c.writes.jobs[jobKey(job)].versions)
		}
	}
}
