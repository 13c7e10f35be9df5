package ttlafterfinished

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"jobkeeper.dev/jobkeeper/pkg/apis/jobkeeper/v1alpha1"
	"jobkeeper.dev/jobkeeper/pkg/controller/ttlafterfinished/policy"
	"jobkeeper.dev/jobkeeper/test/builder"
)

func TestSyncPolicyStatus(t *testing.T) {
	at := metav1.NewTime(t0)
	cases := map[string]struct {
		policy      *v1alpha1.TTLPolicy
		pending     int64
		wantStatus  v1alpha1.TTLPolicyStatus
		wantRequeue time.Duration
		wantIndexed bool
	}{
		"ready, counts matches and deletions": {
			policy:  builder.MakeTTLPolicy("jobs").TTLAfterSuccess(1).Selector("team", "a").Obj(),
			pending: 3,
			wantStatus: v1alpha1.TTLPolicyStatus{
				ObservedGeneration: 1,
				Conditions: []metav1.Condition{{Type: v1alpha1.PolicyReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonReady,
					ObservedGeneration: 1, LastTransitionTime: at}},
				Target:           "Job.batch",
				Matched:          2,
				Deleted:          3,
				LastDeletionTime: &at,
			},
			// Deletions were written: checked again an interval later.
			wantRequeue: StatusWriteInterval,
			wantIndexed: true,
		},
		"unknown kind": {
			policy: builder.MakeTTLPolicy("gadgets").Target("example.com/v1", "Gadget").Conditions([]string{"Done"}, nil).TTLAfterSuccess(1).Obj(),
			wantStatus: v1alpha1.TTLPolicyStatus{
				ObservedGeneration: 1,
				Conditions: []metav1.Condition{{Type: v1alpha1.PolicyReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonUnknownKind,
					ObservedGeneration: 1, LastTransitionTime: at}},
				Target: "Gadget.example.com",
			},
			wantRequeue: UnreadyPolicyRetryPeriod,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			u := unstructuredPolicy(t, tc.policy)
			f := newFixture(t, t0, nil, []runtime.Object{u})
			f.cache(t,
				job("1", "1").Label("team", "a").Obj(),
				func() runtime.Object { j := job("2", "1").Label("team", "a").Obj(); j.Name = "j2"; return j }(),
				func() runtime.Object { j := job("3", "1").Label("team", "b").Obj(); j.Name = "j3"; return j }(),
			)
			if err := f.c.policyInformer.GetStore().Add(u); err != nil {
				t.Fatal(err)
			}
			if tc.pending > 0 {
				f.c.stats[tc.policy.Name] = &policyStats{deleted: tc.pending, last: t0}
			}
			if err := f.c.syncPolicy(f.ctx, tc.policy.Name); err != nil {
				t.Fatalf("syncPolicy: %v", err)
			}
			var got *v1alpha1.TTLPolicy
			for _, a := range f.dynamic.Actions() {
				if ua, ok := a.(k8stesting.UpdateActionImpl); ok && ua.GetSubresource() == "status" {
					got = &v1alpha1.TTLPolicy{}
					if err := runtime.DefaultUnstructuredConverter.FromUnstructured(ua.GetObject().(*unstructured.Unstructured).Object, got); err != nil {
						t.Fatal(err)
					}
				}
			}
			if got == nil {
				t.Fatal("no status update")
			}
			// Messages carry the mapper's error text; the reason is the contract.
			if diff := cmp.Diff(tc.wantStatus, got.Status, cmpopts.IgnoreFields(metav1.Condition{}, "Message")); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
			if got := f.policyQ.after[tc.policy.Name]; got != tc.wantRequeue {
				t.Errorf("requeued after %v, want %v", got, tc.wantRequeue)
			}
			if got := f.c.hasPolicies(policy.JobGVK); got != tc.wantIndexed {
				t.Errorf("Job policies indexed %v, want %v", got, tc.wantIndexed)
			}
			if tc.wantIndexed && f.c.jobQueue.Len() != 3 {
				t.Errorf("%d Jobs enqueued after the policy appeared, want 3", f.c.jobQueue.Len())
			}

			// Removing the policy drops it from the index.
			if err := f.c.policyInformer.GetStore().Delete(u); err != nil {
				t.Fatal(err)
			}
			if err := f.c.syncPolicy(f.ctx, tc.policy.Name); err != nil {
				t.Fatal(err)
			}
			if f.c.hasPolicies(policy.JobGVK) {
				t.Error("policy still indexed after deletion")
			}
		})
	}
}

func unstructuredPolicy(t *testing.T, p *v1alpha1.TTLPolicy) *unstructured.Unstructured {
	t.Helper()
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: content}
}

// resettableMapper counts Reset calls.
type resettableMapper struct {
	meta.RESTMapper
	resets int
}

func (m *resettableMapper) Reset() { m.resets++ }

func TestTargetWatchError(t *testing.T) {
	f := newFixture(t, t0, nil, nil)
	mapper := &resettableMapper{RESTMapper: testMapper()}
	f.c.mapper = mapper
	f.addPolicies(
		builder.MakeTTLPolicy("widgets").Target("example.com/v1", "Widget").Conditions([]string{"Done"}, nil).TTLAfterSuccess(1).Obj(),
		builder.MakeTTLPolicy("jobs").TTLAfterSuccess(1).Obj(),
	)
	handler := f.c.onTargetWatchError(widgetGVR)

	// A transient error (apiserver restarting) changes nothing.
	handler(f.ctx, nil, errors.New("connection refused"))
	if mapper.resets != 0 || f.c.policyQueue.Len() != 0 {
		t.Fatalf("transient error: %d resets, %d policies queued", mapper.resets, f.c.policyQueue.Len())
	}
	// The resource is gone: discovery is refreshed and only the policies
	// that target it are compiled again.
	handler(f.ctx, nil, apierrors.NewNotFound(widgetGVR.GroupResource(), ""))
	if mapper.resets != 1 {
		t.Errorf("%d resets, want 1", mapper.resets)
	}
	if got := f.c.policyQueue.Len(); got != 1 {
		t.Fatalf("%d policies queued, want 1", got)
	}
	if key, _ := f.c.policyQueue.Get(); key != "widgets" {
		t.Errorf("queued %q, want widgets", key)
	}
}

func TestPolicyCounts(t *testing.T) {
	at := metav1.NewTime(t0)
	w := func(name string) *builder.CustomObjectWrapper {
		return builder.MakeCustomObject("example.com/v1", "Widget", name, "ns").UID(name)
	}
	objs := []*unstructured.Unstructured{
		w("running").Field("status.phase", "Running").Obj(),
		w("done").Field("status.phase", "Succeeded").TimeField("status.endTime", at).Obj(),
		w("done-own-ttl").Field("status.phase", "Succeeded").TimeField("status.endTime", at).Annotation(v1alpha1.TTLAnnotation, "5").Obj(),
		w("failed").Field("status.phase", "Failed").TimeField("status.endTime", at).Obj(),
		w("bad-time").Field("status.phase", "Succeeded").Field("status.endTime", "yesterday").Obj(),
		func() *unstructured.Unstructured {
			o := w("going").Field("status.phase", "Succeeded").TimeField("status.endTime", at).Obj()
			o.SetDeletionTimestamp(&at)
			return o
		}(),
	}
	f := newFixture(t, t0.Add(time.Second), nil, nil)
	f.addWidgetTarget(t, objs...)
	// A success TTL only: the failed object has no applicable TTL.
	f.addPolicies(builder.MakeTTLPolicy("widgets").Target("example.com/v1", "Widget").
		Phase("status.phase", []string{"Succeeded"}, []string{"Failed"}).FinishTime("status.endTime").TTLAfterSuccess(60).Obj())
	got := f.c.countObjects(f.c.policies["widgets"])
	want := policyCounts{matched: 5, finished: 4, noTTL: 1, unreadable: 1, nextExpiry: t0.Add(5 * time.Second)}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(policyCounts{})); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}

	// A mistyped path on a kind whose schema keeps unknown fields: Ready,
	// with a Warning naming the path.
	typo := builder.MakeTTLPolicy("typo").Target("example.com/v1", "Widget").
		Phase("status.phaze", []string{"Succeeded"}, nil).FinishTime("status.endTime").TTLAfterSuccess(60).TTLAfterFailure(60).Obj()
	u := unstructuredPolicy(t, typo)
	f = newFixture(t, t0, nil, []runtime.Object{u})
	f.addWidgetTarget(t, objs...)
	f.c.targets[widgetGVR].fields = []string{"status"} // as the policy needs: no restart
	if err := f.c.policyInformer.GetStore().Add(u); err != nil {
		t.Fatal(err)
	}
	if err := f.c.syncPolicy(f.ctx, "typo"); err != nil {
		t.Fatal(err)
	}
	var status *v1alpha1.TTLPolicyStatus
	for _, a := range f.dynamic.Actions() {
		if ua, ok := a.(k8stesting.UpdateActionImpl); ok && ua.GetSubresource() == "status" {
			p := &v1alpha1.TTLPolicy{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(ua.GetObject().(*unstructured.Unstructured).Object, p); err != nil {
				t.Fatal(err)
			}
			status = &p.Status
		}
	}
	if status == nil {
		t.Fatal("no status update")
	}
	ready := meta.FindStatusCondition(status.Conditions, v1alpha1.PolicyReady)
	warn := meta.FindStatusCondition(status.Conditions, v1alpha1.PolicyWarning)
	if ready == nil || ready.Status != metav1.ConditionTrue {
		t.Errorf("Ready = %+v, want True", ready)
	}
	if warn == nil || warn.Status != metav1.ConditionTrue || !strings.Contains(warn.Message, "status.phaze") || !strings.Contains(warn.Message, "ttlSecondsAfterFailure") {
		t.Errorf("Warning = %+v, want True naming status.phaze and the useless failure TTL", warn)
	}
}
