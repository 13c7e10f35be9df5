package ttlafterfinished

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"jobkeeper.dev/jobkeeper/pkg/apis/jobkeeper/v1alpha1"
)

// TestOutsidePodsListedAfterSharedCaches: with a cache of only the Job
// pods, the finished pods outside the Job label are listed once the shared
// caches have synced, so that at start-up the apiserver answers the Job
// pods' list alone. That list is held until the other list arrives or a
// second has passed: listing the others beside it would arrive while it is
// held.
func TestOutsidePodsListedAfterSharedCaches(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := fake.NewClientset()
	var jobPodsListed, othersEarly, once atomic.Bool
	othersListed := make(chan struct{})
	client.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if strings.HasPrefix(a.(k8stesting.ListAction).GetListRestrictions().Labels.String(), "!") {
			if once.CompareAndSwap(false, true) {
				othersEarly.Store(!jobPodsListed.Load())
				close(othersListed)
			}
			return false, nil, nil
		}
		select {
		case <-othersListed:
		case <-time.After(time.Second):
		}
		jobPodsListed.Store(true)
		return false, nil, nil
	})
	scheme := runtime.NewScheme()
	_ = v1alpha1.AddToScheme(scheme)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{
		v1alpha1.TTLPolicyResource: "TTLPolicyList",
	})
	factory := informers.NewSharedInformerFactory(client, 0)
	jobPods := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = batchv1.ControllerUidLabel }))
	c, err := New(ctx, Options{
		Registerer: prometheus.NewRegistry(),
		RESTMapper: testMapper(),
		JobPods:    jobPods.Core().V1().Pods(),
	}, Clients{Client: client, Dynamic: dyn}, factory)
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	jobPods.Start(ctx.Done())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx, 1) }()
	select {
	case <-othersListed:
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("the finished pods outside the Job label were never listed")
	}
	if othersEarly.Load() {
		t.Error("the pods outside the Job label were listed before the Job pods' list returned")
	}
	cancel()
	<-done
}
