// Command jobkeeper-child is the benchmark's jobkeeper side: pkg/manager
// run as jobkeeper-controller runs it (shared informers, events on, HTTP
// endpoints off, --manage-unclaimed-jobs so that plain Jobs are managed),
// measured by bench/child. The bench builds and starts it.
package main

import (
	"context"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"jobkeeper.dev/jobkeeper/bench/child"
	"jobkeeper.dev/jobkeeper/pkg/manager"
)

func main() {
	child.Main("jobkeeper-child", func(ctx context.Context, config *rest.Config, controllers []string, workers int) (func() bool, func(), error) {
		opts := manager.NewOptions()
		opts.KubeAPIQPS, opts.KubeAPIBurst = config.QPS, config.Burst
		opts.Controllers = controllers
		opts.ConcurrentJobSyncs, opts.ConcurrentTTLSyncs = workers, workers
		opts.ManageUnclaimedJobs = true
		opts.MetricsBindAddress, opts.HealthProbeBindAddress = "0", "0"
		m, err := manager.New(config, opts)
		if err != nil {
			return nil, nil, err
		}
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		return m.Synced, func() {
			if err := <-done; err != nil {
				klog.Background().Error(err, "Manager stopped")
			}
		}, nil
	})
}
