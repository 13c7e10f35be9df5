package ttlafterfinished

import (
	"context"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"jobkeeper.dev/jobkeeper/pkg/controller/ttlafterfinished/policy"
)

// dynamicTarget is a running informer for one custom resource targeted by
// at least one policy. Its cache is trimmed to metadata plus the top-level
// fields the policies' rules read.
type dynamicTarget struct {
	// gvr and gvk name the resource and its kind.
	gvr schema.GroupVersionResource
	gvk schema.GroupVersionKind
	// fields are the top-level fields kept, sorted; a change restarts the
	// informer.
	fields []string
	// informer is the trimmed dynamic informer.
	informer cache.SharedIndexInformer
	// cancel stops the informer.
	cancel context.CancelFunc
}

// cached reads an object from the informer's store.
func (t *dynamicTarget) cached(ns, name string) (runtime.Object, error) {
	key := name
	if ns != "" {
		key = ns + "/" + name
	}
	obj, exists, err := t.informer.GetStore().GetByKey(key)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, errors.NewNotFound(t.gvr.GroupResource(), name)
	}
	return obj.(runtime.Object), nil
}

// dynamicOps handles a custom resource through the dynamic client.
func (c *Controller) dynamicOps(t *dynamicTarget) *kindOps {
	gvk, gvr := t.gvk, t.gvr
	return &kindOps{
		gvk: gvk,
		evaluate: func(logger klog.Logger, obj runtime.Object) (evaluation, error) {
			m := accessor(obj)
			if m.GetDeletionTimestamp() != nil {
				return evaluation{}, nil
			}
			return c.withGlobalDryRun(c.evaluatePolicies(logger, gvk, obj, m, false)), nil
		},
		get: func(ctx context.Context, ns, name string) (runtime.Object, error) {
			return c.dynamic.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		},
		delete: func(ctx context.Context, ns, name string, opts metav1.DeleteOptions) error {
			return c.dynamic.Resource(gvr).Namespace(ns).Delete(ctx, name, opts)
		},
		requeueAfter: func(ns, name string, d time.Duration) {
			c.objectQueue.AddAfter(objectKey{resource: gvr, namespace: ns, name: name}, d)
		},
	}
}

// wantedTargets computes, from the ready policies, which custom resources
// need an informer and which fields it must keep. Jobs and Pods are served
// by the shared typed informers. Callers hold c.mu.
func (c *Controller) wantedTargets() map[schema.GroupVersionResource]*dynamicTarget {
	want := map[schema.GroupVersionResource]*dynamicTarget{}
	fieldSets := map[schema.GroupVersionResource]map[string]bool{}
	for _, p := range c.policies {
		if !p.Ready || p.GVR == jobResource || p.GVR == podResource {
			continue
		}
		if want[p.GVR] == nil {
			want[p.GVR] = &dynamicTarget{gvr: p.GVR, gvk: p.GVK}
			fieldSets[p.GVR] = map[string]bool{}
		}
		for _, f := range p.Rule.TopLevelFields() {
			fieldSets[p.GVR][f] = true
		}
		if f := p.OwnTTLTopLevelField(); f != "" {
			fieldSets[p.GVR][f] = true
		}
	}
	for gvr, set := range fieldSets {
		for f := range set {
			want[gvr].fields = append(want[gvr].fields, f)
		}
		sort.Strings(want[gvr].fields)
	}
	return want
}

// reconcileTargets starts informers for newly targeted resources, stops
// those no policy targets any more, and restarts those whose kept fields
// changed. It returns the resources whose informer was (re)started: their
// objects are enqueued by the informer's initial list. Callers hold c.mu.
func (c *Controller) reconcileTargets(ctx context.Context) map[schema.GroupVersionResource]bool {
	logger := klog.FromContext(ctx)
	started := map[schema.GroupVersionResource]bool{}
	if c.pods.reconcile(len(c.byKind[policy.PodGVK]) > 0) {
		started[podResource] = true
	}
	want := c.wantedTargets()
	for gvr, t := range c.targets {
		if w, ok := want[gvr]; !ok || strings.Join(w.fields, ",") != strings.Join(t.fields, ",") || w.gvk != t.gvk {
			logger.V(2).Info("Stopping informer for cleanup target", "resource", gvr.String())
			t.cancel()
			delete(c.targets, gvr)
		}
	}
	for gvr, w := range want {
		if _, ok := c.targets[gvr]; ok {
			continue
		}
		logger.V(2).Info("Starting informer for cleanup target", "resource", gvr.String(), "fields", w.fields)
		w.informer = dynamicinformer.NewFilteredDynamicInformer(c.dynamic, gvr, metav1.NamespaceAll, 0,
			cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}, nil).Informer()
		_ = w.informer.SetTransform(trimmer(w.fields))
		_ = w.informer.SetWatchErrorHandlerWithContext(c.onTargetWatchError(gvr))
		_, _ = w.informer.AddEventHandler(c.onDynamic(gvr, w.gvk))
		tctx, cancel := context.WithCancel(ctx)
		w.cancel = cancel
		go w.informer.RunWithContext(tctx)
		c.targets[gvr] = w
		started[gvr] = true
	}
	return started
}

// stopAllTargets stops every dynamic informer.
func (c *Controller) stopAllTargets() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for gvr, t := range c.targets {
		t.cancel()
		delete(c.targets, gvr)
	}
}

// trimmer returns an informer transform that keeps apiVersion, kind,
// metadata (without managedFields and the last-applied annotation) and the
// given top-level fields, so the cache holds only what rules read.
func trimmer(fields []string) cache.TransformFunc {
	return func(obj interface{}) (interface{}, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return obj, nil
		}
		out := &unstructured.Unstructured{Object: map[string]interface{}{}}
		for _, f := range append([]string{"apiVersion", "kind", "metadata"}, fields...) {
			if v, ok := u.Object[f]; ok {
				out.Object[f] = v
			}
		}
		out.SetManagedFields(nil)
		if a := out.GetAnnotations(); a != nil {
			if _, ok := a["kubectl.kubernetes.io/last-applied-configuration"]; ok {
				delete(a, "kubectl.kubernetes.io/last-applied-configuration")
				out.SetAnnotations(a)
			}
		}
		return out, nil
	}
}

// onTargetWatchError handles a failed list or watch of a target resource.
// When the resource is gone (its CRD deleted), the policies that target it
// are compiled again at once: discovery is refreshed, they become
// Ready=False (UnknownKind) and the informer is stopped, instead of logging a
// watch error every few seconds. Other errors (a restarting apiserver) are
// logged at V(2) and retried by the informer as usual.
func (c *Controller) onTargetWatchError(gvr schema.GroupVersionResource) cache.WatchErrorHandlerWithContext {
	return func(ctx context.Context, _ *cache.Reflector, err error) {
		logger := klog.FromContext(ctx)
		if !errors.IsNotFound(err) && !isResourceGone(err) {
			logger.V(2).Info("Watch of cleanup target failed, retrying", "resource", gvr.String(), "err", err)
			return
		}
		logger.V(2).Info("Cleanup target is no longer served", "resource", gvr.String(), "err", err)
		if r, ok := c.mapper.(meta.ResettableRESTMapper); ok {
			r.Reset()
		}
		c.mu.RLock()
		var names []string
		for _, p := range c.policies {
			if p.GVR == gvr {
				names = append(names, p.Name)
			}
		}
		c.mu.RUnlock()
		for _, n := range names {
			c.policyQueue.Add(n)
		}
	}
}

// isResourceGone reports the errors a reflector returns when the resource
// no longer exists: 404 on list, or the server saying it could not find
// the requested resource.
func isResourceGone(err error) bool {
	return strings.Contains(err.Error(), "the server could not find the requested resource")
}
