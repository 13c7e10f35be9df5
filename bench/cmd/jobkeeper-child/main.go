// Command jobkeeper-child is the benchmark's jobkeeper side: pkg/manager
// run as jobkeeper-controller runs it, measured by bench/child. The bench
// builds and starts it.
//
// By default it runs the manager in process with the bench's settings
// (shared informers, events on, HTTP endpoints off,
// --manage-unclaimed-jobs so that plain Jobs are managed). With
// $JOBKEEPER_CHILD_FLAGS set (the bench's -jobkeeper-as user), it runs the
// manager as a user runs jobkeeper-controller: those flags parsed by the
// controller command's own flag set (internal/cli.ControllerFlags), with
// the command's defaults for every flag not given (--server-check on, the
// metrics and health endpoints as the flags say).
package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"jobkeeper.dev/jobkeeper/bench/child"
	"jobkeeper.dev/jobkeeper/internal/cli"
	"jobkeeper.dev/jobkeeper/pkg/manager"
)

// FlagsEnv names the controller flags of the user mode.
const FlagsEnv = "JOBKEEPER_CHILD_FLAGS"

func main() {
	child.Main("jobkeeper-child", func(ctx context.Context, config *rest.Config, controllers []string, workers int) (func() bool, func(), error) {
		opts, err := options(config, controllers, workers)
		if err != nil {
			return nil, nil, err
		}
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

// options are the bench's settings, or the user's flags.
func options(config *rest.Config, controllers []string, workers int) (*manager.Options, error) {
	if flags := os.Getenv(FlagsEnv); flags != "" {
		fs, opts, _ := cli.ControllerFlags()
		if err := fs.Parse(strings.Fields(flags)); err != nil {
			return nil, fmt.Errorf("$%s: %w", FlagsEnv, err)
		}
		return opts, nil
	}
	opts := manager.NewOptions()
	opts.KubeAPIQPS, opts.KubeAPIBurst = config.QPS, config.Burst
	opts.Controllers = controllers
	opts.ConcurrentJobSyncs, opts.ConcurrentTTLSyncs = workers, workers
	opts.ManageUnclaimedJobs = true
	opts.MetricsBindAddress, opts.HealthProbeBindAddress = "0", "0"
	return opts, nil
}
