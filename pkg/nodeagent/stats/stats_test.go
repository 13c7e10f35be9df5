package stats

import (
	"strings"
	"testing"
	"time"

	"k8s.io/component-base/metrics/testutil"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

func TestParseNode(t *testing.T) {
	stat := []byte("cpu  100 20 30 5000 70 1 2 3 0 0\ncpu0 50 10 15 2500 35 1 1 1 0 0\nbtime 1700000000\n")
	meminfo := []byte("MemTotal:       1000 kB\nMemFree:         200 kB\nMemAvailable:    600 kB\nInactive(file):  300 kB\n")
	n, err := parseNode(stat, meminfo)
	if err != nil {
		t.Fatal(err)
	}
	// user+nice+system+irq+softirq+steal = 156 ticks of 10ms.
	if n.CPU != 1560*time.Millisecond {
		t.Errorf("CPU %v, want 1.56s", n.CPU)
	}
	if n.Memory != 800*1024 || n.WorkingSet != 500*1024 || n.Available != 600*1024 {
		t.Errorf("memory %d, working set %d, available %d", n.Memory, n.WorkingSet, n.Available)
	}
	if !n.StartTime.Equal(time.Unix(1700000000, 0)) {
		t.Errorf("start time %v", n.StartTime)
	}
	if _, err := parseNode([]byte("intr 1\n"), meminfo); err == nil {
		t.Error("no cpu line: no error")
	}
}

// snapshots returns a take function that yields each snapshot in turn.
func snapshots(s ...Snapshot) func() Snapshot {
	i := 0
	return func() Snapshot {
		out := s[min(i, len(s)-1)]
		i++
		return out
	}
}

func TestRatesAndSummary(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	started := t0.Add(-time.Minute)
	pod := func(cpu time.Duration, ws uint64, startedAt time.Time) []PodUsage {
		return []PodUsage{{Namespace: "ns", Name: "p", UID: "u", StartTime: started,
			Containers: []ContainerUsage{{Name: "c", Stats: runtime.ContainerStats{CPU: cpu, Memory: ws + 10, WorkingSet: ws, StartedAt: startedAt}}}}}
	}
	c := NewCollector(snapshots(
		Snapshot{Time: t0, Node: NodeUsage{CPU: 10 * time.Second, WorkingSet: 1000}, Pods: pod(time.Second, 100, started)},
		Snapshot{Time: t0.Add(10 * time.Second), Node: NodeUsage{CPU: 15 * time.Second, WorkingSet: 1100}, Pods: pod(3*time.Second, 200, started)},
		// The container restarted: its rate starts afresh.
		Snapshot{Time: t0.Add(20 * time.Second), Node: NodeUsage{CPU: 20 * time.Second, WorkingSet: 1100}, Pods: pod(time.Second, 50, t0.Add(15*time.Second))},
	))
	if s := c.Summary("n"); s.Node.CPU != nil || len(s.Pods) != 0 {
		t.Errorf("summary before any sample: %+v", s)
	}
	c.Collect()
	if _, node, rates, _ := c.Last(); node.OK || len(rates) != 0 {
		t.Errorf("rates after one sample: node %+v, containers %v", node, rates)
	}
	c.Collect()
	_, node, rates, _ := c.Last()
	if !node.OK || node.NanoCores != 500_000_000 || node.Window != 10*time.Second {
		t.Errorf("node rate %+v, want 0.5 CPU over 10s", node)
	}
	if r := rates["u"]["c"]; !r.OK || r.NanoCores != 200_000_000 {
		t.Errorf("container rate %+v, want 0.2 CPU", r)
	}
	s := c.Summary("n")
	if s.Node.NodeName != "n" || *s.Node.CPU.UsageNanoCores != 500_000_000 || *s.Node.Memory.WorkingSetBytes != 1100 {
		t.Errorf("node summary %+v", s.Node)
	}
	if len(s.Pods) != 1 || *s.Pods[0].CPU.UsageNanoCores != 200_000_000 || *s.Pods[0].Containers[0].Memory.WorkingSetBytes != 200 ||
		*s.Pods[0].Containers[0].CPU.UsageCoreNanoSeconds != uint64(3*time.Second) {
		t.Errorf("pod summary %+v", s.Pods)
	}
	c.Collect()
	if _, _, rates, _ := c.Last(); len(rates["u"]) != 0 {
		t.Errorf("a restarted container kept its rate: %v", rates)
	}
}

func TestResourceMetrics(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	c := NewCollector(snapshots(Snapshot{Time: t0, Node: NodeUsage{CPU: 2 * time.Second, WorkingSet: 4096},
		Pods: []PodUsage{{Namespace: "ns", Name: "p", UID: "u", Containers: []ContainerUsage{
			{Name: "a", Stats: runtime.ContainerStats{CPU: time.Second, WorkingSet: 100, StartedAt: t0.Add(-time.Hour)}},
			{Name: "b", Stats: runtime.ContainerStats{CPU: 500 * time.Millisecond, WorkingSet: 50, StartedAt: t0.Add(-time.Hour)}}}}}}))
	c.Collect()
	want := `
# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="a",namespace="ns",pod="p"} 1 1700000000000
container_cpu_usage_seconds_total{container="b",namespace="ns",pod="p"} 0.5 1700000000000
# HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 4096 1700000000000
# HELP pod_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the pod in core-seconds
# TYPE pod_cpu_usage_seconds_total counter
pod_cpu_usage_seconds_total{namespace="ns",pod="p"} 1.5 1700000000000
# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE resource_scrape_error gauge
resource_scrape_error 0
`
	reg := newRegistry(c)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "container_cpu_usage_seconds_total", "node_memory_working_set_bytes",
		"pod_cpu_usage_seconds_total", "resource_scrape_error"); err != nil {
		t.Error(err)
	}
}
