package stats

import (
	"net/http"

	"k8s.io/component-base/metrics"
)

// The kubelet's resource metrics (its /metrics/resource), with its names,
// help, labels and stability levels; swap is not reported (a node agent
// container never swaps beyond its memory limit).
var (
	nodeCPUDesc = metrics.NewDesc("node_cpu_usage_seconds_total",
		"Cumulative cpu time consumed by the node in core-seconds", nil, nil, metrics.STABLE, "")
	nodeMemoryDesc = metrics.NewDesc("node_memory_working_set_bytes",
		"Current working set of the node in bytes", nil, nil, metrics.STABLE, "")
	containerCPUDesc = metrics.NewDesc("container_cpu_usage_seconds_total",
		"Cumulative cpu time consumed by the container in core-seconds", []string{"container", "pod", "namespace"}, nil, metrics.STABLE, "")
	containerMemoryDesc = metrics.NewDesc("container_memory_working_set_bytes",
		"Current working set of the container in bytes", []string{"container", "pod", "namespace"}, nil, metrics.STABLE, "")
	containerStartDesc = metrics.NewDesc("container_start_time_seconds",
		"Start time of the container since unix epoch in seconds", []string{"container", "pod", "namespace"}, nil, metrics.STABLE, "")
	podCPUDesc = metrics.NewDesc("pod_cpu_usage_seconds_total",
		"Cumulative cpu time consumed by the pod in core-seconds", []string{"pod", "namespace"}, nil, metrics.STABLE, "")
	podMemoryDesc = metrics.NewDesc("pod_memory_working_set_bytes",
		"Current working set of the pod in bytes", []string{"pod", "namespace"}, nil, metrics.STABLE, "")
	scrapeErrorDesc = metrics.NewDesc("resource_scrape_error",
		"1 if there was an error while getting container metrics, 0 otherwise", nil, nil, metrics.STABLE, "")
)

// resourceCollector exposes the last snapshot as the kubelet's resource
// metrics, each value stamped with the time it was sampled.
type resourceCollector struct {
	metrics.BaseStableCollector
	c *Collector
}

// DescribeWithStability implements metrics.StableCollector.
func (r *resourceCollector) DescribeWithStability(ch chan<- *metrics.Desc) {
	for _, d := range []*metrics.Desc{nodeCPUDesc, nodeMemoryDesc, containerCPUDesc, containerMemoryDesc, containerStartDesc, podCPUDesc, podMemoryDesc, scrapeErrorDesc} {
		ch <- d
	}
}

// CollectWithStability implements metrics.StableCollector.
func (r *resourceCollector) CollectWithStability(ch chan<- metrics.Metric) {
	s, _, _, ok := r.c.Last()
	if !ok {
		ch <- metrics.NewLazyConstMetric(scrapeErrorDesc, metrics.GaugeValue, 1)
		return
	}
	ch <- metrics.NewLazyConstMetric(scrapeErrorDesc, metrics.GaugeValue, 0)
	stamp := func(m metrics.Metric) metrics.Metric { return metrics.NewLazyMetricWithTimestamp(s.Time, m) }
	ch <- stamp(metrics.NewLazyConstMetric(nodeCPUDesc, metrics.CounterValue, s.Node.CPU.Seconds()))
	ch <- stamp(metrics.NewLazyConstMetric(nodeMemoryDesc, metrics.GaugeValue, float64(s.Node.WorkingSet)))
	for _, p := range s.Pods {
		var cpu, ws float64
		for _, ct := range p.Containers {
			cpu += ct.Stats.CPU.Seconds()
			ws += float64(ct.Stats.WorkingSet)
			ch <- metrics.NewLazyConstMetric(containerStartDesc, metrics.GaugeValue, float64(ct.Stats.StartedAt.UnixNano())/1e9, ct.Name, p.Name, p.Namespace)
			ch <- stamp(metrics.NewLazyConstMetric(containerCPUDesc, metrics.CounterValue, ct.Stats.CPU.Seconds(), ct.Name, p.Name, p.Namespace))
			ch <- stamp(metrics.NewLazyConstMetric(containerMemoryDesc, metrics.GaugeValue, float64(ct.Stats.WorkingSet), ct.Name, p.Name, p.Namespace))
		}
		ch <- stamp(metrics.NewLazyConstMetric(podCPUDesc, metrics.CounterValue, cpu, p.Name, p.Namespace))
		ch <- stamp(metrics.NewLazyConstMetric(podMemoryDesc, metrics.GaugeValue, ws, p.Name, p.Namespace))
	}
}

// ResourceMetricsHandler serves the kubelet's /metrics/resource from c.
func ResourceMetricsHandler(c *Collector) http.Handler {
	return metrics.HandlerFor(newRegistry(c), metrics.HandlerOpts{ErrorHandling: metrics.ContinueOnError})
}

// newRegistry is a registry of c's resource metrics alone.
func newRegistry(c *Collector) metrics.KubeRegistry {
	reg := metrics.NewKubeRegistry()
	reg.CustomMustRegister(&resourceCollector{c: c})
	return reg
}
