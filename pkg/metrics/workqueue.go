package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// The workqueue metrics carry the same names and the "name" label as
// kube-controller-manager's, so existing dashboards keep working.
var (
	wqDepth = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Subsystem: "workqueue", Name: "depth",
		Help: "Current depth of workqueue",
	}, []string{"name"})
	wqAdds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Subsystem: "workqueue", Name: "adds_total",
		Help: "Total number of adds handled by workqueue",
	}, []string{"name"})
	wqLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Subsystem: "workqueue", Name: "queue_duration_seconds",
		Help:    "How long in seconds an item stays in workqueue before being requested.",
		Buckets: prometheus.ExponentialBuckets(10e-9, 10, 10),
	}, []string{"name"})
	wqWorkDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Subsystem: "workqueue", Name: "work_duration_seconds",
		Help:    "How long in seconds processing an item from workqueue takes.",
		Buckets: prometheus.ExponentialBuckets(10e-9, 10, 10),
	}, []string{"name"})
	wqUnfinished = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Subsystem: "workqueue", Name: "unfinished_work_seconds",
		Help: "How many seconds of work has been done that is in progress and hasn't been observed by work_duration.",
	}, []string{"name"})
	wqLongestRunning = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Subsystem: "workqueue", Name: "longest_running_processor_seconds",
		Help: "How many seconds has the longest running processor for workqueue been running.",
	}, []string{"name"})
	wqRetries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Subsystem: "workqueue", Name: "retries_total",
		Help: "Total number of retries handled by workqueue",
	}, []string{"name"})
)

func init() {
	Registry.MustRegister(wqDepth, wqAdds, wqLatency, wqWorkDuration, wqUnfinished, wqLongestRunning, wqRetries)
	workqueue.SetProvider(workqueueProvider{})
}

// workqueueProvider feeds client-go's workqueue metrics into Registry.
type workqueueProvider struct{}

var _ workqueue.MetricsProvider = workqueueProvider{}

func (workqueueProvider) NewDepthMetric(name string) workqueue.GaugeMetric {
	return wqDepth.WithLabelValues(name)
}
func (workqueueProvider) NewAddsMetric(name string) workqueue.CounterMetric {
	return wqAdds.WithLabelValues(name)
}
func (workqueueProvider) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return wqLatency.WithLabelValues(name)
}
func (workqueueProvider) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return wqWorkDuration.WithLabelValues(name)
}
func (workqueueProvider) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return wqUnfinished.WithLabelValues(name)
}
func (workqueueProvider) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return wqLongestRunning.WithLabelValues(name)
}
func (workqueueProvider) NewRetriesMetric(name string) workqueue.CounterMetric {
	return wqRetries.WithLabelValues(name)
}
