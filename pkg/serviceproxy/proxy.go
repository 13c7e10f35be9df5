package serviceproxy

import (
	"context"
	"slices"
	"time"

	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// minSyncInterval spaces two writes of the table: a burst of changes (a
// Deployment rolling) is written once (kube-proxy's --min-sync-period is
// 1s; pods of batch work come and go faster).
const minSyncInterval = 100 * time.Millisecond

// syncKey is the queue's one key: every change asks for the whole table.
const syncKey = "services"

// Proxy keeps the table Table in step with the Services and EndpointSlices
// of its informers.
type Proxy struct {
	ns       netns.NsHandle
	services cache.Indexer
	slices   cache.Indexer
	synced   []cache.InformerSynced
	skip     func(*corev1.Service) bool
	queue    workqueue.TypedRateLimitingInterface[string]
	// last is what the table holds, once written is set.
	last    []Rule
	written bool
	// apply writes rules (Apply in ns; tests count the writes), and
	// clear forgets the UDP flows of endpoints gone (clearStaleUDP).
	apply func(ns netns.NsHandle, rules []Rule) error
	clear func(ns netns.NsHandle, before, after []Rule) error
}

// New returns a Proxy writing into the network namespace ns (the caller's
// handle, open while the Proxy runs) from the informers services and
// slices; Services skip reports true for are left to the caller.
func New(ns netns.NsHandle, services, slices cache.SharedIndexInformer, skip func(*corev1.Service) bool) (*Proxy, error) {
	p := &Proxy{
		ns: ns, services: services.GetIndexer(), slices: slices.GetIndexer(),
		synced: []cache.InformerSynced{services.HasSynced, slices.HasSynced},
		skip:   skip,
		queue:  workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](), workqueue.TypedRateLimitingQueueConfig[string]{Name: "serviceproxy"}),
		apply:  Apply,
		clear:  clearStaleUDP,
	}
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { p.queue.Add(syncKey) },
		UpdateFunc: func(any, any) { p.queue.Add(syncKey) },
		DeleteFunc: func(any) { p.queue.Add(syncKey) },
	}
	for _, inf := range []cache.SharedIndexInformer{services, slices} {
		if _, err := inf.AddEventHandler(h); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Run writes the table once the informers synced, and again after each
// change, until ctx ends; a failed write is retried with backoff. The
// table stays when Run returns (Remove takes it away).
func (p *Proxy) Run(ctx context.Context) {
	defer p.queue.ShutDown()
	go func() {
		<-ctx.Done()
		p.queue.ShutDown()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), p.synced...) {
		return
	}
	p.queue.Add(syncKey)
	logger := klog.FromContext(ctx)
	for {
		key, quit := p.queue.Get()
		if quit {
			return
		}
		if err := p.sync(); err != nil {
			logger.Error(err, "Writing the Services' rules failed; retrying")
			p.queue.AddRateLimited(key)
		} else {
			p.queue.Forget(key)
		}
		p.queue.Done(key)
		select {
		case <-ctx.Done():
			return
		case <-time.After(minSyncInterval):
		}
	}
}

// sync writes the rules of what the caches hold, unless the table holds
// them already.
func (p *Proxy) sync() error {
	var services []*corev1.Service
	for _, o := range p.services.List() {
		if s, ok := o.(*corev1.Service); ok {
			services = append(services, s)
		}
	}
	var slices []*discoveryv1.EndpointSlice
	for _, o := range p.slices.List() {
		if s, ok := o.(*discoveryv1.EndpointSlice); ok {
			slices = append(slices, s)
		}
	}
	rules := Compute(services, slices, p.skip)
	if p.written && equalRules(rules, p.last) {
		return nil
	}
	if err := p.apply(p.ns, rules); err != nil {
		return err
	}
	if err := p.clear(p.ns, p.last, rules); err != nil {
		// The rules are right; a flow left pointing at a gone pod ends
		// with its conntrack entry.
		klog.Background().Info("Clearing stale UDP flows of Services failed", "err", err)
	}
	p.last, p.written = rules, true
	return nil
}

// equalRules reports whether two rule lists are the same.
func equalRules(a, b []Rule) bool {
	return slices.EqualFunc(a, b, func(x, y Rule) bool {
		return x.Service == y.Service && x.Address == y.Address && x.Protocol == y.Protocol && slices.Equal(x.Endpoints, y.Endpoints) &&
			x.Affinity == y.Affinity && x.NodePort == y.NodePort
	})
}
