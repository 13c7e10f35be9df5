package manager

import (
	"context"
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"jobkeeper.dev/jobkeeper/pkg/controller/ttlafterfinished"
)

func init() {
	initFuncs[TTLAfterFinishedController] = startTTLAfterFinishedController
}

// startTTLAfterFinishedController builds the TTL-after-finished controller on
// the shared informers and runs it with --concurrent-ttl-syncs workers.
// Events go through a client with its own rate limiter (same QPS and burst),
// so that the asynchronous event writes never slow down deletions.
func startTTLAfterFinishedController(ctx context.Context, cc ControllerContext) (RunFunc, error) {
	eventsConfig := rest.CopyConfig(cc.RestConfig)
	eventsConfig.RateLimiter = nil
	events, err := kubernetes.NewForConfig(rest.AddUserAgent(eventsConfig, "ttl-after-finished-events"))
	if err != nil {
		return nil, fmt.Errorf("creating the events client: %w", err)
	}
	c, err := ttlafterfinished.New(ctx, ttlafterfinished.Options{
		Clock:          cc.Clock,
		Registerer:     cc.Registerer,
		DeletionEvents: cc.Options.TTLDeletionEvents,
		DryRun:         cc.Options.TTLDryRun,
		JobPods:        cc.JobPodFactory.Core().V1().Pods(),
		PodTransform:   CacheTransform,
	}, ttlafterfinished.Clients{
		Client:  cc.Client,
		Dynamic: cc.Dynamic,
		Events:  events,
	}, cc.InformerFactory)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) { c.Run(ctx, cc.Options.ConcurrentTTLSyncs) }, nil
}
