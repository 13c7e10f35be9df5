// Command upstream-child is the benchmark's upstream side: a lean binary
// holding only upstream's Job and TTL-after-finished controllers, wired as
// kube-controller-manager wires them (bench/upstream), measured by
// bench/child. The bench builds and starts it.
package main

import (
	"context"

	"k8s.io/client-go/rest"

	"jobkeeper.dev/jobkeeper/bench/child"
	"jobkeeper.dev/jobkeeper/bench/upstream"
)

func main() {
	child.Main("upstream-child", func(ctx context.Context, config *rest.Config, controllers []string, workers int) (func() bool, func(), error) {
		u, err := upstream.Start(ctx, config, controllers, workers)
		if err != nil {
			return nil, nil, err
		}
		return u.Synced, u.Wait, nil
	})
}
