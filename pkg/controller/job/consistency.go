package job

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/tools/cache"
)

// Read-your-writes (upstream's StaleControllerConsistencyJob): a sync
// decides from the informer caches, and a cache that has not yet delivered
// the controller's own last writes makes it decide from the past. A pod
// whose finalizer removal the cache does not show yet, read beside a Job
// status that does not show it counted yet, is a pod the sync believes
// lost, and it creates a replacement: an extra pod. So the controller
// remembers, per Job, the resourceVersion returned by its newest write of
// each resource (the Job's status, any of its pods), and a sync of that Job
// waits until each informer's store has synced at least that far.
//
// ResourceVersions are compared as etcd revisions (the apiserver's
// documented comparison, resourceversion.CompareResourceVersion). A store
// that cannot report its version (client-go's AtomicFIFO off) or a version
// that does not compare never blocks a sync, so the check degrades to the
// behaviour without it rather than wedging.

// Group-resources the tracker records writes of.
var (
	jobsResource = batchv1.SchemeGroupVersion.WithResource("jobs").GroupResource()
	podsResource = corev1.SchemeGroupVersion.WithResource("pods").GroupResource()
)

// syncedVersioner is the part of an informer store the tracker reads.
type syncedVersioner interface {
	// LastStoreSyncResourceVersion is the newest resourceVersion the store
	// has applied ("" if it does not know).
	LastStoreSyncResourceVersion() string
}

// writeTracker holds the newest resourceVersion written per Job and
// resource. A nil *writeTracker tracks nothing and never reports a stale
// cache (read-your-writes turned off).
type writeTracker struct {
	// stores report how far each informer has synced, by resource.
	stores map[schema.GroupResource]syncedVersioner
	// podStore, if set, returns the store of the pods without the Job label
	// of the Job key (its manualSelector narrow informer), nil when the
	// Job has none (Options.JobPodsOnly, pod_sources.go).
	podStore func(key string) syncedVersioner
	// mu guards jobs.
	mu sync.Mutex
	// jobs maps a Job key to its outstanding writes.
	jobs map[string]*jobWrites
}

// jobWrites are the writes made for one incarnation (UID) of a Job.
type jobWrites struct {
	// uid is the Job's UID; a write for another UID replaces the record.
	uid types.UID
	// versions is the newest resourceVersion written, by resource (and, for
	// pods, by the informer that holds the pod written).
	versions map[versionKey]string
	// barriers are the objects with a write whose outcome is unknown (an
	// error that does not prove the write was refused): before the next
	// sync, a fresh read of each must supply a version at least as new as
	// that write could have been.
	barriers map[barrier]bool
	// staleSince is when a check first found an informer behind these
	// writes (zero while none did).
	staleSince time.Time
}

// versionKey names the informer a write must reach: the resource's, or
// for a pod without the Job label, its Job's narrow informer when it has
// one (pod_sources.go).
type versionKey struct {
	resource     schema.GroupResource
	outsideLabel bool
}

// podVersionKey is the versionKey of a write of pod.
func (w *writeTracker) podVersionKey(pod metav1.Object) versionKey {
	_, labelled := pod.GetLabels()[batchv1.ControllerUidLabel]
	return versionKey{resource: podsResource, outsideLabel: w.podStore != nil && !labelled}
}

// barrier names an object whose last write has an unknown outcome.
type barrier struct {
	// resource is the object's group-resource.
	resource schema.GroupResource
	// name is the object's name, in the Job's namespace.
	name string
}

func newWriteTracker(stores map[schema.GroupResource]syncedVersioner) *writeTracker {
	return &writeTracker{stores: stores, jobs: map[string]*jobWrites{}}
}

// wrote records that a write for the Job key (with uid) returned
// resourceVersion rv of resource gr. Only the newest version per resource
// is kept.
func (w *writeTracker) wrote(key string, uid types.UID, gr schema.GroupResource, rv string) {
	w.wroteAt(key, uid, versionKey{resource: gr}, rv)
}

// wroteAt is wrote for the informer vk names.
func (w *writeTracker) wroteAt(key string, uid types.UID, vk versionKey, rv string) {
	if w == nil || rv == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	rec := w.record(key, uid)
	if prev, ok := rec.versions[vk]; ok {
		if cmp, err := resourceversion.CompareResourceVersion(prev, rv); err == nil && cmp >= 0 {
			return
		}
	}
	rec.versions[vk] = rv
}

// ambiguous reports whether a failed write may nevertheless have been
// applied: anything but a status error of a definite refusal (4xx, 429
// included). Server errors, timeouts and broken connections are ambiguous.
func ambiguous(err error) bool {
	if err == nil {
		return false
	}
	var unknown *unknownOutcomeError
	if errors.As(err, &unknown) {
		return true
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true
	}
	code := status.Status().Code
	return code == 0 || code >= 500 || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err)
}

// record returns the record of key for uid, replacing one of another UID.
// Call with mu held.
func (w *writeTracker) record(key string, uid types.UID) *jobWrites {
	rec := w.jobs[key]
	if rec == nil || rec.uid != uid {
		rec = &jobWrites{uid: uid, versions: map[versionKey]string{}, barriers: map[barrier]bool{}}
		w.jobs[key] = rec
	}
	return rec
}

// needBarrier records that a write of object b for the Job may have been
// applied although it returned an error.
func (w *writeTracker) needBarrier(key string, uid types.UID, b barrier) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.record(key, uid).barriers[b] = true
}

// barriers returns the objects that need a fresh read before the next sync
// of key, Job first, then pods by name.
func (w *writeTracker) barriers(key string) []barrier {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	rec := w.jobs[key]
	if rec == nil {
		return nil
	}
	out := make([]barrier, 0, len(rec.barriers))
	for b := range rec.barriers {
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b barrier) int {
		if a.resource != b.resource {
			return strings.Compare(a.resource.Resource, b.resource.Resource)
		}
		return strings.Compare(a.name, b.name)
	})
	return out
}

// passedBarrier records the version a fresh read of b returned ("" if the
// object does not exist), which the informer must reach before the Job is
// synced, and drops the barrier. vk is the informer that must reach rv.
func (w *writeTracker) passedBarrier(key string, b barrier, vk versionKey, rv string) {
	if w == nil {
		return
	}
	w.mu.Lock()
	rec := w.jobs[key]
	if rec == nil {
		w.mu.Unlock()
		return
	}
	delete(rec.barriers, b)
	uid := rec.uid
	w.mu.Unlock()
	w.wroteAt(key, uid, vk, rv)
}

// wrotePod records a pod write for the Job that controls the pod, if any.
// The pod may be the full object or its metadata only, as returned by a
// write that succeeded (never a nil pointer).
func (w *writeTracker) wrotePod(pod metav1.Object) {
	if w == nil || pod == nil {
		return
	}
	ref := metav1.GetControllerOfNoCopy(pod)
	if ref == nil || ref.Kind != "Job" || ref.APIVersion != batchv1.SchemeGroupVersion.String() {
		return
	}
	w.wroteAt(pod.GetNamespace()+"/"+ref.Name, ref.UID, w.podVersionKey(pod), pod.GetResourceVersion())
}

// staleRead is the outcome of a check that found a cache behind a write.
type staleRead struct {
	// resource is the group-resource whose informer is behind.
	resource schema.GroupResource
	// wrote and read are the written and the synced resourceVersions.
	wrote, read string
	// since is when the Job's writes were first found ahead of a cache.
	since time.Time
}

// stale reports the first resource whose informer has not yet synced the
// newest write recorded for key, at time now. When every informer has
// caught up, the record is dropped and nil is returned.
func (w *writeTracker) stale(key string, now time.Time) *staleRead {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	rec := w.jobs[key]
	if rec == nil {
		return nil
	}
	found := func(s *staleRead) *staleRead {
		if rec.staleSince.IsZero() {
			rec.staleSince = now
		}
		s.since = rec.staleSince
		return s
	}
	if len(rec.barriers) > 0 {
		// Callers pass the barriers first; this is a safety net.
		for b := range rec.barriers {
			return found(&staleRead{resource: b.resource})
		}
	}
	for vk, wrote := range rec.versions {
		gr := vk.resource
		store := w.stores[gr]
		if vk.outsideLabel {
			if s := w.podStore(key); s != nil {
				store = s
			}
		}
		if store == nil {
			continue
		}
		read := store.LastStoreSyncResourceVersion()
		if read == "" {
			continue
		}
		if cmp, err := resourceversion.CompareResourceVersion(wrote, read); err == nil && cmp > 0 {
			return found(&staleRead{resource: gr, wrote: wrote, read: read})
		}
	}
	delete(w.jobs, key)
	return nil
}

// giveUp drops the recorded versions of key (not its barriers), so that
// its next sync no longer waits for them.
func (w *writeTracker) giveUp(key string) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if rec := w.jobs[key]; rec != nil {
		clear(rec.versions)
		rec.staleSince = time.Time{}
	}
}

// forget drops the record of key (for any UID when uid is empty).
func (w *writeTracker) forget(key string, uid types.UID) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if rec := w.jobs[key]; rec != nil && (uid == "" || rec.uid == uid) {
		delete(w.jobs, key)
	}
}

// len returns how many Jobs have outstanding writes (for tests).
func (w *writeTracker) len() int {
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.jobs)
}

// errStaleCache is returned by a sync skipped because an informer has not
// observed the controller's own last write for the Job yet.
var errStaleCache = errors.New("informer cache older than the controller's last write")

// staleWaitLimit bounds how long a Job waits for the informers to show the
// controller's own writes. An informer that does not get there in this
// time is not going to soon (a watch that is not delivering, a version it
// cannot reach): the Job is then synced from the cache as it is, as if
// read-your-writes were off, and the sync that gives up is a sync error, so
// that the wait shows in the metrics and the logs instead of wedging the
// Job. A variable so that tests can shorten it.
var staleWaitLimit = 2 * time.Minute

// awaitOwnWrites makes sure the informers show the controller's own last
// writes for the Job key before it is synced. Writes whose outcome is
// unknown are first resolved by reading the object from the apiserver: the
// version it has now is at least as new as the write could have been, and
// the informer must reach it. It returns errStaleCache (wrapped) when the
// sync must wait, counting job_controller_stale_sync_skips_total. After
// staleWaitLimit of waiting it gives up on the versions: it returns an
// error (a sync error, retried with backoff), and the retry syncs.
func (c *Controller) awaitOwnWrites(ctx context.Context, key string) error {
	if c.writes == nil {
		return nil
	}
	var refused []error
	for _, b := range c.writes.barriers(key) {
		err := c.readBarrier(ctx, key, b)
		var r *refusedReadError
		switch {
		case errors.As(err, &r):
			refused = append(refused, err)
		case err != nil:
			return fmt.Errorf("reading %s %s of job %s after a write of unknown outcome: %w", b.resource.Resource, b.name, key, err)
		}
	}
	if len(refused) > 0 {
		// The barriers are passed: the retry syncs. This sync fails so
		// that the missing permission shows in the metrics and the log.
		return fmt.Errorf("job %s: %w", key, errors.Join(refused...))
	}
	now := c.clock.Now()
	s := c.writes.stale(key, now)
	if s == nil {
		return nil
	}
	if waited := now.Sub(s.since); waited >= staleWaitLimit {
		c.writes.giveUp(key)
		return fmt.Errorf("%s of job %s written at %s, informer still at %s after %s: syncing from the cache as it is",
			s.resource, key, s.wrote, s.read, waited.Round(time.Second))
	}
	c.metrics.StaleSyncSkips.WithLabelValues(s.resource.Group, s.resource.Resource).Inc()
	return fmt.Errorf("%w: %s of job %s written at %s, informer at %s", errStaleCache, s.resource, key, s.wrote, s.read)
}

// readBarrier reads object b of the Job key from the apiserver and records
// its version as written: a status write of the Job that was applied is in
// the Job's version; a pod whose create was applied exists, and its version
// is one the pod informer receives. A pod that does not exist was not
// created (creates are sent once, never resent by the client, so none
// lands later). Pods are created with a name chosen by the controller so
// that this read is possible.
//
// A read that is refused (403 from a role without "get", say) is made
// again as a LIST of that one object by name (listVersion), which needs
// only "list": the object it returns, or its absence, is what the read
// would have returned. The barrier is then passed, but the refusal is
// returned (refusedReadError) so that the sync reports it as an error: a
// role that lacks "get" shows in the sync error metric and the log while
// the Job keeps going. When the LIST fails too, the barrier stays for the
// retry.
func (c *Controller) readBarrier(ctx context.Context, key string, b barrier) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return err
	}
	var rv string
	switch b.resource {
	case jobsResource:
		job, err := c.client.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			c.writes.forget(key, "")
			return nil
		case err != nil:
			getErr := err
			var exists bool
			rv, exists, err = c.listVersion(ctx, ns, b, getErr)
			if err != nil {
				return err
			}
			if !exists {
				c.writes.forget(key, "")
				return &refusedReadError{barrier: b, err: getErr}
			}
			c.writes.passedBarrier(key, b, versionKey{resource: jobsResource}, rv)
			return &refusedReadError{barrier: b, err: getErr}
		default:
			rv = job.ResourceVersion
		}
	case podsResource:
		pod, err := c.client.CoreV1().Pods(ns).Get(ctx, b.name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			getErr := err
			if rv, _, err = c.listVersion(ctx, ns, b, getErr); err != nil {
				return err
			}
			// The listed version is the object's; which informer holds it
			// is unknown: the shared one's wait is the safe one only when
			// the Job has no narrow informer.
			c.writes.passedBarrier(key, b, versionKey{resource: podsResource, outsideLabel: c.sources.manualFor(key) != nil}, rv)
			return &refusedReadError{barrier: b, err: getErr}
		default:
			rv = pod.ResourceVersion
			c.writes.passedBarrier(key, b, c.writes.podVersionKey(pod), rv)
			return nil
		}
	}
	c.writes.passedBarrier(key, b, versionKey{resource: b.resource}, rv)
	return nil
}

// refusedReadError is a barrier read that was refused and made as a LIST
// instead.
type refusedReadError struct {
	// barrier is the object read.
	barrier barrier
	// err is the refusal.
	err error
}

func (e *refusedReadError) Error() string {
	return fmt.Sprintf("reading %s %s was refused (%v); it was listed instead: grant \"get\" on %s", e.barrier.resource.Resource, e.barrier.name, e.err, e.barrier.resource)
}

func (e *refusedReadError) Unwrap() error { return e.err }

// listVersion lists object b by name after its read was refused with
// getErr, and returns the object's resourceVersion and whether it exists.
// The version is the object's own, not the collection's: an informer
// reaches an object's version when it sees the object, but a collection's
// only with a later event of that resource, which may never come.
func (c *Controller) listVersion(ctx context.Context, ns string, b barrier, getErr error) (string, bool, error) {
	if ambiguous(getErr) || apierrors.IsTooManyRequests(getErr) {
		// Not a refusal: retry the read itself.
		return "", false, getErr
	}
	opts := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", b.name).String()}
	var items []metav1.Object
	var err error
	switch b.resource {
	case jobsResource:
		var list *batchv1.JobList
		if list, err = c.client.BatchV1().Jobs(ns).List(ctx, opts); err == nil {
			for i := range list.Items {
				items = append(items, &list.Items[i])
			}
		}
	case podsResource:
		var list *corev1.PodList
		if list, err = c.client.CoreV1().Pods(ns).List(ctx, opts); err == nil {
			for i := range list.Items {
				items = append(items, &list.Items[i])
			}
		}
	default:
		return "", false, fmt.Errorf("no barrier read for %s: %w", b.resource, getErr)
	}
	if err != nil {
		return "", false, fmt.Errorf("reading it was refused (%w), and listing it failed: %w", getErr, err)
	}
	for _, o := range items {
		if o.GetName() == b.name {
			return o.GetResourceVersion(), true, nil
		}
	}
	return "", false, nil
}
