// Package stats is the node agent's resource usage, as the kubelet
// reports it from cAdvisor: it samples the node (from /proc) and each
// running container (from its cgroup) at an interval, keeps the last two
// samples of each to derive CPU rates, and answers the kubelet's
// /stats/summary (k8s.io/kubelet's stats v1alpha1 Summary), its
// /metrics/resource (the same metric names, labels and timestamps) and
// the resource metrics API (metrics.k8s.io, what `kubectl top` reads).
package stats

import (
	"sort"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// Snapshot is what the node and its containers use at one instant.
type Snapshot struct {
	// Time is when it was taken.
	Time time.Time
	// Node is the node's usage.
	Node NodeUsage
	// Pods are the pods with a running container.
	Pods []PodUsage
}

// NodeUsage is what the whole node uses.
type NodeUsage struct {
	// CPU is the CPU time used since boot, all CPUs together.
	CPU time.Duration
	// Memory is the memory in use; WorkingSet that less the reclaimable
	// cache; Available what is left.
	Memory, WorkingSet, Available uint64
	// StartTime is when the node booted.
	StartTime time.Time
}

// PodUsage is what one pod's running containers use.
type PodUsage struct {
	// Namespace, Name and UID name the pod.
	Namespace, Name string
	UID             types.UID
	// StartTime is the pod's status.startTime.
	StartTime time.Time
	// Containers are its running containers that report their usage.
	Containers []ContainerUsage
}

// ContainerUsage is what one running container uses.
type ContainerUsage struct {
	// Name is the container's name.
	Name string
	// Stats are its attempt's.
	Stats runtime.ContainerStats
}

// sample is one reading of a cumulative CPU time.
type sample struct {
	at  time.Time
	cpu time.Duration
}

// rate is the CPU used between two samples, in nanocores; false without
// two samples.
func rate(prev, last sample) (uint64, bool) {
	d := last.at.Sub(prev.at)
	if d <= 0 || last.cpu < prev.cpu {
		return 0, false
	}
	return uint64(float64(last.cpu-prev.cpu) / d.Seconds()), true
}

// key is one container attempt: a new attempt starts its rates afresh.
type key struct {
	uid       types.UID
	name      string
	startedAt time.Time
}

// Collector keeps the samples.
type Collector struct {
	// take takes a snapshot.
	take func() Snapshot

	// mu guards the fields below.
	mu sync.Mutex
	// last is the last snapshot, nil before the first.
	last *Snapshot
	// prev are the samples of the snapshot before it, by container, and
	// of the node.
	prev     map[key]sample
	prevNode *sample
	// notify are called with each snapshot.
	notify []func(Snapshot)
}

// OnCollect has f called with each snapshot taken from now on (the
// resource metrics API stores them).
func (c *Collector) OnCollect(f func(Snapshot)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.notify = append(c.notify, f)
}

// NewCollector returns a collector whose snapshots take takes.
func NewCollector(take func() Snapshot) *Collector {
	return &Collector{take: take, prev: map[key]sample{}}
}

// Collect takes a snapshot, keeping the one before for the rates.
func (c *Collector) Collect() {
	s := c.take()
	c.mu.Lock()
	notify := c.notify
	defer func() {
		c.mu.Unlock()
		for _, f := range notify {
			f(s)
		}
	}()
	if c.last != nil {
		prev := map[key]sample{}
		for _, p := range c.last.Pods {
			for _, ct := range p.Containers {
				prev[key{p.UID, ct.Name, ct.Stats.StartedAt}] = sample{c.last.Time, ct.Stats.CPU}
			}
		}
		c.prev = prev
		c.prevNode = &sample{c.last.Time, c.last.Node.CPU}
	}
	c.last = &s
}

// Last is the last snapshot with the rates since the one before: the
// node's, and each container's by pod UID and name (absent when it has no
// earlier sample). ok is false before the first snapshot.
func (c *Collector) Last() (s Snapshot, node RateOf, containers map[types.UID]map[string]RateOf, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil {
		return Snapshot{}, RateOf{}, nil, false
	}
	s = *c.last
	if c.prevNode != nil {
		node.NanoCores, node.OK = rate(*c.prevNode, sample{s.Time, s.Node.CPU})
		node.Window = s.Time.Sub(c.prevNode.at)
	}
	containers = map[types.UID]map[string]RateOf{}
	for _, p := range s.Pods {
		for _, ct := range p.Containers {
			prev, found := c.prev[key{p.UID, ct.Name, ct.Stats.StartedAt}]
			if !found {
				continue
			}
			r := RateOf{Window: s.Time.Sub(prev.at)}
			if r.NanoCores, r.OK = rate(prev, sample{s.Time, ct.Stats.CPU}); r.OK {
				if containers[p.UID] == nil {
					containers[p.UID] = map[string]RateOf{}
				}
				containers[p.UID][ct.Name] = r
			}
		}
	}
	return s, node, containers, true
}

// RateOf is a CPU rate over a window.
type RateOf struct {
	// NanoCores is the CPU used, in billionths of a CPU.
	NanoCores uint64
	// Window is how long it was measured over.
	Window time.Duration
	// OK is false when there were not two samples.
	OK bool
}

// Summary is the kubelet's /stats/summary of the last snapshot: the node
// and each pod with its running containers.
func (c *Collector) Summary(nodeName string) *statsapi.Summary {
	s, node, rates, ok := c.Last()
	out := &statsapi.Summary{Node: statsapi.NodeStats{NodeName: nodeName}, Pods: []statsapi.PodStats{}}
	if !ok {
		return out
	}
	at := metav1.NewTime(s.Time)
	out.Node.StartTime = metav1.NewTime(s.Node.StartTime)
	out.Node.CPU = &statsapi.CPUStats{Time: at, UsageCoreNanoSeconds: ptr(uint64(s.Node.CPU))}
	if node.OK {
		out.Node.CPU.UsageNanoCores = ptr(node.NanoCores)
	}
	out.Node.Memory = &statsapi.MemoryStats{Time: at, UsageBytes: ptr(s.Node.Memory), WorkingSetBytes: ptr(s.Node.WorkingSet), AvailableBytes: ptr(s.Node.Available)}
	for _, p := range s.Pods {
		ps := statsapi.PodStats{PodRef: statsapi.PodReference{Name: p.Name, Namespace: p.Namespace, UID: string(p.UID)}, StartTime: metav1.NewTime(p.StartTime)}
		var cpu, mem, ws uint64
		var nano uint64
		allRates := true
		for _, ct := range p.Containers {
			cs := statsapi.ContainerStats{Name: ct.Name, StartTime: metav1.NewTime(ct.Stats.StartedAt),
				CPU:    &statsapi.CPUStats{Time: at, UsageCoreNanoSeconds: ptr(uint64(ct.Stats.CPU))},
				Memory: &statsapi.MemoryStats{Time: at, UsageBytes: ptr(ct.Stats.Memory), WorkingSetBytes: ptr(ct.Stats.WorkingSet)}}
			if r, ok := rates[p.UID][ct.Name]; ok {
				cs.CPU.UsageNanoCores = ptr(r.NanoCores)
				nano += r.NanoCores
			} else {
				allRates = false
			}
			cpu += uint64(ct.Stats.CPU)
			mem += ct.Stats.Memory
			ws += ct.Stats.WorkingSet
			ps.Containers = append(ps.Containers, cs)
		}
		ps.CPU = &statsapi.CPUStats{Time: at, UsageCoreNanoSeconds: ptr(cpu)}
		if allRates {
			ps.CPU.UsageNanoCores = ptr(nano)
		}
		ps.Memory = &statsapi.MemoryStats{Time: at, UsageBytes: ptr(mem), WorkingSetBytes: ptr(ws)}
		out.Pods = append(out.Pods, ps)
	}
	sort.Slice(out.Pods, func(i, j int) bool {
		a, b := out.Pods[i].PodRef, out.Pods[j].PodRef
		return a.Namespace < b.Namespace || a.Namespace == b.Namespace && a.Name < b.Name
	})
	return out
}

func ptr[T any](v T) *T { return &v }
