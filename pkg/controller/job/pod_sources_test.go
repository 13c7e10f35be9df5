package job

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	metadatafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/test/builder"
)

func TestTrimOutsidePod(t *testing.T) {
	ref := metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: "j", UID: "j-uid", Controller: ptr.To(true)}
	full := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Name: "p", Namespace: ns, UID: "p-uid", ResourceVersion: "9",
		Labels:          map[string]string{"app": "a"},
		Annotations:     map[string]string{"big": strings.Repeat("x", 100)},
		Finalizers:      []string{"example.com/other", batchv1.JobTrackingFinalizer},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "c", UID: "c-uid"}, ref},
		ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "m"}},
	}}
	want := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Name: "p", Namespace: ns, UID: "p-uid", ResourceVersion: "9",
		Labels: map[string]string{"app": "a"}, Finalizers: []string{batchv1.JobTrackingFinalizer}, OwnerReferences: []metav1.OwnerReference{ref},
	}}
	got, _ := trimOutsidePod(full)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("trimmed pod holding the finalizer (-want +got):\n%s", diff)
	}
	again, _ := trimOutsidePod(got)
	if diff := cmp.Diff(want, again); diff != "" {
		t.Errorf("trimming twice changed it (-want +got):\n%s", diff)
	}
	full.Finalizers = nil
	got, _ = trimOutsidePod(full)
	if diff := cmp.Diff(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns, ResourceVersion: "9"}}, got); diff != "" {
		t.Errorf("a pod without the tracking finalizer is kept by name and version only (-want +got):\n%s", diff)
	}
}

// TestPodsOutsideTheJobLabel: with JobPodsOnly, a pod that the Job-label
// informer does not hold is released when no managed, unfinished Job
// counts it, read from the apiserver first, and left alone otherwise.
func TestPodsOutsideTheJobLabel(t *testing.T) {
	running := builder.MakeJob("running", ns).Selector("running-uid").Obj()
	manual := builder.MakeJob("manual", ns).UID("manual-uid").Obj()
	manual.Spec.ManualSelector = ptr.To(true)
	manual.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "m"}}
	gone := builder.MakeJob("gone", ns).UID("gone-uid").Obj()
	cases := []struct {
		name string
		pod  *corev1.Pod
		// queued says the pod goes to the orphan queue; patch is what
		// the live release must send ("" for none).
		queued bool
		patch  []string
	}{
		{name: "Job gone", pod: builder.MakePod("a", ns).UID("a").OwnedByJob(gone).Finalizer(batchv1.JobTrackingFinalizer).Obj(),
			queued: true, patch: []string{`"$deleteFromPrimitiveList/finalizers":["batch.kubernetes.io/job-tracking"]`}},
		{name: "no controller", pod: builder.MakePod("b", ns).UID("b").Finalizer(batchv1.JobTrackingFinalizer).Obj(),
			queued: true, patch: []string{`"$deleteFromPrimitiveList/finalizers":["batch.kubernetes.io/job-tracking"]`}},
		{name: "label removed from a running Job's pod", pod: func() *corev1.Pod {
			p := builder.MakePod("c", ns).UID("c").OwnedByJob(running).Finalizer(batchv1.JobTrackingFinalizer).Obj()
			p.Labels = map[string]string{"app": "x"}
			return p
		}(),
			queued: true, patch: []string{`"$deleteFromPrimitiveList/finalizers":["batch.kubernetes.io/job-tracking"]`, `"$patch":"delete"`, `"uid":"running-uid"`}},
		{name: "pod of a running manualSelector Job", pod: builder.MakePod("d", ns).UID("d").OwnedByJob(manual).Finalizer(batchv1.JobTrackingFinalizer).Label("app", "m").Obj()},
		{name: "no finalizer", pod: builder.MakePod("e", ns).UID("e").OwnedByJob(gone).Obj()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			logger, _ := ktesting.NewTestContext(t)
			sch := runtime.NewScheme()
			if err := metav1.AddMetaToScheme(sch); err != nil {
				t.Fatal(err)
			}
			meta := metadatafake.NewSimpleMetadataClient(sch)
			h := newHarness(t, Options{JobPodsOnly: true, ManageUnclaimedJobs: true, Metadata: meta}, running, tc.pod)
			if err := h.factory.Batch().V1().Jobs().Informer().GetIndexer().Add(manual); err != nil {
				t.Fatal(err)
			}
			m := &metav1.PartialObjectMetadata{ObjectMeta: *tc.pod.ObjectMeta.DeepCopy()}
			h.c.sources.checkOutsidePod(logger, m)
			if got := h.c.orphanQueue.Len(); (got == 1) != tc.queued {
				t.Fatalf("orphan queue holds %d keys, want queued=%v", got, tc.queued)
			}
			if !tc.queued {
				return
			}
			key, _ := h.c.orphanQueue.Get()
			if !key.live {
				t.Errorf("key %+v: want a live read", key)
			}
			h.client.ClearActions()
			meta.ClearActions()
			if err := h.c.syncOrphan(h.ctx, key); err != nil {
				t.Fatal(err)
			}
			var patches []string
			// Every pod write goes through the typed client (the fake
			// has no REST client for metadata-only answers); none may go
			// through the metadata client.
			if got := meta.Actions(); len(got) != 0 {
				t.Errorf("metadata client actions %v, want none", got)
			}
			for _, a := range h.client.Actions() {
				if a.GetVerb() == "patch" && a.GetResource().Resource == "pods" {
					patches = append(patches, string(a.(k8stesting.PatchAction).GetPatch()))
				}
			}
			if len(patches) != 1 {
				t.Fatalf("pod patches %q, want one", patches)
			}
			for _, want := range tc.patch {
				if !strings.Contains(patches[0], want) {
					t.Errorf("patch %s lacks %s", patches[0], want)
				}
			}
		})
	}
}

// TestOutsidePodsFoundByJob: the metadata of pods without the Job label is
// indexed by controller, so the pods of a deleted Job with manualSelector
// are found by its UID, and a pod holding the finalizer for a gone Job is
// counted by the stale finalizer gauge like a pod of the shared cache.
func TestOutsidePodsFoundByJob(t *testing.T) {
	sch := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(sch); err != nil {
		t.Fatal(err)
	}
	running := builder.MakeJob("running", ns).Selector("running-uid").Obj()
	h := newHarness(t, Options{JobPodsOnly: true, ManageUnclaimedJobs: true, Metadata: metadatafake.NewSimpleMetadataClient(sch)}, running)
	gone := builder.MakeJob("gone", ns).UID("gone-uid").Obj()
	for _, p := range []*corev1.Pod{
		builder.MakePod("held", ns).UID("held").OwnedByJob(gone).Finalizer(batchv1.JobTrackingFinalizer).Obj(),
		builder.MakePod("free", ns).UID("free").OwnedByJob(gone).Obj(),
	} {
		m, _ := trimOutsidePod(&metav1.PartialObjectMetadata{ObjectMeta: p.ObjectMeta})
		if err := h.c.sources.others.GetIndexer().Add(m); err != nil {
			t.Fatal(err)
		}
	}
	got := h.c.sources.outsidePodsOf(ns, "gone-uid")
	if len(got) != 1 || got[0].Name != "held" {
		t.Errorf("pods of the gone Job holding the finalizer: %v, want [held]", got)
	}
	h.c.staleFinalizers.StaleFinalizers()
	h.clock.Step(2 * staleFinalizerGrace)
	if s := h.c.staleFinalizers.StaleFinalizers(); s.Pods != 1 {
		t.Errorf("stale finalizer pods: %d, want 1 (held)", s.Pods)
	}
}
