package ttlafterfinished

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/test/builder"
)

// cronJobs builds n finished Jobs controlled by a CronJob of UID owner, the
// i-th finishing i minutes after t0; failed ones every third.
func cronJobs(owner string, n int) []runtime.Object {
	var out []runtime.Object
	for i := 0; i < n; i++ {
		ct := batchv1.JobComplete
		if i%3 == 2 {
			ct = batchv1.JobFailed
		}
		j := builder.MakeJob(fmt.Sprintf("%s-%02d", owner, i), "ns").UID(fmt.Sprintf("%s-uid-%02d", owner, i)).
			Condition(ct, "", metav1.NewTime(t0.Add(time.Duration(i)*time.Minute))).Obj()
		j.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "CronJob", Name: owner, UID: types.UID(owner), Controller: ptr.To(true)}}
		out = append(out, j)
	}
	return out
}

func deletedNames(f *fixture) []string {
	var out []string
	for _, a := range f.client.Actions() {
		if a.GetVerb() == "delete" && a.GetResource().Resource == "jobs" {
			out = append(out, a.(interface{ GetName() string }).GetName())
		}
	}
	sort.Strings(out)
	return out
}

func TestHistoryLimit(t *testing.T) {
	objs := append(cronJobs("nightly", 10), cronJobs("hourly", 2)...)
	f := newFixture(t, t0.Add(time.Hour), objs, nil)
	f.cache(t, objs...)
	f.addPolicies(builder.MakeTTLPolicy("history").KeepLast(2, 1).GroupByControllerOwner().Obj())

	// Every Job's sync enqueues its group.
	for _, o := range objs {
		j := o.(*batchv1.Job)
		if err := f.c.syncJob(f.ctx, "ns/"+j.Name); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.c.historyQueue.Len(); got != 2 {
		t.Fatalf("%d groups queued, want 2 (one per CronJob)", got)
	}
	for _, g := range []groupKey{{policy: "history", namespace: "ns", group: "nightly"}, {policy: "history", namespace: "ns", group: "hourly"}} {
		if err := f.c.syncGroup(f.ctx, g); err != nil {
			t.Fatal(err)
		}
		// A second pass over the same (now stale) cache deletes nothing more.
		if err := f.c.syncGroup(f.ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	// nightly: succeeded 00 01 03 04 06 07 09 keep 09 07; failed 02 05 08 keep 08.
	want := []string{"nightly-00", "nightly-01", "nightly-02", "nightly-03", "nightly-04", "nightly-05", "nightly-06"}
	if diff := cmp.Diff(want, deletedNames(f)); diff != "" {
		t.Errorf("deleted (-want +got):\n%s", diff)
	}
	if got := f.c.stats["history"].deleted; got != int64(len(want)) {
		t.Errorf("policy counted %d deletions, want %d", got, len(want))
	}
}

func TestHistoryLimitDryRun(t *testing.T) {
	objs := cronJobs("nightly", 4)
	f := newFixture(t, t0.Add(time.Hour), objs, nil)
	f.cache(t, objs...)
	f.addPolicies(builder.MakeTTLPolicy("history").KeepLast(1, -1).GroupByControllerOwner().DryRun().Obj())
	g := groupKey{policy: "history", namespace: "ns", group: "nightly"}
	for i := 0; i < 2; i++ {
		if err := f.c.syncGroup(f.ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	if got := deletedNames(f); len(got) != 0 {
		t.Errorf("a dry-run history limit deleted %v", got)
	}
	// Succeeded: 00 01 03; keep 03; report 00 and 01 once each.
	if got := f.c.stats["history"].wouldDelete; got != 2 {
		t.Errorf("would delete %d, want 2", got)
	}
}
