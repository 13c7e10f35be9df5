package job_test

import (
	"context"
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"jobkeeper.dev/jobkeeper/pkg/controller/job"
)

// ExampleNewController wires the controller on a shared informer factory
// and runs it with five workers until ctx is done.
func ExampleNewController() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := kubernetes.NewForConfigOrDie(&rest.Config{Host: "https://127.0.0.1:6443"})
	factory := informers.NewSharedInformerFactory(client, 0)
	c, err := job.NewController(ctx, factory.Core().V1().Pods(), factory.Batch().V1().Jobs(), client, job.Options{
		ManagedBy:           job.DefaultManagedBy,
		ManageUnclaimedJobs: false,
		SyncBatchPeriod:     time.Second,
	})
	if err != nil {
		panic(err)
	}
	factory.Start(ctx.Done())
	go c.Run(ctx, 5)
}
