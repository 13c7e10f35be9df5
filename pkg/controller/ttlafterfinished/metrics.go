package ttlafterfinished

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"jobkeeper.dev/jobkeeper/pkg/controller/ttlafterfinished/policy"
)

// Metric subsystem, as upstream's.
const metricsSubsystem = "ttl_after_finished_controller"

// Label values of the mode label.
const (
	modeDelete = "delete"
	modeDryRun = "dry-run"
)

// metrics are the controller's Prometheus collectors.
type metrics struct {
	// jobDeletionDuration is upstream's histogram: expiry to deletion of Jobs.
	jobDeletionDuration prometheus.Histogram
	// deletionDuration is the same for every kind.
	deletionDuration *prometheus.HistogramVec
	// deleted counts deletions (and dry-run reports) per kind.
	deleted *prometheus.CounterVec
	// conflicts counts deletes refused by a precondition.
	conflicts *prometheus.CounterVec
	// historyDeleted counts deletions by keepLast history limits.
	historyDeleted *prometheus.CounterVec
}

// newMetrics creates the collectors and registers them on reg.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	buckets := prometheus.ExponentialBuckets(0.1, 2, 14)
	m := &metrics{
		jobDeletionDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: metricsSubsystem,
			Name:      "job_deletion_duration_seconds",
			Help:      "The time it took to delete the job since it became eligible for deletion",
			Buckets:   buckets,
		}),
		deletionDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: metricsSubsystem,
			Name:      "deletion_duration_seconds",
			Help:      "The time it took to delete an object of any kind since its TTL expired.",
			Buckets:   buckets,
		}, []string{"group", "kind"}),
		deleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: metricsSubsystem,
			Name:      "deleted_objects_total",
			Help:      "Objects deleted after their TTL expired (mode=delete), or reported by a dry-run policy (mode=dry-run).",
		}, []string{"group", "kind", "mode"}),
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: metricsSubsystem,
			Name:      "delete_conflicts_total",
			Help:      "Deletes refused because the object changed since it was read (resourceVersion or UID precondition).",
		}, []string{"group", "kind"}),
		historyDeleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: metricsSubsystem,
			Name:      "history_limit_deleted_objects_total",
			Help:      "Objects deleted because they were beyond a TTLPolicy's keepLast history limit (also counted in deleted_objects_total).",
		}, []string{"group", "kind"}),
	}
	for _, c := range []prometheus.Collector{m.jobDeletionDuration, m.deletionDuration, m.deleted, m.conflicts, m.historyDeleted} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// observeDeletion records one deletion (or dry-run report) of an object of
// kind gvk, late by the given duration after expiry.
func (m *metrics) observeDeletion(gvk schema.GroupVersionKind, dryRun bool, late time.Duration) {
	if dryRun {
		m.deleted.WithLabelValues(gvk.Group, gvk.Kind, modeDryRun).Inc()
		return
	}
	m.deleted.WithLabelValues(gvk.Group, gvk.Kind, modeDelete).Inc()
	m.deletionDuration.WithLabelValues(gvk.Group, gvk.Kind).Observe(late.Seconds())
	if gvk == policy.JobGVK {
		m.jobDeletionDuration.Observe(late.Seconds())
	}
}
