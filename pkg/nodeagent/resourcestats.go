package nodeagent

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/internal/periodic"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/stats"
)

// StatsInterval is how often the agent samples what the node and its
// containers use (cAdvisor's housekeeping interval is 10 s; CPU rates are
// measured over it).
var StatsInterval = 10 * time.Second

// statsLoop samples at once, then every StatsInterval until ctx ends.
func (a *Agent) statsLoop(ctx context.Context) {
	a.stats.Collect()
	periodic.Every(ctx, a.clock, StatsInterval, a.stats.Collect)
}

// statsSnapshot is what the node and the running containers use now: the
// containers whose runtime reports it (those with a cgroup).
func (a *Agent) statsSnapshot() stats.Snapshot {
	s := stats.Snapshot{Time: a.clock.Now()}
	if n, err := stats.ReadNode(); err == nil {
		s.Node = n
	}
	for _, w := range a.allWorkers() {
		pod := w.currentPod()
		p := stats.PodUsage{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, StartTime: w.startTime}
		w.mu.Lock()
		handles := map[string]runtime.Handle{}
		for name, st := range w.logs {
			if st.running && st.handle != nil {
				handles[name] = st.handle
			}
		}
		w.mu.Unlock()
		for name, h := range handles {
			r, ok := h.(runtime.StatsReporter)
			if !ok {
				continue
			}
			cs, err := r.Stats()
			if err != nil {
				continue
			}
			p.Containers = append(p.Containers, stats.ContainerUsage{Name: name, Stats: cs})
		}
		if len(p.Containers) > 0 {
			s.Pods = append(s.Pods, p)
		}
	}
	return s
}

// summaryHandler serves the kubelet's /stats/summary.
func (a *Agent) summaryHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(a.stats.Summary(a.opts.NodeName))
	})
}

// Stats is the agent's resource usage collector (the resource metrics
// API reads it in `jobkeeper up`).
func (a *Agent) Stats() *stats.Collector { return a.stats }
