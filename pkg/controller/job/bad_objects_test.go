package job

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/test/builder"
)

// Strange objects must never stop the controller: each case syncs without
// an error, leaves a status the API accepts, and the Job goes on.

func TestSyncMalformedCompletionIndexes(t *testing.T) {
	started := metav1.NewTime(t0.Add(-time.Minute))
	job := builder.MakeJob("idx", ns).Selector("u").ManagedBy(DefaultManagedBy).Indexed().Parallelism(2).Completions(3).
		Status(batchv1.JobStatus{StartTime: &started, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0)}).Obj()
	p := func(name, ix string) *builder.PodWrapper {
		return builder.MakePod(name, ns).UID(name).OwnedByJob(job).Finalizer(batchv1.JobTrackingFinalizer).Index(ix)
	}
	h := newHarness(t, Options{}, job,
		p("letters", "abc").Phase(corev1.PodRunning).Obj(),
		p("negative", "-1").Terminated(0, metav1.NewTime(t0)).Obj(),
		p("huge", "99999999999999999999").Terminated(1, metav1.NewTime(t0)).Obj(),
		p("beyond", "3").Terminated(0, metav1.NewTime(t0)).Obj(),
	)
	got, _ := h.sync(t, job)
	// Nothing is counted from bad indexes and the running pod without a
	// valid index is deleted (deletions come before creations in a sync).
	if diff := cmp.Diff(statusCounts{Terminating: 1, Started: true}, countsOf(got), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("first sync: status (-want +got):\n%s", diff)
	}
	// The informers catch up: the deleted pod is gone, the others released.
	pods, err := h.client.CoreV1().Pods(ns).List(h.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range h.c.podIndexer.List() {
		h.c.podIndexer.Delete(o)
	}
	for i := range pods.Items {
		h.c.podIndexer.Add(&pods.Items[i])
	}
	h.c.expectations.forget(jobKey(job))
	h.c.finalizers.forget(jobKey(job))
	if err := refreshJob(h, job); err != nil {
		t.Fatal(err)
	}
	got, after := h.sync(t, job)
	if diff := cmp.Diff(statusCounts{Active: 2, Started: true}, countsOf(got), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("second sync: status (-want +got):\n%s", diff)
	}
	var created []string
	for _, pod := range after {
		if hasTrackingFinalizer(&pod) {
			created = append(created, pod.Annotations[batchv1.JobCompletionIndexAnnotation])
		}
	}
	if diff := cmp.Diff([]string{"0", "1"}, created, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("pods holding the finalizer by index (-want +got):\n%s", diff)
	}
}

func TestOrphanPodOfMissingJob(t *testing.T) {
	job := builder.MakeJob("j", ns).Selector("u").ManagedBy(DefaultManagedBy).Obj()
	gone := builder.MakeJob("gone", ns).UID("gone-uid").Obj()
	pod := builder.MakePod("p", ns).UID("p").OwnedByJob(gone).Finalizer(batchv1.JobTrackingFinalizer).Phase(corev1.PodRunning).Obj()
	h := newHarness(t, Options{}, job, pod)
	h.c.addPod(klog.Background(), pod)
	_, orphans := queued(h.c)
	if diff := cmp.Diff([]orphanKey{{namespace: ns, name: "p"}}, orphans, cmp.AllowUnexported(orphanKey{})); diff != "" {
		t.Fatalf("orphan queue (-want +got):\n%s", diff)
	}
	h.client.ClearActions()
	if err := h.c.syncOrphan(h.ctx, orphans[0]); err != nil {
		t.Fatal(err)
	}
	// The apiserver confirmed the Job is gone before the finalizer went.
	var verbs []string
	for _, a := range h.client.Actions() {
		verbs = append(verbs, a.GetVerb()+" "+a.GetResource().Resource)
	}
	if diff := cmp.Diff([]string{"get jobs", "patch pods"}, verbs); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

func TestOrphanPodOfJobMissingFromCacheOnly(t *testing.T) {
	// The pod informer is ahead of the Job informer: the Job exists, so the
	// finalizer stays.
	live := builder.MakeJob("new", ns).UID("new-uid").ManagedBy(DefaultManagedBy).Obj()
	pod := builder.MakePod("p", ns).UID("p").OwnedByJob(live).Finalizer(batchv1.JobTrackingFinalizer).Phase(corev1.PodRunning).Obj()
	h := newHarness(t, Options{}, builder.MakeJob("other", ns).Obj(), pod)
	if _, err := h.client.BatchV1().Jobs(ns).Create(h.ctx, live, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.client.ClearActions()
	if err := h.c.syncOrphan(h.ctx, orphanKey{namespace: ns, name: "p"}); err != nil {
		t.Fatal(err)
	}
	if w := h.writes(); len(w) != 0 {
		t.Errorf("wrote %v; the finalizer of a pod of a live Job must stay", w)
	}
}

func TestSyncHugeCompletions(t *testing.T) {
	for _, indexed := range []bool{false, true} {
		w := builder.MakeJob("big", ns).Selector("u").ManagedBy(DefaultManagedBy).Parallelism(5).Completions(1000000)
		if indexed {
			w.Indexed()
		}
		job := w.Obj()
		h := newHarness(t, Options{}, job)
		got, pods := h.sync(t, job)
		if len(pods) != 5 || got.Status.Active != 5 {
			t.Errorf("indexed=%v: %d pods, active %d; want 5", indexed, len(pods), got.Status.Active)
		}
	}
}

func TestSyncCorruptedStatus(t *testing.T) {
	started := metav1.NewTime(t0.Add(-time.Minute))
	job := builder.MakeJob("idx", ns).Selector("u").ManagedBy(DefaultManagedBy).Indexed().Parallelism(2).Completions(5).BackoffLimitPerIndex(1).
		Status(batchv1.JobStatus{
			StartTime:        &started,
			CompletedIndexes: "x,4-2,1,0,99999999999,1",
			FailedIndexes:    ptr.To("1,3,-1"),
			UncountedTerminatedPods: &batchv1.UncountedTerminatedPods{
				Succeeded: []types.UID{"never-existed"}, Failed: []types.UID{"never-existed-either"},
			},
		}).Obj()
	h := newHarness(t, Options{}, job)
	got, _ := h.sync(t, job)
	if got.Status.CompletedIndexes != "0,1" || ptr.Deref(got.Status.FailedIndexes, "?") != "3" {
		t.Errorf("completedIndexes %q failedIndexes %q, want \"0,1\" and \"3\" (no overlap, garbage dropped)", got.Status.CompletedIndexes, ptr.Deref(got.Status.FailedIndexes, "?"))
	}
	if u := got.Status.UncountedTerminatedPods; len(u.Succeeded)+len(u.Failed) != 0 {
		t.Errorf("uncounted UIDs of pods that do not exist kept: %+v", u)
	}
	if got.Status.Active != 2 {
		t.Errorf("active %d, want 2 (the Job goes on)", got.Status.Active)
	}
}

// TestSyncReadyNeverExceedsActive: a ready pod already gone when the
// controller removes its finalizer counts as deleted in ready and active
// alike.
func TestSyncReadyNeverExceedsActive(t *testing.T) {
	started := metav1.NewTime(t0.Add(-time.Minute))
	job := builder.MakeJob("j", ns).Selector("u").ManagedBy(DefaultManagedBy).Parallelism(1).Completions(5).
		Status(batchv1.JobStatus{StartTime: &started, Active: 2, Ready: ptr.To[int32](2), Terminating: ptr.To[int32](0)}).Obj()
	p := func(name string) *corev1.Pod {
		return builder.MakePod(name, ns).UID(name).OwnedByJob(job).Finalizer(batchv1.JobTrackingFinalizer).NodeName("n").Phase(corev1.PodRunning).Ready().Obj()
	}
	h := newHarness(t, Options{}, job, p("a"), p("b"))
	h.client.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(corev1.Resource("pods"), a.(k8stesting.PatchAction).GetName())
	})
	got, _ := h.sync(t, job)
	if got.Status.Active != 1 || ptr.Deref(got.Status.Ready, -1) != 1 {
		t.Errorf("active %d ready %d, want 1 and 1", got.Status.Active, ptr.Deref(got.Status.Ready, -1))
	}
}
