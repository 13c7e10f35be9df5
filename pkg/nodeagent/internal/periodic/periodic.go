// Package periodic runs the node agent's periodic work (the lease, the
// node status, eviction checks, usage samples, image garbage collection)
// on the agent's clock, so that tests drive it with a fake one.
package periodic

import (
	"context"
	"time"

	"k8s.io/utils/clock"
)

// Every calls f every interval of clk until ctx ends (not at once).
func Every(ctx context.Context, clk clock.WithTicker, interval time.Duration, f func()) {
	t := clk.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			f()
		}
	}
}
