package metrics

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Values of the "flow" label of job_controller_api_queue_wait_seconds.
const (
	// FlowJob labels the requests of a Job's sync.
	FlowJob = "job"
	// FlowOther labels every other request of the client: informers,
	// events (with their background share), orphan pods, other controllers
	// sharing the client.
	FlowOther = "other"
)

// NewAPIQueueWait registers job_controller_api_queue_wait_seconds on reg
// (or reuses the one registered there) and returns the observer a
// fairqueue.Limiter reports to: a request whose flow is a Job key
// (namespace/name, too many for a label) is labelled FlowJob, any other
// (the flow "", the event sink's) FlowOther.
func NewAPIQueueWait(reg prometheus.Registerer) (func(flow string, waited time.Duration), error) {
	h, err := register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Subsystem: Subsystem, Name: "api_queue_wait_seconds",
		Help: "The time an API request of the Job controller's client waited before it was sent: its turn in the fair queue " +
			"in front of the client-side rate limiter (--kube-api-qps, --kube-api-burst) and its token. " +
			"The flow label is \"job\" for the requests of a Job's sync, \"other\" for the rest.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
	}, []string{"flow"}))
	if err != nil {
		return nil, err
	}
	job, other := h.WithLabelValues(FlowJob), h.WithLabelValues(FlowOther)
	return func(flow string, waited time.Duration) {
		if !strings.Contains(flow, "/") {
			other.Observe(waited.Seconds())
			return
		}
		job.Observe(waited.Seconds())
	}, nil
}
