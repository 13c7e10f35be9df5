package localpath

import (
	"context"

	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"
)

// Options configure Run.
type Options struct {
	// Root is where the volumes' directories are made.
	Root string
	// NodeName is the node the volumes are on.
	NodeName string
}

// Run provisions and deletes the volumes of the StorageClass (made by
// EnsureStorageClass) until ctx is done, and returns once the controller has
// stopped. Leader election is off: one `up` owns its data directory.
func Run(ctx context.Context, client kubernetes.Interface, opts Options) {
	p := &Provisioner{Root: opts.Root, NodeName: opts.NodeName}
	pc := controller.NewProvisionController(ctx, client, ProvisionerName, p,
		controller.LeaderElection(false),
		// Claims are retried soon after a failure (a full disk, a
		// permission), not after the library's default 15 s floor.
		controller.ExponentialBackOffOnError(false),
		controller.FailedProvisionThreshold(0),
		controller.FailedDeleteThreshold(0),
	)
	pc.Run(ctx)
}
