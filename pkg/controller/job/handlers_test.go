package job

import (
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"jobkeeper.dev/jobkeeper/test/builder"
)

// queued drains both queues and returns their items.
func queued(c *Controller) (jobs []string, orphans []orphanKey) {
	for c.queue.Len() > 0 {
		k, _ := c.queue.Get()
		jobs = append(jobs, k)
		c.queue.Done(k)
	}
	for c.orphanQueue.Len() > 0 {
		k, _ := c.orphanQueue.Get()
		orphans = append(orphans, k)
		c.orphanQueue.Done(k)
	}
	return jobs, orphans
}

func TestPodEventRouting(t *testing.T) {
	managed := builder.MakeJob("mine", ns).Selector("mine-uid").ManagedBy(DefaultManagedBy).Obj()
	foreign := builder.MakeJob("theirs", ns).Selector("theirs-uid").ManagedBy("example.com/other").Obj()
	finished := builder.MakeJob("done", ns).Selector("done-uid").ManagedBy(DefaultManagedBy).
		Condition(batchv1.JobComplete, "CompletionsReached", metav1.NewTime(t0)).Obj()
	withFinalizer := func(name string, job *batchv1.Job) *corev1.Pod {
		w := builder.MakePod(name, ns).Finalizer(batchv1.JobTrackingFinalizer)
		if job != nil {
			w.OwnedByJob(job)
		}
		return w.Obj()
	}
	cases := map[string]struct {
		pod         *corev1.Pod
		wantJobs    []string
		wantOrphans []orphanKey
	}{
		"managed job woken":             {pod: withFinalizer("a", managed), wantJobs: []string{"ns/mine"}},
		"foreign job ignored":           {pod: withFinalizer("b", foreign)},
		"finished job: finalizer freed": {pod: withFinalizer("c", finished), wantOrphans: []orphanKey{{namespace: ns, name: "c"}}},
		"no controller: finalizer freed, selecting job woken": {
			pod:         func() *corev1.Pod { p := withFinalizer("d", nil); p.Labels = managed.Spec.Template.Labels; return p }(),
			wantJobs:    []string{"ns/mine"},
			wantOrphans: []orphanKey{{namespace: ns, name: "d"}},
		},
		"owner not in cache: orphan queue": {
			pod: withFinalizer("e", builder.MakeJob("gone", ns).Selector("gone-uid").Obj()),
			// As upstream: the orphan worker confirms with a live GET that
			// the Job is gone (the cache may lag) before freeing it.
			wantOrphans: []orphanKey{{namespace: ns, name: "e"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, Options{}, managed)
			store := h.factory.Batch().V1().Jobs().Informer().GetIndexer()
			for _, j := range []*batchv1.Job{foreign, finished} {
				if err := store.Add(j); err != nil {
					t.Fatal(err)
				}
			}
			queued(h.c) // drop nothing-yet
			h.c.addPod(klog.Background(), tc.pod)
			h.clock.Step(time.Second)
			jobs, orphans := queued(h.c)
			if diff := cmp.Diff(tc.wantJobs, jobs, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("jobs (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantOrphans, orphans, cmp.AllowUnexported(orphanKey{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("orphans (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReleaseOrphanFinalizer(t *testing.T) {
	managed := builder.MakeJob("mine", ns).Selector("mine-uid").ManagedBy(DefaultManagedBy).Obj()
	foreignFinished := builder.MakeJob("theirs", ns).Selector("theirs-uid").ManagedBy("example.com/other").
		Condition(batchv1.JobFailed, "X", metav1.NewTime(t0)).Obj()
	finished := builder.MakeJob("done", ns).Selector("done-uid").ManagedBy(DefaultManagedBy).
		Condition(batchv1.JobComplete, "CompletionsReached", metav1.NewTime(t0)).Obj()
	gone := builder.MakeJob("gone", ns).Selector("gone-uid").Obj()
	pod := func(name string, job *batchv1.Job) *corev1.Pod {
		w := builder.MakePod(name, ns).UID(name).Finalizer(batchv1.JobTrackingFinalizer)
		if job != nil {
			w.OwnedByJob(job)
		}
		return w.Obj()
	}
	cases := map[string]struct {
		pod           *corev1.Pod
		wantFinalizer bool
	}{
		"running managed job keeps it":  {pod: pod("a", managed), wantFinalizer: true},
		"finished managed job frees it": {pod: pod("b", finished)},
		"foreign job keeps it":          {pod: pod("c", foreignFinished), wantFinalizer: true},
		"deleted job frees it":          {pod: pod("d", gone)},
		"no controller frees it":        {pod: pod("e", nil)},
		"other kind of controller keeps it": {pod: func() *corev1.Pod {
			p := pod("f", nil)
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs", Controller: ptrTrue()}}
			return p
		}(), wantFinalizer: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, Options{}, managed, tc.pod)
			store := h.factory.Batch().V1().Jobs().Informer().GetIndexer()
			for _, j := range []*batchv1.Job{foreignFinished, finished} {
				if err := store.Add(j); err != nil {
					t.Fatal(err)
				}
			}
			if err := h.c.syncOrphan(h.ctx, orphanKey{namespace: ns, name: tc.pod.Name}); err != nil {
				t.Fatal(err)
			}
			got, err := h.client.CoreV1().Pods(ns).Get(h.ctx, tc.pod.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if has := hasTrackingFinalizer(got); has != tc.wantFinalizer {
				t.Errorf("finalizer held: %v, want %v", has, tc.wantFinalizer)
			}
		})
	}
}

func ptrTrue() *bool { b := true; return &b }

// TestSameOwnerRef checks sameOwnerRef against reflect.DeepEqual, which it
// stands for in updatePod.
func TestSameOwnerRef(t *testing.T) {
	yes, no, yes2 := true, false, true
	base := metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: "j", UID: "u", Controller: &yes, BlockOwnerDeletion: &yes}
	variants := []*metav1.OwnerReference{nil, &base}
	for _, change := range []func(r *metav1.OwnerReference){
		func(r *metav1.OwnerReference) { r.APIVersion = "batch/v2" },
		func(r *metav1.OwnerReference) { r.Kind = "CronJob" },
		func(r *metav1.OwnerReference) { r.Name = "k" },
		func(r *metav1.OwnerReference) { r.UID = "v" },
		func(r *metav1.OwnerReference) { r.Controller = nil },
		func(r *metav1.OwnerReference) { r.Controller = &no },
		func(r *metav1.OwnerReference) { r.Controller = &yes2 },
		func(r *metav1.OwnerReference) { r.BlockOwnerDeletion = nil },
		func(r *metav1.OwnerReference) { r.BlockOwnerDeletion = &no },
	} {
		r := base
		change(&r)
		variants = append(variants, &r)
	}
	for _, a := range variants {
		for _, b := range variants {
			if got, want := sameOwnerRef(a, b), reflect.DeepEqual(a, b); got != want {
				t.Errorf("sameOwnerRef(%+v, %+v) = %v, reflect.DeepEqual says %v", a, b, got, want)
			}
		}
	}
}
