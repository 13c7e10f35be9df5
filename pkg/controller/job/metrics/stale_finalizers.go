package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Names of the stale tracking finalizer gauges (with Subsystem in front).
// Upstream has no such gauges; the names follow its style.
const (
	// StaleFinalizerPodsName is the number of pods holding a stale finalizer.
	StaleFinalizerPodsName = "stale_tracking_finalizer_pods"
	// StaleFinalizerOldestName is the age of the oldest such pod.
	StaleFinalizerOldestName = "stale_tracking_finalizer_oldest_seconds"
)

// StaleFinalizers is one reading of the pods that still hold the
// batch.kubernetes.io/job-tracking finalizer although their Job is finished
// or gone.
type StaleFinalizers struct {
	// Pods is how many such pods there are.
	Pods int
	// OldestSeconds is how long the oldest of them has been stale; 0 when
	// there is none.
	OldestSeconds float64
}

// StaleFinalizerSource computes a reading when Prometheus scrapes. Its
// dynamic type must be comparable (a pointer, typically): ClearSource
// compares sources.
type StaleFinalizerSource interface {
	// StaleFinalizers reads the informer caches; it must not call the apiserver.
	StaleFinalizers() StaleFinalizers
}

// StaleFinalizerCollector exports the stale tracking finalizer gauges,
// computed by its source at each scrape. It exports nothing while it has no
// source (no running Job controller with synced caches in this process, e.g.
// a replica waiting for the leader Lease): a zero would claim a measurement.
type StaleFinalizerCollector struct {
	// pods and oldest describe the two gauges.
	pods, oldest *prometheus.Desc
	// mu guards source.
	mu sync.Mutex
	// source computes the readings; nil until a controller sets it.
	source StaleFinalizerSource
}

var _ prometheus.Collector = (*StaleFinalizerCollector)(nil)

// NewStaleFinalizerCollector returns a collector without a source.
func NewStaleFinalizerCollector() *StaleFinalizerCollector {
	return &StaleFinalizerCollector{
		pods: prometheus.NewDesc(prometheus.BuildFQName("", Subsystem, StaleFinalizerPodsName),
			"The number of pods that still have the finalizer batch.kubernetes.io/job-tracking although their Job is finished or no longer exists, once past a short grace period.",
			nil, nil),
		oldest: prometheus.NewDesc(prometheus.BuildFQName("", Subsystem, StaleFinalizerOldestName),
			"How long, in seconds, the oldest pod counted in job_controller_stale_tracking_finalizer_pods has kept the finalizer since its Job finished (or since the controller first saw its Job gone); 0 when there is none.",
			nil, nil),
	}
}

// SetSource makes src compute the gauges from now on.
func (c *StaleFinalizerCollector) SetSource(src StaleFinalizerSource) {
	c.mu.Lock()
	c.source = src
	c.mu.Unlock()
}

// ClearSource removes src if it is still the source, so that a stopped
// controller neither reports nor stays reachable; a newer source stays.
func (c *StaleFinalizerCollector) ClearSource(src StaleFinalizerSource) {
	c.mu.Lock()
	if c.source == src {
		c.source = nil
	}
	c.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (c *StaleFinalizerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pods
	ch <- c.oldest
}

// Collect implements prometheus.Collector.
func (c *StaleFinalizerCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	src := c.source
	c.mu.Unlock()
	if src == nil {
		return
	}
	r := src.StaleFinalizers()
	ch <- prometheus.MustNewConstMetric(c.pods, prometheus.GaugeValue, float64(r.Pods))
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, r.OldestSeconds)
}
