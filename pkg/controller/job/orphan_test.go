package job

import (
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"jobkeeper.dev/jobkeeper/test/builder"
)

// TestOrphansOfAGoneJob: pods of a Job missing from the cache are released
// after one read of the Job from the apiserver, not one read per pod; the
// patches carry the pod's resourceVersion (a pod that changed meanwhile is
// looked at again), and leave nothing in the read-your-writes tracker (the
// Job is never synced again, so nothing would clear it).
func TestOrphansOfAGoneJob(t *testing.T) {
	gone := builder.MakeJob("gone", ns).UID("gone-uid").Obj()
	other := builder.MakeJob("other", ns).UID("other-uid").Obj()
	var pods []*corev1.Pod
	for _, name := range []string{"p1", "p2", "p3"} {
		p := builder.MakePod(name, ns).UID(name).OwnedByJob(gone).Finalizer(batchv1.JobTrackingFinalizer).Obj()
		p.ResourceVersion = "7"
		pods = append(pods, p)
	}
	h := newHarness(t, Options{}, other, pods...)
	h.client.ClearActions()
	for _, p := range pods {
		if err := h.c.syncOrphan(h.ctx, orphanKey{namespace: ns, name: p.Name}); err != nil {
			t.Fatal(err)
		}
	}
	gets, patches := 0, 0
	for _, a := range h.client.Actions() {
		switch {
		case a.GetVerb() == "get" && a.GetResource().Resource == "jobs":
			gets++
		case a.GetVerb() == "patch" && a.GetResource().Resource == "pods":
			patches++
			if patch := string(a.(k8stesting.PatchAction).GetPatch()); !strings.Contains(patch, `"resourceVersion":"7"`) {
				t.Errorf("patch %s carries no resourceVersion precondition", patch)
			}
		}
	}
	if gets != 1 || patches != 3 {
		t.Errorf("%d reads of the Job and %d pod patches, want 1 and 3", gets, patches)
	}
	if n := h.c.writes.len(); n != 0 {
		t.Errorf("%d Jobs left in the write tracker by orphan patches, want 0", n)
	}
}

// TestOrphanPatchConflict: a pod that changed since the cache showed it
// (the patch's resourceVersion precondition fails) is not released on a
// stale view; the key is retried.
func TestOrphanPatchConflict(t *testing.T) {
	gone := builder.MakeJob("gone", ns).UID("gone-uid").Obj()
	other := builder.MakeJob("other", ns).UID("other-uid").Obj()
	p := builder.MakePod("p", ns).UID("p").OwnedByJob(gone).Finalizer(batchv1.JobTrackingFinalizer).Obj()
	p.ResourceVersion = "7"
	h := newHarness(t, Options{}, other, p)
	h.client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(corev1.Resource("pods"), "p", nil)
	})
	if err := h.c.syncOrphan(h.ctx, orphanKey{namespace: ns, name: "p"}); !apierrors.IsConflict(err) {
		t.Errorf("syncOrphan: %v, want the conflict returned for a retry", err)
	}
}
