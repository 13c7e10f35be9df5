package job

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/clock"
)

// expectationsTimeout is how long unobserved creates or deletes block syncs
// before they are assumed lost (a watch gap), as upstream.
const expectationsTimeout = 5 * time.Minute

// podExpectations counts, per Job key, the pod creations and deletions the
// controller issued but has not yet seen in its informer. While any are
// outstanding the Job's pod list is stale and no new pods are created or
// deleted for it.
type podExpectations struct {
	mu    sync.Mutex
	clock clock.PassiveClock
	m     map[string]*pending
}

// pending is the outstanding writes of one Job.
type pending struct {
	adds, dels int
	since      time.Time
}

func newPodExpectations(c clock.PassiveClock) *podExpectations {
	return &podExpectations{clock: c, m: map[string]*pending{}}
}

// satisfied reports whether nothing is outstanding for key (or what is
// outstanding has expired).
func (e *podExpectations) satisfied(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, ok := e.m[key]
	if !ok {
		return true
	}
	return (p.adds <= 0 && p.dels <= 0) || e.clock.Since(p.since) > expectationsTimeout
}

// expiresIn returns how long until what is outstanding for key expires
// (0 if nothing is, or it already has).
func (e *podExpectations) expiresIn(key string) time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, ok := e.m[key]
	if !ok || (p.adds <= 0 && p.dels <= 0) {
		return 0
	}
	return max(expectationsTimeout-e.clock.Since(p.since), 0)
}

// expect replaces the expectations of key with adds creations and dels deletions.
func (e *podExpectations) expect(key string, adds, dels int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.m[key] = &pending{adds: adds, dels: dels, since: e.clock.Now()}
}

// observe lowers the outstanding creations and deletions of key.
func (e *podExpectations) observe(key string, adds, dels int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if p, ok := e.m[key]; ok {
		p.adds -= adds
		p.dels -= dels
	}
}

// forget drops the expectations of key.
func (e *podExpectations) forget(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.m, key)
}

// finalizerExpectations holds, per Job key, the UIDs of pods whose tracking
// finalizer the controller removed but whose update the informer has not
// delivered yet. Such pods are treated as already finalizer-free, so a
// sync running on a stale cache neither re-adds them to
// uncountedTerminatedPods nor counts them twice.
type finalizerExpectations struct {
	mu sync.Mutex
	m  map[string]sets.Set[types.UID]
}

func newFinalizerExpectations() *finalizerExpectations {
	return &finalizerExpectations{m: map[string]sets.Set[types.UID]{}}
}

// expect records that the finalizers of uids are being removed.
func (f *finalizerExpectations) expect(key string, uids []types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.m[key]
	if !ok {
		s = sets.New[types.UID]()
		f.m[key] = s
	}
	s.Insert(uids...)
}

// observed records that the removal for uid was seen (or will never be).
func (f *finalizerExpectations) observed(key string, uid types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.m[key]; ok {
		s.Delete(uid)
		if s.Len() == 0 {
			delete(f.m, key)
		}
	}
}

// expected returns a copy of the UIDs still expected for key.
func (f *finalizerExpectations) expected(key string) sets.Set[types.UID] {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m[key].Clone()
}

// forget drops everything expected for key.
func (f *finalizerExpectations) forget(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, key)
}
