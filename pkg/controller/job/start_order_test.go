package job

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
)

// TestOutsidePodsListedAfterJobPods: the pods outside the Job label are
// listed only once the Job pods are cached, so that at start-up the
// apiserver answers the list the first sync needs alone. The Job pods' list
// is held until the other list arrives or a second has passed: listing the
// others beside it would arrive while it is held.
func TestOutsidePodsListedAfterJobPods(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := fake.NewClientset()
	var jobPodsListed atomic.Bool
	othersListed := make(chan struct{})
	var othersEarly atomic.Bool
	client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		select {
		case <-othersListed:
		case <-time.After(time.Second):
		}
		jobPodsListed.Store(true)
		return false, nil, nil
	})
	sch := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(sch); err != nil {
		t.Fatal(err)
	}
	meta := metadatafake.NewSimpleMetadataClient(sch)
	var once atomic.Bool
	meta.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if once.CompareAndSwap(false, true) {
			othersEarly.Store(!jobPodsListed.Load())
			close(othersListed)
		}
		return false, nil, nil
	})
	factory := informers.NewSharedInformerFactory(client, 0)
	c, err := NewController(ctx, factory.Core().V1().Pods(), factory.Batch().V1().Jobs(), client,
		Options{JobPodsOnly: true, ManageUnclaimedJobs: true, Metadata: meta})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx, 1) }()
	select {
	case <-othersListed:
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("the pods outside the Job label were never listed")
	}
	if othersEarly.Load() {
		t.Error("the pods outside the Job label were listed before the Job pods' list returned")
	}
	cancel()
	<-done
}
