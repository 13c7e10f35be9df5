package binder

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha2 "k8s.io/api/scheduling/v1alpha2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/test/builder"
)

// gangPod is pod i of PodGroup group, asking for cpu.
func gangPod(group string, i int, cpu string) *corev1.Pod {
	p := builder.MakePod(fmt.Sprintf("%s-%d", group, i), "ns").UID(fmt.Sprintf("%s-%d", group, i)).RequestCPU(cpu).
		CreationTimestamp(metav1.NewTime(t0.Add(time.Duration(i) * time.Second))).Obj()
	p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(group)}
	return p
}

// podGroup is a PodGroup with a gang policy of minCount (0: no policy).
func podGroup(name string, minCount int32) *schedulingv1alpha2.PodGroup {
	pg := &schedulingv1alpha2.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
	if minCount > 0 {
		pg.Spec.SchedulingPolicy.Gang = &schedulingv1alpha2.GangSchedulingPolicy{MinCount: minCount}
	}
	return pg
}

// TestGangBinding runs binding passes over gangs on a 4-CPU node.
func TestGangBinding(t *testing.T) {
	for name, tc := range map[string]struct {
		groups  []*schedulingv1alpha2.PodGroup
		pending []*corev1.Pod
		bound   []*corev1.Pod
		// after is how long the gang has waited when the pass runs.
		after           time.Duration
		wantBound       []string
		wantUnscheduled []string
	}{
		"a gang that fits is bound whole": {
			groups:    []*schedulingv1alpha2.PodGroup{podGroup("g", 4)},
			pending:   []*corev1.Pod{gangPod("g", 0, "1"), gangPod("g", 1, "1"), gangPod("g", 2, "1"), gangPod("g", 3, "1")},
			wantBound: []string{"g-0", "g-1", "g-2", "g-3"},
		},
		"no PodGroup yet: nothing is bound": {
			pending: []*corev1.Pod{gangPod("g", 0, "1"), gangPod("g", 1, "1")},
		},
		"fewer pods than minCount: nothing is bound": {
			groups:  []*schedulingv1alpha2.PodGroup{podGroup("g", 4)},
			pending: []*corev1.Pod{gangPod("g", 0, "1"), gangPod("g", 1, "1"), gangPod("g", 2, "1")},
		},
		"a gang larger than the node: none is bound": {
			groups:  []*schedulingv1alpha2.PodGroup{podGroup("g", 4)},
			pending: []*corev1.Pod{gangPod("g", 0, "1500m"), gangPod("g", 1, "1500m"), gangPod("g", 2, "1500m"), gangPod("g", 3, "1500m")},
		},
		"after the permit timeout, the gang is reported unschedulable": {
			groups:          []*schedulingv1alpha2.PodGroup{podGroup("g", 2)},
			pending:         []*corev1.Pod{gangPod("g", 0, "3"), gangPod("g", 1, "3")},
			after:           PermitTimeout,
			wantUnscheduled: []string{"g-0", "g-1"},
		},
		"a replacement binds beside the gang's running pods": {
			groups:    []*schedulingv1alpha2.PodGroup{podGroup("g", 3)},
			pending:   []*corev1.Pod{gangPod("g", 3, "1")},
			bound:     []*corev1.Pod{gangPod("g", 0, "1"), gangPod("g", 1, "1")},
			wantBound: []string{"g-3"},
		},
		"finished pods of the gang do not count": {
			groups:  []*schedulingv1alpha2.PodGroup{podGroup("g", 3)},
			pending: []*corev1.Pod{gangPod("g", 3, "1")},
			bound: []*corev1.Pod{gangPod("g", 0, "1"), func() *corev1.Pod {
				p := gangPod("g", 1, "1")
				p.Status.Phase = corev1.PodSucceeded
				return p
			}()},
		},
		"a PodGroup without a gang policy: plain binding": {
			groups:    []*schedulingv1alpha2.PodGroup{podGroup("g", 0)},
			pending:   []*corev1.Pod{gangPod("g", 0, "1")},
			wantBound: []string{"g-0"},
		},
		"a gang that does not fit leaves room to others": {
			groups:    []*schedulingv1alpha2.PodGroup{podGroup("g", 2)},
			pending:   []*corev1.Pod{gangPod("g", 0, "3"), gangPod("g", 1, "3"), builder.MakePod("plain", "ns").UID("plain").RequestCPU("2").CreationTimestamp(metav1.NewTime(t0.Add(time.Minute))).Obj()},
			wantBound: []string{"plain"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			client := fake.NewClientset()
			for _, p := range tc.pending {
				if _, err := client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			clk := testingclock.NewFakeClock(t0)
			onNode := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			var used Requests
			for _, p := range tc.bound {
				p.Spec.NodeName = testNode
				if err := onNode.Add(p); err != nil {
					t.Fatal(err)
				}
				used = used.Add(PodRequests(p))
			}
			cfg := testConfig(client, onNode, used, len(tc.bound), func(types.UID) bool { return false })
			cfg.Clock, cfg.GangScheduling = clk, true
			b, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			for _, pg := range tc.groups {
				if err := b.volumeFactory.Scheduling().V1alpha2().PodGroups().Informer().GetStore().Add(pg); err != nil {
					t.Fatal(err)
				}
			}
			for _, p := range tc.pending {
				if err := b.factory.Core().V1().Pods().Informer().GetStore().Add(p); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.sync(ctx); err != nil {
				t.Fatal(err)
			}
			if tc.after > 0 {
				clk.Step(tc.after)
				if err := b.sync(ctx); err != nil {
					t.Fatal(err)
				}
			}
			var bound, unscheduled []string
			for _, a := range client.Actions() {
				switch {
				case a.GetVerb() == "create" && a.GetSubresource() == "binding":
					bound = append(bound, a.(k8stesting.CreateAction).GetObject().(*corev1.Binding).Name)
				case a.GetVerb() == "patch" && a.GetSubresource() == "status":
					unscheduled = append(unscheduled, a.(k8stesting.PatchAction).GetName())
				}
			}
			sort.Strings(bound)
			sort.Strings(unscheduled)
			if diff := cmp.Diff(tc.wantBound, bound); diff != "" {
				t.Errorf("bound (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantUnscheduled, unscheduled); diff != "" {
				t.Errorf("reported unschedulable (-want +got):\n%s", diff)
			}
			for _, name := range tc.wantUnscheduled {
				p, err := client.CoreV1().Pods("ns").Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				want := "rejected due to timeout after waiting 5m0s at plugin GangScheduling"
				if c := p.Status.Conditions; len(c) != 1 || c[0].Message != want || c[0].Reason != ReasonUnschedulable {
					t.Errorf("pod %s conditions %+v, want PodScheduled False: %s", name, c, want)
				}
			}
		})
	}
}

// TestGangWaitStartsAgain: a gang's wait for room starts again when it
// loses its quorum or its pending pods go, so that it is not reported
// unschedulable at once when it is back.
func TestGangWaitStartsAgain(t *testing.T) {
	s := &gangState{waitingSince: map[groupKey]time.Time{{Namespace: "ns", Name: "gone"}: t0, {Namespace: "ns", Name: "here"}: t0}}
	s.forgetGone(map[groupKey]*gang{{Namespace: "ns", Name: "here"}: {}})
	if _, ok := s.waitingSince[groupKey{Namespace: "ns", Name: "gone"}]; ok {
		t.Error("the wait of a gang with no pending pod is kept")
	}
	if _, ok := s.waitingSince[groupKey{Namespace: "ns", Name: "here"}]; !ok {
		t.Error("the wait of a gang still pending was dropped")
	}
}
