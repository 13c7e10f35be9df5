// Package upstream runs upstream's Job and TTL-after-finished controllers
// (k8s.io/kubernetes/pkg/controller/job and .../ttlafterfinished, the
// versions in go.mod) wired as kube-controller-manager wires them. The
// benchmark's lean upstream binary (bench/cmd/upstream-child) and the
// fault-injection suite's side-by-side runs use it.
package upstream

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	upstreamjob "k8s.io/kubernetes/pkg/controller/job"
	upstreamttl "k8s.io/kubernetes/pkg/controller/ttlafterfinished"
)

// Names of upstream's controllers, as jobkeeper names its own (pkg/manager).
const (
	// Job is k8s.io/kubernetes/pkg/controller/job.
	Job = "job"
	// TTLAfterFinished is k8s.io/kubernetes/pkg/controller/ttlafterfinished.
	TTLAfterFinished = "ttl-after-finished"
)

// Controllers are upstream's controllers running in this process.
type Controllers struct {
	factory informers.SharedInformerFactory
	wg      sync.WaitGroup
	synced  atomic.Bool
}

// Start starts upstream's controllers named in controllers (Job,
// TTLAfterFinished) against the apiserver of config, wired as
// kube-controller-manager wires them: one shared informer factory on a client
// of its own, and one client per controller, each with config's QPS and
// burst (client-go gives every client its own rate limiter), managedFields
// dropped from the cached objects, and workers
// sync workers per controller (--concurrent-job-syncs,
// --concurrent-ttl-after-finished-syncs). They run until ctx is done.
func Start(ctx context.Context, config *rest.Config, controllers []string, workers int) (*Controllers, error) {
	client := func(name string) (kubernetes.Interface, error) {
		c, err := kubernetes.NewForConfig(rest.AddUserAgent(rest.CopyConfig(config), name))
		if err != nil {
			return nil, fmt.Errorf("creating the %s client: %w", name, err)
		}
		return c, nil
	}
	shared, err := client("shared-informers")
	if err != nil {
		return nil, err
	}
	u := &Controllers{factory: informers.NewSharedInformerFactoryWithOptions(shared, 0, informers.WithTransform(dropManagedFields))}
	var runs []func(context.Context)
	for _, name := range controllers {
		switch name {
		case Job:
			c, err := client("job-controller")
			if err != nil {
				return nil, err
			}
			// No workload or pod-group informers: the gang-scheduling
			// integration is off by default in v1.36.
			jc, err := upstreamjob.NewController(ctx, c, u.factory.Core().V1().Pods(), u.factory.Batch().V1().Jobs(), nil, nil)
			if err != nil {
				return nil, fmt.Errorf("creating upstream's job controller: %w", err)
			}
			runs = append(runs, func(ctx context.Context) { jc.Run(ctx, workers) })
		case TTLAfterFinished:
			c, err := client("ttl-after-finished-controller")
			if err != nil {
				return nil, err
			}
			tc := upstreamttl.New(ctx, u.factory.Batch().V1().Jobs(), c)
			runs = append(runs, func(ctx context.Context) { tc.Run(ctx, workers) })
		default:
			return nil, fmt.Errorf("unknown upstream controller %q", name)
		}
	}
	u.factory.Start(ctx.Done())
	for _, run := range runs {
		u.wg.Go(func() { run(ctx) })
	}
	go func() {
		for _, ok := range u.factory.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return
			}
		}
		u.synced.Store(true)
	}()
	return u, nil
}

// dropManagedFields is the informer transform of kube-controller-manager's
// shared informers: no controller reads managedFields, so they are not kept.
func dropManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil && m.GetManagedFields() != nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// Synced reports whether the shared informers have completed their initial list.
func (u *Controllers) Synced() bool { return u.synced.Load() }

// Wait waits, once ctx is done, for the controllers to return, and stops the
// informers.
func (u *Controllers) Wait() {
	u.wg.Wait()
	u.factory.Shutdown()
}
