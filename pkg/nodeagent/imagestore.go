package nodeagent

import (
	"context"
	"fmt"
	"time"

	"k8s.io/klog/v2"

	"jobkeeper.dev/jobkeeper/pkg/images"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// ImageGCPolicy is when unused images are deleted, as the kubelet's image
// garbage collection defaults: above 85% use of the store's filesystem,
// least recently used first down to 80%, never an image used in the last
// two minutes. Tests may change it.
var ImageGCPolicy = images.GCPolicy{HighPercent: 85, LowPercent: 80, MinAge: 2 * time.Minute}

// imageGCPeriod is how often the store's disk use is checked (the kubelet's
// image GC period).
const imageGCPeriod = 5 * time.Minute

// openImages opens the image store in image mode.
func (a *Agent) openImages(ctx context.Context) error {
	if a.opts.Images != ImagesOCI {
		klog.FromContext(ctx).Info("Containers run their command on this host's files: images are not pulled", "images", a.opts.Images)
		return nil
	}
	if rt, ok := a.runtime.(runtime.Isolator); ok {
		if yes, why := rt.Isolation(); !yes {
			return fmt.Errorf("containers cannot get a private filesystem view here (%s), so their images cannot be run: use the host's files (Images %q) instead", why, ImagesHost)
		}
	}
	store, err := images.Open(a.opts.ImageDir)
	if err != nil {
		return fmt.Errorf("opening the image store: %w", err)
	}
	a.puller = newImagePuller(a, store)
	klog.FromContext(ctx).Info("Containers run their images", "imageStore", a.opts.ImageDir)
	return nil
}

// collectImages deletes unused images when the store's disk fills, every
// imageGCPeriod, until ctx is done.
func (a *Agent) collectImages(ctx context.Context) {
	logger := klog.FromContext(ctx)
	t := a.clock.NewTicker(imageGCPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		removed, err := a.puller.store.CollectGarbage(ctx, ImageGCPolicy)
		if err != nil {
			logger.Error(err, "Image garbage collection failed")
		}
		if len(removed) > 0 {
			logger.Info("Removed unused images", "images", removed)
		}
	}
}

// closeImages closes the store Run opened, once the workers are gone.
func (a *Agent) closeImages() {
	if a.puller != nil && a.opts.imageStore == nil {
		_ = a.puller.store.Close()
	}
}
