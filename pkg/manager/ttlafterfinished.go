package manager

import (
	"context"

	"jobkeeper.dev/jobkeeper/pkg/controller/ttlafterfinished"
)

func init() {
	initFuncs[TTLAfterFinishedController] = startTTLAfterFinishedController
}

// startTTLAfterFinishedController builds the TTL-after-finished controller on
// the shared informers and runs it with --concurrent-ttl-syncs workers.
func startTTLAfterFinishedController(ctx context.Context, cc ControllerContext) (RunFunc, error) {
	c, err := ttlafterfinished.New(ctx, ttlafterfinished.Options{
		Clock:      cc.Clock,
		Registerer: cc.Registerer,
	}, ttlafterfinished.Clients{
		Client:  cc.Client,
		Dynamic: cc.Dynamic,
	}, cc.InformerFactory)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) { c.Run(ctx, cc.Options.ConcurrentTTLSyncs) }, nil
}
