package job

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/test/builder"
)

// fakeVersioner is an informer store that has synced up to rv.
type fakeVersioner struct{ rv string }

func (f *fakeVersioner) LastStoreSyncResourceVersion() string { return f.rv }

func TestWriteTracker(t *testing.T) {
	// write is one recorded write.
	type write struct {
		gr  schema.GroupResource
		uid types.UID
		rv  string
	}
	type step struct {
		// wrote records a write when set.
		wrote *write
		// jobsAt and podsAt move the stores when set ("" = the store
		// reports no version).
		jobsAt, podsAt *string
		// barrier records an ambiguous write of this object.
		barrier *barrier
		// forget drops the record of this uid ("" = any).
		forget *types.UID
		// wantStale is the resource reported stale ("" = none).
		wantStale string
	}
	at := ptr.To[string]
	cases := map[string][]step{
		"nothing written: never stale": {{wantStale: ""}},
		"job write waits for the job informer": {
			{wrote: &write{jobsResource, "u", "10"}, jobsAt: at("9"), podsAt: at("50"), wantStale: "jobs.batch"},
			{jobsAt: at("10"), wantStale: ""},
		},
		"pod write waits for the pod informer": {
			{wrote: &write{podsResource, "u", "20"}, jobsAt: at("50"), podsAt: at("19"), wantStale: "pods"},
			{podsAt: at("21"), wantStale: ""},
		},
		"an older write does not lower the bar": {
			{wrote: &write{podsResource, "u", "20"}, wantStale: "pods"},
			{wrote: &write{podsResource, "u", "15"}, podsAt: at("16"), wantStale: "pods"},
			{podsAt: at("20"), wantStale: ""},
		},
		"record dropped once caught up": {
			{wrote: &write{jobsResource, "u", "10"}, jobsAt: at("10"), wantStale: ""},
			// A store going back (relisted from an older cache) does not
			// revive a dropped record.
			{jobsAt: at("5"), wantStale: ""},
		},
		"a new incarnation of the Job replaces the record": {
			{wrote: &write{jobsResource, "old", "100"}, wantStale: "jobs.batch"},
			{wrote: &write{jobsResource, "new", "5"}, jobsAt: at("5"), wantStale: ""},
		},
		"forget with another uid keeps the record": {
			{wrote: &write{jobsResource, "u", "10"}, wantStale: "jobs.batch"},
			{forget: ptr.To[types.UID]("other"), wantStale: "jobs.batch"},
			{forget: ptr.To[types.UID]("u"), wantStale: ""},
		},
		"forget of any uid": {
			{wrote: &write{jobsResource, "u", "10"}, wantStale: "jobs.batch"},
			{forget: ptr.To[types.UID](""), wantStale: ""},
		},
		"store without versions never blocks": {
			{wrote: &write{podsResource, "u", "10"}, podsAt: at(""), wantStale: ""},
		},
		"versions that do not compare never block": {
			{wrote: &write{podsResource, "u", "not-a-number"}, wantStale: ""},
		},
		"a barrier blocks until passed": {
			{barrier: &barrier{resource: podsResource, name: "p"}, podsAt: at("100"), jobsAt: at("100"), wantStale: "pods"},
		},
	}
	for name, steps := range cases {
		t.Run(name, func(t *testing.T) {
			jobs, pods := &fakeVersioner{rv: "1"}, &fakeVersioner{rv: "1"}
			tr := newWriteTracker(map[schema.GroupResource]syncedVersioner{jobsResource: jobs, podsResource: pods})
			for i, s := range steps {
				if s.wrote != nil {
					tr.wrote("ns/j", s.wrote.uid, s.wrote.gr, s.wrote.rv)
				}
				if s.barrier != nil {
					tr.needBarrier("ns/j", "u", *s.barrier)
				}
				if s.forget != nil {
					tr.forget("ns/j", *s.forget)
				}
				if s.jobsAt != nil {
					jobs.rv = *s.jobsAt
				}
				if s.podsAt != nil {
					pods.rv = *s.podsAt
				}
				got := ""
				if st := tr.stale("ns/j", t0); st != nil {
					got = st.resource.String()
				}
				if got != s.wantStale {
					t.Errorf("step %d: stale %q, want %q", i, got, s.wantStale)
				}
			}
		})
	}
}

func TestAmbiguous(t *testing.T) {
	gr := schema.GroupResource{Resource: "pods"}
	cases := map[string]struct {
		err  error
		want bool
	}{
		"nil":                 {nil, false},
		"conflict":            {apierrors.NewConflict(gr, "p", errors.New("x")), false},
		"invalid":             {apierrors.NewBadRequest("x"), false},
		"forbidden":           {apierrors.NewForbidden(gr, "p", errors.New("x")), false},
		"throttled":           {apierrors.NewTooManyRequests("x", 1), false},
		"internal error":      {apierrors.NewInternalError(errors.New("x")), true},
		"unavailable":         {apierrors.NewServiceUnavailable("x"), true},
		"timeout":             {apierrors.NewTimeoutError("x", 1), true},
		"connection reset":    {fmt.Errorf("write: %w", errors.New("connection reset by peer")), true},
		"deadline exceeded":   {fmt.Errorf("post: %w", errTestDeadline), true},
		"wrapped status 500":  {fmt.Errorf("creating: %w", apierrors.NewInternalError(errors.New("x"))), true},
		"wrapped status 409":  {fmt.Errorf("creating: %w", apierrors.NewAlreadyExists(gr, "p")), false},
		"namespace not found": {apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "ns"), false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := ambiguous(tc.err); got != tc.want {
				t.Errorf("ambiguous(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

var errTestDeadline = errors.New("context deadline exceeded")

// TestSyncWaitsForOwnWrites: after a status write, the next sync is skipped
// (counted in stale_sync_skips_total, nothing written) until the Job
// informer shows the written version; the same for a pod write and the pod
// informer.
func TestSyncWaitsForOwnWrites(t *testing.T) {
	job := builder.MakeJob("j", ns).Selector("u").UID("u").ManagedBy(DefaultManagedBy).Parallelism(1).Completions(2).Obj()
	job.ResourceVersion = "1"
	h := newHarness(t, Options{}, job)
	var nextRV int
	setRV := func(obj runtime.Object) {
		nextRV++
		obj.(metav1.Object).SetResourceVersion(fmt.Sprint(100 + nextRV))
	}
	h.client.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		switch a := a.(type) {
		case k8stesting.CreateAction:
			setRV(a.GetObject())
		case k8stesting.UpdateAction:
			setRV(a.GetObject())
		}
		return false, nil, nil
	})
	key := jobKey(job)
	if err := h.c.syncJob(h.ctx, key); err != nil {
		t.Fatalf("first sync: %v", err)
	}
	// One pod created (rv 101), one status write (rv 102).
	h.client.ClearActions()
	err := h.c.syncJob(h.ctx, key)
	if !errors.Is(err, errStaleCache) {
		t.Fatalf("second sync: err %v, want a stale-cache skip", err)
	}
	if n := len(h.writes()); n != 0 {
		t.Errorf("a skipped sync wrote %v", h.writes())
	}
	skips := testutil.ToFloat64(h.c.metrics.StaleSyncSkips.WithLabelValues("batch", "jobs")) + testutil.ToFloat64(h.c.metrics.StaleSyncSkips.WithLabelValues("", "pods"))
	if skips != 1 {
		t.Errorf("stale_sync_skips_total = %v, want 1", skips)
	}
	// The informers deliver the writes.
	if err := refreshJob(h, job); err != nil {
		t.Fatal(err)
	}
	pods, err := h.client.CoreV1().Pods(ns).List(h.ctx, metav1.ListOptions{})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods: %v, %v", pods, err)
	}
	if err := h.c.podIndexer.Add(&pods.Items[0]); err != nil {
		t.Fatal(err)
	}
	h.c.expectations.observe(key, 1, 0)
	if err := h.c.syncJob(h.ctx, key); err != nil {
		t.Fatalf("sync after the informers caught up: %v", err)
	}
	if h.c.writes.len() != 0 {
		t.Errorf("%d write records left after catching up, want 0", h.c.writes.len())
	}
}

// TestSyncReadsBarrierAfterAmbiguousCreate: a pod create that fails with a
// server error may have been applied; the next sync reads that pod by name
// from the apiserver and waits until the pod informer shows its version.
func TestSyncReadsBarrierAfterAmbiguousCreate(t *testing.T) {
	job := builder.MakeJob("j", ns).Selector("u").UID("u").ManagedBy(DefaultManagedBy).Parallelism(1).Completions(1).Obj()
	// Another Job's pod puts the pod informer at version 1.
	other := builder.MakePod("other", ns).UID("other").Obj()
	other.ResourceVersion = "1"
	h := newHarness(t, Options{}, job, other)
	failCreate := true
	h.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		obj.ResourceVersion = "42"
		if failCreate {
			// Applied, then the answer is lost.
			if err := h.client.Tracker().Create(a.GetResource(), obj, ns); err != nil {
				t.Fatal(err)
			}
			return true, nil, apierrors.NewInternalError(errors.New("injected after apply"))
		}
		return false, nil, nil
	})
	key := jobKey(job)
	if err := h.c.syncJob(h.ctx, key); err == nil {
		t.Fatal("first sync: want the create error")
	}
	failCreate = false
	h.client.ClearActions()
	err := h.c.syncJob(h.ctx, key)
	if !errors.Is(err, errStaleCache) {
		t.Fatalf("second sync: err %v, want a stale-cache skip until the pod is seen", err)
	}
	var reads []string
	for _, a := range h.client.Actions() {
		reads = append(reads, a.GetVerb()+" "+a.GetResource().Resource)
	}
	if diff := cmp.Diff([]string{"get pods"}, reads); diff != "" {
		t.Errorf("barrier reads (-want +got):\n%s", diff)
	}
	// The informer shows the pod the failed create made: no second pod.
	created, err := h.client.CoreV1().Pods(ns).List(h.ctx, metav1.ListOptions{LabelSelector: batchv1.ControllerUidLabel + "=u"})
	if err != nil || len(created.Items) != 1 || created.Items[0].ResourceVersion != "42" {
		t.Fatalf("the pod the failed create made: %v, %v", created, err)
	}
	if err := h.c.podIndexer.Add(&created.Items[0]); err != nil {
		t.Fatal(err)
	}
	h.client.ClearActions()
	if err := h.c.syncJob(h.ctx, key); err != nil {
		t.Fatalf("third sync: %v", err)
	}
	if got := h.writes()["create pods"]; got != 0 {
		t.Errorf("created %d more pods, want 0 (the failed create was applied)", got)
	}
}

// TestSyncFinishedJobReleasesLeftovers: a finished Job's pods that still hold
// the finalizer (one created from a stale cache after the Job finished, one
// whose finish the controller never saw) go to the orphan queue, except a
// pod whose removal is in flight; everything kept for the Job is forgotten.
func TestSyncFinishedJobReleasesLeftovers(t *testing.T) {
	job := builder.MakeJob("j", ns).Selector("u").UID("u").ManagedBy(DefaultManagedBy).Parallelism(1).Completions(1).
		Status(builder.SucceededStatus(metav1.NewTime(t0.Add(-time.Minute)), metav1.NewTime(t0))).Obj()
	p := func(name string) *builder.PodWrapper {
		return builder.MakePod(name, ns).UID(name).OwnedByJob(job).Finalizer(batchv1.JobTrackingFinalizer)
	}
	h := newHarness(t, Options{}, job,
		p("late-running").Phase(corev1.PodRunning).Obj(),
		p("late-succeeded").Terminated(0, metav1.NewTime(t0)).Obj(),
		p("in-flight").Terminated(0, metav1.NewTime(t0)).Obj(),
		builder.MakePod("released", ns).UID("released").OwnedByJob(job).Terminated(0, metav1.NewTime(t0)).Obj(),
	)
	key := jobKey(job)
	h.c.finalizers.expect(key, []types.UID{"in-flight"})
	h.c.expectations.expect(key, 1, 0)
	h.c.backoff.set(key, backoffRecord{failuresAfterLastSuccess: 1})
	h.c.finishedJobs.Store(job.UID, struct{}{})
	h.c.writes.wrote(key, job.UID, jobsResource, "1")
	h.client.ClearActions()
	if err := h.c.syncJob(h.ctx, key); err != nil {
		t.Fatal(err)
	}
	if n := len(h.writes()); n != 0 {
		t.Errorf("sync of a finished job wrote %v", h.writes())
	}
	_, orphans := queued(h.c)
	want := []orphanKey{{namespace: ns, name: "late-running"}, {namespace: ns, name: "late-succeeded"}}
	if diff := cmp.Diff(want, orphans, cmp.AllowUnexported(orphanKey{}), cmpSortOrphans); diff != "" {
		t.Errorf("orphan queue (-want +got):\n%s", diff)
	}
	checkForgotten(t, h.c, key, job.UID)
}

// checkForgotten fails the test if the controller still keeps anything for
// the Job.
func checkForgotten(t *testing.T, c *Controller, key string, uid types.UID) {
	t.Helper()
	if _, ok := c.expectations.m[key]; ok {
		t.Error("pod expectations kept")
	}
	if c.finalizers.expected(key).Len() != 0 {
		t.Error("finalizer expectations kept")
	}
	if _, ok := c.backoff.records[key]; ok {
		t.Error("backoff record kept")
	}
	if _, ok := c.finishedJobs.Load(uid); ok {
		t.Error("finished mark kept")
	}
	if c.writes.len() != 0 {
		t.Error("write record kept")
	}
}

var cmpSortOrphans = cmp.Transformer("sortOrphans", func(in []orphanKey) []orphanKey {
	out := append([]orphanKey(nil), in...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j].name < out[i].name {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
})

// TestBarrierReadRefused: the pod read that resolves an ambiguous create
// is refused (403, as under a role without pods "get"). The sync falls back
// to a LIST of that pod by name, passes the barrier with the pod's version
// (not the collection's, which the informer may never reach), and fails,
// counted as a sync error naming the refusal, so that the next sync goes
// on; when the LIST is refused too, the barrier stays for the retry.
func TestBarrierReadRefused(t *testing.T) {
	for name, tc := range map[string]struct {
		// listRefused makes the fallback LIST fail too.
		listRefused bool
		// want
		wantStale  bool
		wantReads  []string
		wantErrors float64
	}{
		"get refused, list allowed": {wantReads: []string{"get pods", "list pods"}, wantErrors: 1},
		"get and list refused":      {listRefused: true, wantReads: []string{"get pods", "list pods"}, wantErrors: 1},
	} {
		t.Run(name, func(t *testing.T) {
			job := builder.MakeJob("j", ns).Selector("u").UID("u").ManagedBy(DefaultManagedBy).Parallelism(1).Completions(1).Obj()
			other := builder.MakePod("other", ns).UID("other").Obj()
			other.ResourceVersion = "1"
			h := newHarness(t, Options{}, job, other)
			h.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewInternalError(errors.New("injected"))
			})
			forbidden := func(verb string) k8stesting.ReactionFunc {
				return func(a k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewForbidden(podsResource, "", fmt.Errorf("cannot %s pods", verb))
				}
			}
			h.client.PrependReactor("get", "pods", forbidden("get"))
			if tc.listRefused {
				h.client.PrependReactor("list", "pods", forbidden("list"))
			} else {
				h.client.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
					name := a.(k8stesting.ListAction).GetListRestrictions().Fields.String()
					pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: strings.TrimPrefix(name, "metadata.name="), Namespace: ns, ResourceVersion: "77"}}
					return true, &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "1000"}, Items: []corev1.Pod{pod}}, nil
				})
			}
			key := jobKey(job)
			if err := h.c.syncJob(h.ctx, key); err == nil {
				t.Fatal("first sync: want the create error")
			}
			errorsBefore := testutil.ToFloat64(h.c.metrics.Syncs.WithLabelValues("NonIndexed", "error", "reconciling"))
			h.client.ClearActions()
			err := h.c.syncJob(h.ctx, key)
			if got := errors.Is(err, errStaleCache); got != tc.wantStale {
				t.Errorf("second sync: err %v; stale-cache skip %v, want %v", err, got, tc.wantStale)
			}
			if !tc.wantStale && err == nil {
				t.Error("second sync: want an error")
			}
			var reads []string
			for _, a := range h.client.Actions() {
				reads = append(reads, a.GetVerb()+" "+a.GetResource().Resource)
			}
			if diff := cmp.Diff(tc.wantReads, reads); diff != "" {
				t.Errorf("barrier reads (-want +got):\n%s", diff)
			}
			got := testutil.ToFloat64(h.c.metrics.Syncs.WithLabelValues("NonIndexed", "error", "reconciling")) - errorsBefore
			if got != tc.wantErrors {
				t.Errorf("sync errors counted: %v, want %v", got, tc.wantErrors)
			}
			if !tc.listRefused {
				if !strings.Contains(fmt.Sprint(err), `grant "get" on pods`) {
					t.Errorf("err %v: want it to name the missing permission", err)
				}
				// The informer must reach the pod's version.
				h.c.writes.mu.Lock()
				got := h.c.writes.jobs[key].versions[versionKey{resource: podsResource}]
				h.c.writes.mu.Unlock()
				if got != "77" {
					t.Errorf("after the fallback the pod informer must reach %q, want the pod's version 77", got)
				}
			} else if len(h.c.writes.barriers(key)) != 1 {
				t.Errorf("barriers %v, want the pod's kept for the retry", h.c.writes.barriers(key))
			}
		})
	}
}

// TestStaleWaitIsBounded: an informer that never shows the controller's
// own write holds the Job for staleWaitLimit at most; then the sync fails
// once, counted as a sync error, and the retry syncs from the cache.
func TestStaleWaitIsBounded(t *testing.T) {
	job := builder.MakeJob("j", ns).Selector("u").UID("u").ManagedBy(DefaultManagedBy).Parallelism(1).Completions(1).Obj()
	job.ResourceVersion = "1"
	// Another Job's pod puts the pod informer at version 1.
	other := builder.MakePod("other", ns).UID("other").Obj()
	other.ResourceVersion = "1"
	h := newHarness(t, Options{}, job, other)
	key := jobKey(job)
	// A write the pod informer will never show.
	h.c.writes.wrote(key, job.UID, podsResource, "1000")
	errorsCounted := func() float64 {
		return testutil.ToFloat64(h.c.metrics.Syncs.WithLabelValues("NonIndexed", "error", "reconciling"))
	}
	if err := h.c.syncJob(h.ctx, key); !errors.Is(err, errStaleCache) {
		t.Fatalf("first sync: %v, want a stale-cache skip", err)
	}
	h.clock.Step(staleWaitLimit - time.Second)
	if err := h.c.syncJob(h.ctx, key); !errors.Is(err, errStaleCache) {
		t.Fatalf("sync within the limit: %v, want a stale-cache skip", err)
	}
	if n := errorsCounted(); n != 0 {
		t.Errorf("%v sync errors while waiting within the limit, want 0", n)
	}
	h.clock.Step(time.Second)
	err := h.c.syncJob(h.ctx, key)
	if err == nil || errors.Is(err, errStaleCache) {
		t.Fatalf("sync at the limit: %v, want an error that is not a stale-cache skip", err)
	}
	if n := errorsCounted(); n != 1 {
		t.Errorf("%v sync errors at the limit, want 1", n)
	}
	h.client.ClearActions()
	if err := h.c.syncJob(h.ctx, key); err != nil {
		t.Fatalf("the retry: %v, want a sync", err)
	}
	if got := h.writes()["create pods"]; got != 1 {
		t.Errorf("the retry created %d pods, want 1", got)
	}
}
