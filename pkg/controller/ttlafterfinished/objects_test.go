package ttlafterfinished

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"jobkeeper.dev/jobkeeper/pkg/apis/jobkeeper/v1alpha1"
	"jobkeeper.dev/jobkeeper/test/builder"
)

func pod(uid string) *builder.PodWrapper {
	w := builder.MakePod("p", "ns").UID(uid)
	w.Pod.ResourceVersion = "1"
	return w
}

func TestSyncPod(t *testing.T) {
	at := metav1.NewTime(t0)
	owner := builder.MakeJob("j", "ns").UID("job-uid").Obj()
	cases := map[string]struct {
		pod         *corev1.Pod
		policies    []*v1alpha1.TTLPolicy
		now         time.Time
		wantActions []string
		wantRequeue time.Duration
		wantEvents  int
	}{
		"annotation, expired (no event by default)": {
			pod:         pod("a").Annotation(v1alpha1.TTLAnnotation, "5").Terminated(0, at).Obj(),
			now:         t0.Add(5 * time.Second),
			wantActions: []string{"delete pods"},
		},
		"annotation, not expired": {
			pod:         pod("a").Annotation(v1alpha1.TTLAnnotation, "5").Terminated(1, at).Obj(),
			now:         t0.Add(time.Second),
			wantRequeue: 4 * time.Second,
		},
		"annotation, running": {
			pod: pod("a").Annotation(v1alpha1.TTLAnnotation, "0").Phase(corev1.PodRunning).Obj(),
			now: t0.Add(time.Hour),
		},
		"invalid annotation: warning, kept": {
			pod:        pod("a").Annotation(v1alpha1.TTLAnnotation, "soon").Terminated(0, at).Obj(),
			now:        t0.Add(time.Hour),
			wantEvents: 1,
		},
		"job pod with annotation: left to the Job": {
			pod: pod("a").Annotation(v1alpha1.TTLAnnotation, "0").OwnedByJob(owner).Terminated(0, at).Obj(),
			now: t0.Add(time.Hour),
		},
		"job pod, policy without includeJobPods": {
			pod:      pod("a").OwnedByJob(owner).Terminated(0, at).Obj(),
			policies: []*v1alpha1.TTLPolicy{builder.MakeTTLPolicy("pods").Target("v1", "Pod").TTLAfterSuccess(0).Obj()},
			now:      t0.Add(time.Hour),
		},
		"job pod, policy with includeJobPods": {
			pod:         pod("a").OwnedByJob(owner).Terminated(0, at).Obj(),
			policies:    []*v1alpha1.TTLPolicy{builder.MakeTTLPolicy("pods").Target("v1", "Pod").TTLAfterSuccess(0).IncludeJobPods().DeletionEvents().Obj()},
			now:         t0.Add(time.Hour),
			wantActions: []string{"delete pods"},
			wantEvents:  1,
		},
		"policy with different TTLs: failure TTL applies": {
			pod:         pod("a").Terminated(2, at).Obj(),
			policies:    []*v1alpha1.TTLPolicy{builder.MakeTTLPolicy("pods").Target("v1", "Pod").TTLAfterSuccess(10).TTLAfterFailure(60).Obj()},
			now:         t0.Add(10 * time.Second),
			wantRequeue: 50 * time.Second,
		},
		"own annotation beats the policy": {
			pod:         pod("a").Annotation(v1alpha1.TTLAnnotation, "3600").Terminated(0, at).Obj(),
			policies:    []*v1alpha1.TTLPolicy{builder.MakeTTLPolicy("pods").Target("v1", "Pod").TTLAfterSuccess(0).Obj()},
			now:         t0.Add(time.Minute),
			wantRequeue: 59 * time.Minute,
		},
		"label selector does not match": {
			pod:      pod("a").Label("app", "web").Terminated(0, at).Obj(),
			policies: []*v1alpha1.TTLPolicy{builder.MakeTTLPolicy("pods").Target("v1", "Pod").TTLAfterSuccess(0).Selector("app", "batch").Obj()},
			now:      t0.Add(time.Minute),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, tc.now, []runtime.Object{tc.pod}, nil)
			f.cache(t, tc.pod)
			f.addPolicies(tc.policies...)
			key := objectKey{resource: podResource, namespace: "ns", name: "p"}
			if err := f.c.syncObject(f.ctx, key); err != nil {
				t.Fatalf("syncObject: %v", err)
			}
			if diff := cmp.Diff(tc.wantActions, actions(f.client.Actions())); diff != "" {
				t.Errorf("API calls (-want +got):\n%s", diff)
			}
			if got := f.objQ.after[key]; got != tc.wantRequeue {
				t.Errorf("requeued after %v, want %v", got, tc.wantRequeue)
			}
			if got := f.events(); len(got) != tc.wantEvents {
				t.Errorf("events %q, want %d", got, tc.wantEvents)
			}
		})
	}
}

func TestJobPolicies(t *testing.T) {
	at := metav1.NewTime(t0)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns", Labels: map[string]string{"env": "ci"}}}
	cases := map[string]struct {
		job         *batchv1.Job
		policies    []*v1alpha1.TTLPolicy
		now         time.Time
		wantActions []string
		wantRequeue time.Duration
		wantStats   map[string]int64
		// syncs is how many times the Job is synced (default 1).
		syncs int
	}{
		"own TTL beats a policy": {
			job:         job("a", "1").TTLSecondsAfterFinished(100).Condition(batchv1.JobComplete, "", at).Obj(),
			policies:    []*v1alpha1.TTLPolicy{builder.MakeTTLPolicy("jobs").TTLAfterSuccess(0).Obj()},
			now:         t0,
			wantRequeue: 100 * time.Second,
		},
		"policy success TTL": {
			job:         job("a", "1").Condition(batchv1.JobComplete, "", at).Obj(),
			policies:    []*v1alpha1.TTLPolicy{builder.MakeTTLPolicy("jobs").TTLAfterSuccess(10).TTLAfterFailure(20).Obj()},
			now:         t0.Add(10 * time.Second),
			wantActions: []string{"delete jobs"},
			wantStats:   map[string]int64{"jobs": 1},
		},
		"policy failure TTL": {
			job:         job("a", "1").Condition(batchv1.JobFailed, "", at).Obj(),
			policies:    []*v1alpha1.TTLPolicy{builder.MakeTTLPolicy("jobs").TTLAfterSuccess(10).TTLAfterFailure(20).Obj()},
			now:         t0.Add(10 * time.Second),
			wantRequeue: 10 * time.Second,
		},
		"longest TTL among matching policies": {
			job: job("a", "1").Label("team", "x").Condition(batchv1.JobComplete, "", at).Obj(),
			policies: []*v1alpha1.TTLPolicy{
				builder.MakeTTLPolicy("short").TTLAfterSuccess(5).Obj(),
				builder.MakeTTLPolicy("long").TTLAfterSuccess(50).Selector("team", "x").Obj(),
				builder.MakeTTLPolicy("other-team").TTLAfterSuccess(500).Selector("team", "y").Obj(),
			},
			now:         t0.Add(10 * time.Second),
			wantRequeue: 40 * time.Second,
		},
		"namespace selector": {
			job: job("a", "1").Condition(batchv1.JobComplete, "", at).Obj(),
			policies: []*v1alpha1.TTLPolicy{
				builder.MakeTTLPolicy("prod").TTLAfterSuccess(0).NamespaceSelector("env", "prod").Obj(),
				builder.MakeTTLPolicy("ci").TTLAfterSuccess(1).NamespaceSelector("env", "ci").Obj(),
			},
			now:         t0.Add(10 * time.Second),
			wantActions: []string{"delete jobs"},
			wantStats:   map[string]int64{"ci": 1},
		},
		"a longer dry-run policy does not keep the object from a live one": {
			job: job("a", "1").Condition(batchv1.JobComplete, "", at).Obj(),
			policies: []*v1alpha1.TTLPolicy{
				builder.MakeTTLPolicy("live").TTLAfterSuccess(5).Obj(),
				builder.MakeTTLPolicy("trial").TTLAfterSuccess(60).DryRun().Obj(),
			},
			now:         t0.Add(10 * time.Second),
			wantActions: []string{"delete jobs"},
			wantRequeue: 50 * time.Second, // the dry-run report, had the Job stayed
			wantStats:   map[string]int64{"live": 1},
		},
		"a shorter dry-run policy reports and the live one deletes later": {
			job: job("a", "1").Condition(batchv1.JobComplete, "", at).Obj(),
			policies: []*v1alpha1.TTLPolicy{
				builder.MakeTTLPolicy("live").TTLAfterSuccess(60).Obj(),
				builder.MakeTTLPolicy("trial").TTLAfterSuccess(5).DryRun().Obj(),
			},
			now:         t0.Add(10 * time.Second),
			wantRequeue: 50 * time.Second,
			wantStats:   map[string]int64{"trial": 1},
		},
		"dry-run policy": {
			job:       job("a", "1").Condition(batchv1.JobComplete, "", at).Obj(),
			policies:  []*v1alpha1.TTLPolicy{builder.MakeTTLPolicy("jobs").TTLAfterSuccess(0).DryRun().Obj()},
			now:       t0,
			wantStats: map[string]int64{"jobs": 1},
			syncs:     2, // reported once only
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, tc.now, []runtime.Object{tc.job}, nil)
			f.cache(t, tc.job, ns)
			f.addPolicies(tc.policies...)
			for i := 0; i < max(tc.syncs, 1); i++ {
				if err := f.c.syncJob(f.ctx, "ns/j"); err != nil {
					t.Fatalf("syncJob: %v", err)
				}
			}
			if diff := cmp.Diff(tc.wantActions, actions(f.client.Actions())); diff != "" {
				t.Errorf("API calls (-want +got):\n%s", diff)
			}
			if got := f.jobQ.after["ns/j"]; got != tc.wantRequeue {
				t.Errorf("requeued after %v, want %v", got, tc.wantRequeue)
			}
			got := map[string]int64{}
			for name, s := range f.c.stats {
				got[name] = s.deleted + s.wouldDelete
			}
			if diff := cmp.Diff(tc.wantStats, got, cmpEmptyMap); diff != "" {
				t.Errorf("policy stats (-want +got):\n%s", diff)
			}
		})
	}
}

var cmpEmptyMap = cmp.FilterValues(func(a, b map[string]int64) bool { return len(a) == 0 && len(b) == 0 }, cmp.Ignore())

// addWidgetTarget registers a Widget informer whose store holds objs,
// without starting it.
func (f *fixture) addWidgetTarget(t *testing.T, objs ...*unstructured.Unstructured) {
	t.Helper()
	inf := dynamicinformer.NewFilteredDynamicInformer(f.dynamic, widgetGVR, "", 0, cache.Indexers{}, nil).Informer()
	for _, o := range objs {
		if err := inf.GetStore().Add(o); err != nil {
			t.Fatal(err)
		}
	}
	f.c.mu.Lock()
	f.c.targets[widgetGVR] = &dynamicTarget{gvr: widgetGVR, gvk: widgetGVK, informer: inf, cancel: func() {}}
	f.c.mu.Unlock()
}

func TestSyncCustomObject(t *testing.T) {
	at := metav1.NewTime(t0)
	widget := func(uid, rv string) *builder.CustomObjectWrapper {
		return builder.MakeCustomObject("example.com/v1", "Widget", "w", "ns").UID(uid).ResourceVersion(rv)
	}
	byConditions := builder.MakeTTLPolicy("widgets").Target("example.com/v1", "Widget").
		Conditions([]string{"Done"}, []string{"Broken"}).TTLAfterSuccess(10).TTLAfterFailure(100)
	byPhase := builder.MakeTTLPolicy("widgets").Target("example.com/v1", "Widget").
		Phase("status.phase", []string{"Succeeded"}, []string{"Failed"}).FinishTime("status.endTime").TTLAfterSuccess(10).TTLAfterFailure(100)
	cases := map[string]struct {
		cached, live *unstructured.Unstructured
		policy       *v1alpha1.TTLPolicy
		now          time.Time
		wantActions  []string
		wantRequeue  time.Duration
	}{
		"conditions: succeeded, expired": {
			cached: widget("a", "1").Condition("Done", "True", at).Obj(), live: widget("a", "1").Condition("Done", "True", at).Obj(),
			policy: byConditions.Obj(), now: t0.Add(10 * time.Second),
			wantActions: []string{"delete widgets"},
		},
		"conditions: failed, not expired": {
			cached: widget("a", "1").Condition("Broken", "True", at).Obj(), live: widget("a", "1").Condition("Broken", "True", at).Obj(),
			policy: byConditions.Obj(), now: t0.Add(10 * time.Second),
			wantRequeue: 90 * time.Second,
		},
		"phase: succeeded, expired, but changed since cached and now running again": {
			cached: widget("a", "1").Field("status.phase", "Succeeded").TimeField("status.endTime", at).Obj(),
			live:   widget("a", "2").Field("status.phase", "Running").Obj(),
			policy: byPhase.Obj(), now: t0.Add(time.Hour),
			wantActions: []string{"delete widgets", "get widgets"},
		},
		"phase: own annotation overrides": {
			cached: widget("a", "1").Annotation(v1alpha1.TTLAnnotation, "1").Field("status.phase", "Failed").TimeField("status.endTime", at).Obj(),
			live:   widget("a", "1").Annotation(v1alpha1.TTLAnnotation, "1").Field("status.phase", "Failed").TimeField("status.endTime", at).Obj(),
			policy: byPhase.Obj(), now: t0.Add(time.Second),
			wantActions: []string{"delete widgets"},
		},
		"dry-run": {
			cached: widget("a", "1").Condition("Done", "True", at).Obj(), live: widget("a", "1").Condition("Done", "True", at).Obj(),
			policy: byConditions.DryRun().Obj(), now: t0.Add(time.Hour),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, tc.now, nil, []runtime.Object{tc.live})
			f.addPolicies(tc.policy)
			f.addWidgetTarget(t, tc.cached)
			key := objectKey{resource: widgetGVR, namespace: "ns", name: "w"}
			if err := f.c.syncObject(f.ctx, key); err != nil {
				t.Fatalf("syncObject: %v", err)
			}
			if diff := cmp.Diff(tc.wantActions, actions(f.dynamic.Actions())); diff != "" {
				t.Errorf("API calls (-want +got):\n%s", diff)
			}
			if got := f.objQ.after[key]; got != tc.wantRequeue {
				t.Errorf("requeued after %v, want %v", got, tc.wantRequeue)
			}
		})
	}
}

func TestTrimmer(t *testing.T) {
	obj := builder.MakeCustomObject("example.com/v1", "Widget", "w", "ns").
		Annotation("kubectl.kubernetes.io/last-applied-configuration", "{...}").Annotation("keep", "me").
		Field("status.phase", "Done").Field("spec.big", "x").Field("result.at", "now").Obj()
	obj.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "m"}})
	got, err := trimmer([]string{"result", "status"})(obj)
	if err != nil {
		t.Fatal(err)
	}
	want := builder.MakeCustomObject("example.com/v1", "Widget", "w", "ns").Annotation("keep", "me").
		Field("status.phase", "Done").Field("result.at", "now").Obj()
	delete(want.Object, "spec")
	if diff := cmp.Diff(want.Object, got.(*unstructured.Unstructured).Object); diff != "" {
		t.Errorf("trimmed (-want +got):\n%s", diff)
	}
}

func TestNamespaceLabelChange(t *testing.T) {
	at := metav1.NewTime(t0)
	f := newFixture(t, t0, nil, nil)
	j1 := job("1", "1").Condition(batchv1.JobComplete, "", at).Obj()
	j2 := job("2", "1").Condition(batchv1.JobComplete, "", at).Obj()
	j2.Namespace = "other"
	f.cache(t, j1, j2)
	f.addPolicies(builder.MakeTTLPolicy("ci").TTLAfterSuccess(0).NamespaceSelector("env", "ci").Obj())
	old := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}}
	cur := old.DeepCopy()
	f.c.onNamespaceUpdate(old, cur)
	if n := f.c.jobQueue.Len(); n != 0 {
		t.Fatalf("%d Jobs enqueued without a label change", n)
	}
	cur.Labels = map[string]string{"env": "ci"}
	f.c.onNamespaceUpdate(old, cur)
	if n := f.c.jobQueue.Len(); n != 1 {
		t.Fatalf("%d Jobs enqueued after the namespace's labels changed, want 1 (its own)", n)
	}
	if key, _ := f.c.jobQueue.Get(); key != "ns/j" {
		t.Errorf("enqueued %q, want ns/j", key)
	}
}
