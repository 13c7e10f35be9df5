package ttlafterfinished

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
)

// pendingRef names an object for the expired-objects gauge.
type pendingRef struct {
	group, kind, namespace, name string
}

// pendingSet tracks the expiry time of every object the controller has
// scheduled for deletion and not yet deleted, so that the backlog of
// expired-but-not-deleted objects can be exported per kind.
type pendingSet struct {
	mu sync.Mutex
	at map[pendingRef]time.Time
}

func newPendingSet() *pendingSet { return &pendingSet{at: map[pendingRef]time.Time{}} }

// set records when ref expires.
func (p *pendingSet) set(ref pendingRef, expireAt time.Time) {
	p.mu.Lock()
	p.at[ref] = expireAt
	p.mu.Unlock()
}

// forget drops ref (deleted, gone, or no longer eligible).
func (p *pendingSet) forget(ref pendingRef) {
	p.mu.Lock()
	delete(p.at, ref)
	p.mu.Unlock()
}

// expiredByKind counts the entries expired at now, per group and kind.
func (p *pendingSet) expiredByKind(now time.Time) map[[2]string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[[2]string]int{}
	for ref, at := range p.at {
		if !at.After(now) {
			out[[2]string{ref.group, ref.kind}]++
		}
	}
	return out
}

// pendingCollector exports ttl_after_finished_controller_expired_objects_pending.
type pendingCollector struct {
	set   *pendingSet
	clock clock.Clock
	desc  *prometheus.Desc
}

func newPendingCollector(set *pendingSet, clk clock.Clock) *pendingCollector {
	return &pendingCollector{set: set, clock: clk, desc: prometheus.NewDesc(
		prometheus.BuildFQName("", metricsSubsystem, "expired_objects_pending"),
		"Objects whose TTL has expired and that the controller has not deleted yet (dry-run verdicts excluded), per kind.",
		[]string{"group", "kind"}, nil)}
}

// Describe implements prometheus.Collector.
func (pc *pendingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- pc.desc }

// Collect implements prometheus.Collector.
func (pc *pendingCollector) Collect(ch chan<- prometheus.Metric) {
	for gk, n := range pc.set.expiredByKind(pc.clock.Now()) {
		ch <- prometheus.MustNewConstMetric(pc.desc, prometheus.GaugeValue, float64(n), gk[0], gk[1])
	}
}
