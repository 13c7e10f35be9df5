package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/leaderelection"
)

// The leader election metrics carry kube-controller-manager's names and its
// "name" label (the Lease's name), so that its dashboards and alerts apply.
// client-go reports nothing unless a provider is set; kube-controller-manager
// sets one from k8s.io/component-base, which registers on its legacy
// registry, not on Registry, hence this provider.
var (
	leaderStatus = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Subsystem: "leader_election", Name: "master_status",
		Help: "1 while this process holds the leader election lock of the given name, 0 while it is a candidate; aggregate by name.",
	}, []string{"name"})
	leaderSlowpath = prometheus.NewCounterVec(prometheus.CounterOpts{
		Subsystem: "leader_election", Name: "slowpath_total",
		Help: "Times the holder of the leader election lock of the given name renewed it through the slow path (read the lock, then update it) because its direct update failed.",
	}, []string{"name"})
)

func init() {
	Registry.MustRegister(leaderStatus, leaderSlowpath)
	leaderelection.SetProvider(leaderProvider{})
}

// leaderProvider feeds client-go's leader election metrics into Registry.
type leaderProvider struct{}

var _ leaderelection.MetricsProvider = leaderProvider{}

// NewLeaderMetric implements leaderelection.MetricsProvider.
func (leaderProvider) NewLeaderMetric() leaderelection.LeaderMetric { return leaderMetric{} }

// leaderMetric sets the gauges of one leader elector.
type leaderMetric struct{}

var _ leaderelection.LeaderMetric = leaderMetric{}

// On marks this process as the holder of the named lock.
func (leaderMetric) On(name string) { leaderStatus.WithLabelValues(name).Set(1) }

// Off marks this process as a candidate for the named lock.
func (leaderMetric) Off(name string) { leaderStatus.WithLabelValues(name).Set(0) }

// SlowpathExercised counts a slow-path renewal of the named lock.
func (leaderMetric) SlowpathExercised(name string) { leaderSlowpath.WithLabelValues(name).Inc() }
