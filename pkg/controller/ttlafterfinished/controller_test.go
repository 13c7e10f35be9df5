package ttlafterfinished

import (
	"context"
	"fmt"
	"jobkeeper.dev/jobkeeper/pkg/controller/ttlafterfinished/policy"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	"jobkeeper.dev/jobkeeper/pkg/apis/jobkeeper/v1alpha1"
	"jobkeeper.dev/jobkeeper/test/builder"
)

// recordingQueue remembers the delays passed to AddAfter.
type recordingQueue[K comparable] struct {
	workqueue.TypedRateLimitingInterface[K]
	mu    sync.Mutex
	after map[K]time.Duration
}

func (q *recordingQueue[K]) AddAfter(k K, d time.Duration) {
	q.mu.Lock()
	q.after[k] = d
	q.mu.Unlock()
	q.TypedRateLimitingInterface.AddAfter(k, d)
}

func record_[K comparable](q workqueue.TypedRateLimitingInterface[K]) *recordingQueue[K] {
	return &recordingQueue[K]{TypedRateLimitingInterface: q, after: map[K]time.Duration{}}
}

// fixture is a controller on fake clients and a fake clock.
type fixture struct {
	c        *Controller
	ctx      context.Context
	client   *fake.Clientset
	dynamic  *dynamicfake.FakeDynamicClient
	clock    *testingclock.FakeClock
	recorder *record.FakeRecorder
	factory  informers.SharedInformerFactory
	jobQ     *recordingQueue[string]
	objQ     *recordingQueue[objectKey]
	policyQ  *recordingQueue[string]
}

// preconditionReactor makes a fake client honour delete preconditions, as
// the apiserver does.
func preconditionReactor(tracker k8stesting.ObjectTracker) k8stesting.ReactionFunc {
	return func(action k8stesting.Action) (bool, runtime.Object, error) {
		da := action.(k8stesting.DeleteActionImpl)
		pre := da.DeleteOptions.Preconditions
		if pre == nil {
			return false, nil, nil
		}
		obj, err := tracker.Get(da.GetResource(), da.GetNamespace(), da.GetName())
		if err != nil {
			return true, nil, err
		}
		m, _ := meta.Accessor(obj)
		if (pre.UID != nil && *pre.UID != m.GetUID()) || (pre.ResourceVersion != nil && *pre.ResourceVersion != m.GetResourceVersion()) {
			return true, nil, apierrors.NewConflict(da.GetResource().GroupResource(), da.GetName(), fmt.Errorf("precondition failed"))
		}
		return false, nil, nil
	}
}

func newFixture(t *testing.T, now time.Time, live []runtime.Object, dynLive []runtime.Object) *fixture {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	f := &fixture{
		ctx:      ctx,
		client:   fake.NewClientset(live...),
		clock:    testingclock.NewFakeClock(now),
		recorder: record.NewFakeRecorder(100),
	}
	scheme := runtime.NewScheme()
	_ = v1alpha1.AddToScheme(scheme)
	f.dynamic = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{
		widgetGVR:                  "WidgetList",
		v1alpha1.TTLPolicyResource: "TTLPolicyList",
	}, dynLive...)
	f.client.PrependReactor("delete", "*", preconditionReactor(f.client.Tracker()))
	f.dynamic.PrependReactor("delete", "*", preconditionReactor(f.dynamic.Tracker()))
	f.factory = informers.NewSharedInformerFactory(f.client, 0)
	c, err := New(ctx, Options{
		Clock:      f.clock,
		Registerer: prometheus.NewRegistry(),
		Recorder:   f.recorder,
		RESTMapper: testMapper(),
	}, Clients{Client: f.client, Dynamic: f.dynamic}, f.factory)
	if err != nil {
		t.Fatal(err)
	}
	f.jobQ, f.objQ, f.policyQ = record_(c.jobQueue), record_(c.objectQueue), record_(c.policyQueue)
	c.jobQueue, c.objectQueue, c.policyQueue = f.jobQ, f.objQ, f.policyQ
	t.Cleanup(func() { c.jobQueue.ShutDown(); c.objectQueue.ShutDown(); c.policyQueue.ShutDown(); c.stopAllTargets() })
	f.c = c
	return f
}

// cache puts objects into the informer caches without starting them.
func (f *fixture) cache(t *testing.T, objs ...runtime.Object) {
	t.Helper()
	for _, o := range objs {
		var err error
		switch o.(type) {
		case *batchv1.Job:
			err = f.factory.Batch().V1().Jobs().Informer().GetIndexer().Add(o)
		case *corev1.Pod:
			err = f.factory.Core().V1().Pods().Informer().GetIndexer().Add(o)
		case *corev1.Namespace:
			err = f.factory.Core().V1().Namespaces().Informer().GetIndexer().Add(o)
		default:
			t.Fatalf("cannot cache %T", o)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// addPolicies compiles policies straight into the controller.
func (f *fixture) addPolicies(ps ...*v1alpha1.TTLPolicy) {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	for _, p := range ps {
		f.c.policies[p.Name] = policy.Compile(p, f.c.mapper)
	}
	f.c.rebuildIndex()
}

// actions returns "verb resource" for the writes and reads the controller
// made through the typed client (informer traffic excluded).
func actions(as []k8stesting.Action) []string {
	var out []string
	for _, a := range as {
		if a.GetVerb() == "list" || a.GetVerb() == "watch" {
			continue
		}
		out = append(out, a.GetVerb()+" "+a.GetResource().Resource)
	}
	return out
}

// events drains the fake recorder.
func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// exists reports whether the tracker still holds an object.
func exists(tracker k8stesting.ObjectTracker, gvr schema.GroupVersionResource, ns, name string) bool {
	_, err := tracker.Get(gvr, ns, name)
	return err == nil
}

func job(uid, rv string) *builder.JobWrapper {
	w := builder.MakeJob("j", "ns").UID(uid)
	w.Job.ResourceVersion = rv
	return w
}

func TestSyncJob(t *testing.T) {
	at := metav1.NewTime(t0)
	cases := map[string]struct {
		cached      *batchv1.Job
		live        *batchv1.Job
		now         time.Time
		wantActions []string
		wantDeleted bool
		wantRequeue time.Duration
		wantEvents  int
		// deletionEvents is Options.DeletionEvents (--ttl-deletion-events).
		deletionEvents bool
	}{
		"expired, deletion events off (the default, as upstream): no event": {
			cached:      job("a", "1").TTLSecondsAfterFinished(0).Condition(batchv1.JobComplete, "", at).Obj(),
			live:        job("a", "1").TTLSecondsAfterFinished(0).Condition(batchv1.JobComplete, "", at).Obj(),
			now:         t0,
			wantActions: []string{"delete jobs"},
			wantDeleted: true,
		},
		"expired: one DELETE, no GET": {
			cached:         job("a", "1").TTLSecondsAfterFinished(0).Condition(batchv1.JobComplete, "", at).Obj(),
			live:           job("a", "1").TTLSecondsAfterFinished(0).Condition(batchv1.JobComplete, "", at).Obj(),
			now:            t0,
			wantActions:    []string{"delete jobs"},
			wantDeleted:    true,
			wantEvents:     1,
			deletionEvents: true,
		},
		"failed job expired": {
			cached:         job("a", "1").TTLSecondsAfterFinished(10).Condition(batchv1.JobFailed, "", at).Obj(),
			live:           job("a", "1").TTLSecondsAfterFinished(10).Condition(batchv1.JobFailed, "", at).Obj(),
			now:            t0.Add(11 * time.Second),
			wantActions:    []string{"delete jobs"},
			wantDeleted:    true,
			wantEvents:     1,
			deletionEvents: true,
		},
		"not expired: requeued for the remaining time": {
			cached:      job("a", "1").TTLSecondsAfterFinished(10).Condition(batchv1.JobComplete, "", at).Obj(),
			live:        job("a", "1").TTLSecondsAfterFinished(10).Condition(batchv1.JobComplete, "", at).Obj(),
			now:         t0.Add(4 * time.Second),
			wantRequeue: 6 * time.Second,
		},
		"TTL extended just before expiry: survives, requeued": {
			cached:      job("a", "1").TTLSecondsAfterFinished(10).Condition(batchv1.JobComplete, "", at).Obj(),
			live:        job("a", "2").TTLSecondsAfterFinished(100).Condition(batchv1.JobComplete, "", at).Obj(),
			now:         t0.Add(10 * time.Second),
			wantActions: []string{"delete jobs", "get jobs"},
			wantRequeue: 90 * time.Second,
		},
		"TTL removed before expiry: survives": {
			cached:      job("a", "1").TTLSecondsAfterFinished(0).Condition(batchv1.JobComplete, "", at).Obj(),
			live:        job("a", "2").Condition(batchv1.JobComplete, "", at).Obj(),
			now:         t0,
			wantActions: []string{"delete jobs", "get jobs"},
		},
		"recreated with the same name: new Job survives": {
			cached:      job("a", "1").TTLSecondsAfterFinished(0).Condition(batchv1.JobComplete, "", at).Obj(),
			live:        job("b", "7").TTLSecondsAfterFinished(0).Obj(),
			now:         t0,
			wantActions: []string{"delete jobs", "get jobs"},
		},
		"recreated and the new one expired too: deleted with its own preconditions": {
			cached:         job("a", "1").TTLSecondsAfterFinished(0).Condition(batchv1.JobComplete, "", at).Obj(),
			live:           job("b", "7").TTLSecondsAfterFinished(0).Condition(batchv1.JobFailed, "", at).Obj(),
			now:            t0,
			wantActions:    []string{"delete jobs", "get jobs", "delete jobs"},
			wantDeleted:    true,
			wantEvents:     1,
			deletionEvents: true,
		},
		"status changed but still expired: deleted after one re-read": {
			cached:         job("a", "1").TTLSecondsAfterFinished(0).Condition(batchv1.JobComplete, "", at).Obj(),
			live:           job("a", "2").TTLSecondsAfterFinished(0).Condition(batchv1.JobComplete, "", at).Obj(),
			now:            t0,
			wantActions:    []string{"delete jobs", "get jobs", "delete jobs"},
			wantDeleted:    true,
			wantEvents:     1,
			deletionEvents: true,
		},
		"already gone": {
			cached:      job("a", "1").TTLSecondsAfterFinished(0).Condition(batchv1.JobComplete, "", at).Obj(),
			now:         t0,
			wantActions: []string{"delete jobs"},
		},
		"finished in the future: deferred": {
			cached:      job("a", "1").TTLSecondsAfterFinished(10).Condition(batchv1.JobComplete, "", metav1.NewTime(t0.Add(time.Hour))).Obj(),
			live:        job("a", "1").TTLSecondsAfterFinished(10).Condition(batchv1.JobComplete, "", metav1.NewTime(t0.Add(time.Hour))).Obj(),
			now:         t0,
			wantRequeue: time.Hour + 10*time.Second,
		},
		"no TTL and no policy": {
			cached: job("a", "1").Condition(batchv1.JobComplete, "", at).Obj(),
			live:   job("a", "1").Condition(batchv1.JobComplete, "", at).Obj(),
			now:    t0.Add(time.Hour),
		},
		"unfinished": {
			cached: job("a", "1").TTLSecondsAfterFinished(0).Obj(),
			live:   job("a", "1").TTLSecondsAfterFinished(0).Obj(),
			now:    t0.Add(time.Hour),
		},
		"interim FailureTarget only": {
			cached: job("a", "1").TTLSecondsAfterFinished(0).Condition(batchv1.JobFailureTarget, "", at).Obj(),
			live:   job("a", "1").TTLSecondsAfterFinished(0).Condition(batchv1.JobFailureTarget, "", at).Obj(),
			now:    t0.Add(time.Hour),
		},
		"being deleted": {
			cached: func() *batchv1.Job {
				j := job("a", "1").TTLSecondsAfterFinished(0).Condition(batchv1.JobComplete, "", at).Obj()
				j.DeletionTimestamp = &at
				return j
			}(),
			now: t0.Add(time.Hour),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var live []runtime.Object
			if tc.live != nil {
				live = append(live, tc.live)
			}
			f := newFixture(t, tc.now, live, nil)
			f.c.deletionEvents = tc.deletionEvents
			f.cache(t, tc.cached)
			if err := f.c.syncJob(f.ctx, "ns/j"); err != nil {
				t.Fatalf("syncJob: %v", err)
			}
			if diff := cmp.Diff(tc.wantActions, actions(f.client.Actions())); diff != "" {
				t.Errorf("API calls (-want +got):\n%s", diff)
			}
			if got := tc.live != nil && !exists(f.client.Tracker(), jobResource, "ns", "j"); got != tc.wantDeleted {
				t.Errorf("deleted %v, want %v", got, tc.wantDeleted)
			}
			if got := f.jobQ.after["ns/j"]; got != tc.wantRequeue {
				t.Errorf("requeued after %v, want %v", got, tc.wantRequeue)
			}
			if got := len(f.events()); got != tc.wantEvents {
				t.Errorf("%d events, want %d", got, tc.wantEvents)
			}
		})
	}
}

func TestJobDeleteOptions(t *testing.T) {
	at := metav1.NewTime(t0)
	j := job("uid-1", "42").TTLSecondsAfterFinished(0).Condition(batchv1.JobComplete, "", at).Obj()
	f := newFixture(t, t0, []runtime.Object{j}, nil)
	f.cache(t, j)
	if err := f.c.syncJob(f.ctx, "ns/j"); err != nil {
		t.Fatal(err)
	}
	var got metav1.DeleteOptions
	for _, a := range f.client.Actions() {
		if d, ok := a.(k8stesting.DeleteActionImpl); ok {
			got = d.DeleteOptions
		}
	}
	fg := metav1.DeletePropagationForeground
	want := metav1.DeleteOptions{
		PropagationPolicy: &fg,
		Preconditions:     &metav1.Preconditions{UID: ptrTo(types.UID("uid-1")), ResourceVersion: ptrTo("42")},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("delete options (-want +got):\n%s", diff)
	}
}

func ptrTo[T any](v T) *T { return &v }

var (
	widgetGVK       = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}
	widgetGVR       = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	clusterThingGVK = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "ClusterThing"}
)

// testMapper knows Jobs, Pods, Widgets and a cluster-scoped kind.
func testMapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	m.Add(policy.JobGVK, meta.RESTScopeNamespace)
	m.Add(policy.PodGVK, meta.RESTScopeNamespace)
	m.Add(widgetGVK, meta.RESTScopeNamespace)
	m.Add(clusterThingGVK, meta.RESTScopeRoot)
	return m
}
