package manager

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"

	"jobkeeper.dev/jobkeeper/pkg/controller/job"
	jobmetrics "jobkeeper.dev/jobkeeper/pkg/controller/job/metrics"
	"jobkeeper.dev/jobkeeper/pkg/fairqueue"
)

// fairClientConfig returns a copy of config whose requests share the token
// bucket of --kube-api-qps and --kube-api-burst through a fair queue: the
// Job controller names each Job's requests as a flow (fairqueue.WithFlow),
// and the flows take turns, so a Job with few writes is not queued behind
// a big Job's pod creations. The Job controller's event writes are a
// background flow (fairQueueOptions); everything else (informers, the
// orphan worker, the TTL controller) is one more flow. The queueing delay
// is exported as job_controller_api_queue_wait_seconds on reg. Call stop
// when the clients are no longer used.
func fairClientConfig(config *rest.Config, opts *Options, clk clock.Clock, reg prometheus.Registerer) (fair *rest.Config, stop func(), err error) {
	observe, err := jobmetrics.NewAPIQueueWait(reg)
	if err != nil {
		return nil, nil, err
	}
	l := fairqueue.New(flowcontrol.NewTokenBucketRateLimiter(opts.KubeAPIQPS, opts.KubeAPIBurst),
		fairQueueOptions(clk, observe, opts.KubeAPIQPS, opts.KubeAPIBurst))
	fair = rest.CopyConfig(config)
	fair.RateLimiter = l
	return fair, l.Stop, nil
}

// fairQueueOptions returns the fair queue's options for a token bucket of
// qps and burst: the Job controller's event writes (job.EventFlow) have a
// background share, a token only when no other flow waits or after
// fairqueue.DefaultBackgroundEvery tokens in a row to the others, so that
// they do not take budget from Jobs; and while requests wait for tokens,
// they are let through in batches (fairqueue.BatchWindow), which wakes the
// process less often for the same requests.
func fairQueueOptions(clk clock.Clock, observe func(flow string, waited time.Duration), qps float32, burst int) fairqueue.Options {
	return fairqueue.Options{Clock: clk, Observe: observe, Background: []string{job.EventFlow},
		Window: fairqueue.BatchWindow(qps, burst)}
}
