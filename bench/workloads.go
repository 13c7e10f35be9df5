package main

import (
	"fmt"
	"math"
)

// workloadKind says how a workload runs and what it measures.
type workloadKind string

const (
	// kindJobs creates Jobs while the Job controller runs and waits until
	// every Job is Complete and no pod holds the tracking finalizer.
	kindJobs workloadKind = "jobs"
	// kindTTL creates finished Jobs with TTL 0, then starts the
	// TTL-after-finished controller and waits until every Job is gone.
	kindTTL workloadKind = "ttl"
	// kindMemory creates finished Jobs and pods, then starts both
	// controllers and measures start-up and the steady heap.
	kindMemory workloadKind = "memory"
	// kindFairness creates one big Job, then one-pod Jobs every
	// fairnessInterval while it runs, and measures how long the one-pod
	// Jobs wait (issue 27: no Job starves behind a big one).
	kindFairness workloadKind = "fairness"
	// kindBusy creates running pods that belong to no Job, then runs one
	// Job as kindJobs does: what the pods of other workloads cost a Job
	// controller (issue 27: only Job pods in memory).
	kindBusy workloadKind = "busy"
	// kindStartup creates a Job and its running pods, then starts the
	// controllers and measures the time from the process start to the first
	// pod creation request (issue 27: start-up).
	kindStartup workloadKind = "startup"
)

// workload is one benchmark scenario.
type workload struct {
	// Name is the -workloads name.
	Name string `json:"name"`
	// Title describes it on the results page.
	Title string `json:"title"`
	// Kind says how it runs.
	Kind workloadKind `json:"kind"`
	// Jobs is the number of Jobs.
	Jobs int `json:"jobs"`
	// Completions and Parallelism size each Job (kindJobs).
	Completions int `json:"completions,omitempty"`
	Parallelism int `json:"parallelism,omitempty"`
	// Indexed makes the Jobs Indexed.
	Indexed bool `json:"indexed,omitempty"`
	// Pods is the number of pods present (kindMemory), of running non-Job
	// pods (kindBusy), or of the existing Job's running pods (kindStartup).
	Pods int `json:"pods,omitempty"`
	// OnePodJobs is the number of one-pod Jobs created while the big Job
	// runs (kindFairness); Completions and Parallelism size the big Job.
	OnePodJobs int `json:"onePodJobs,omitempty"`
}

// workloads are every workload, numbered as in issue 7 (the suites run
// memory last: its 100,000 pods are not worth deleting at the end).
var workloads = []workload{
	{Name: "nonindexed", Title: "One NonIndexed Job, 10,000 completions, parallelism 500", Kind: kindJobs, Jobs: 1, Completions: 10000, Parallelism: 500},
	{Name: "indexed", Title: "One Indexed Job, 10,000 completions, parallelism 500", Kind: kindJobs, Jobs: 1, Completions: 10000, Parallelism: 500, Indexed: true},
	{Name: "small", Title: "1,000 Jobs of 5 completions (parallelism 5)", Kind: kindJobs, Jobs: 1000, Completions: 5, Parallelism: 5},
	{Name: "ttl", Title: "5,000 finished Jobs with TTL 0 to clean up (TTL controllers only)", Kind: kindTTL, Jobs: 5000},
	{Name: "memory", Title: "Start-up with 10,000 finished Jobs and 100,000 pods present (both controllers)", Kind: kindMemory, Jobs: 10000, Pods: 100000},
	{Name: "long", Title: "One NonIndexed Job, 100,000 completions, parallelism 500", Kind: kindJobs, Jobs: 1, Completions: 100000, Parallelism: 500},
	{Name: "fairness", Title: "One NonIndexed Job of 2,000 completions (parallelism 500), and 20 one-pod Jobs created every 100 ms from 2 s after it", Kind: kindFairness, Jobs: 1, Completions: 2000, Parallelism: 500, OnePodJobs: 20},
	{Name: "busy", Title: "Busy cluster: 10,000 running pods of no Job, then one NonIndexed Job of 2,000 completions (parallelism 500; both controllers)", Kind: kindBusy, Jobs: 1, Completions: 2000, Parallelism: 500, Pods: 10000},
	{Name: "startup", Title: "Start-up: one NonIndexed Job with 10,000 running pods exists; process start to its first new pod (both controllers)", Kind: kindStartup, Jobs: 1, Pods: 10000},
}

// suiteWorkloads returns the workload names of a suite, nil if unknown.
func suiteWorkloads(suite string) []string {
	switch suite {
	case "goals":
		out := make([]string, 0, len(goalSizes))
		for _, g := range goalSizes {
			out = append(out, g.workload)
		}
		return out
	case "default":
		return []string{"nonindexed", "indexed", "small", "ttl", "fairness", "busy", "startup", "memory"}
	case "long":
		return []string{"nonindexed", "indexed", "small", "ttl", "fairness", "busy", "startup", "long", "memory"}
	}
	return nil
}

// goalSize is a workload at the size issue 27 states its goal for, as a
// factor of the workload's full size.
type goalSize struct {
	workload string
	scale    float64
}

// goalSizes is the goals suite: every workload with a goal of issue 27, in
// the order of its items, at the size the goal is stated for (a 2,000-pod
// Job, 100 Jobs of 5; the others at full size).
var goalSizes = []goalSize{
	{"fairness", 1}, {"busy", 1}, {"nonindexed", 0.2}, {"small", 0.1}, {"startup", 1},
}

// goalBudget is the QPS/burst issue 27 states its goals at.
const goalBudget = "100/200"

// goalScale is the factor the goals suite runs w at (1 for workloads it
// does not state a size for).
func goalScale(name string) float64 {
	for _, g := range goalSizes {
		if g.workload == name {
			return g.scale
		}
	}
	return 1
}

func allWorkloadNames() []string {
	var out []string
	for _, w := range workloads {
		out = append(out, w.Name)
	}
	return out
}

// number is the workload's number on the results page.
func (w workload) number() int {
	for i, x := range workloads {
		if x.Name == w.Name {
			return i + 1
		}
	}
	return 0
}

func findWorkload(name string) (workload, bool) {
	for _, w := range workloads {
		if w.Name == name {
			return w, true
		}
	}
	return workload{}, false
}

// scaled multiplies the sizes by f (at least 1 of each; parallelism is
// capped by the completions), and says so in the title.
func (w workload) scaled(f float64) workload {
	if f == 1 {
		return w
	}
	n := func(v int) int {
		if v == 0 {
			return 0
		}
		return max(1, int(math.Round(float64(v)*f)))
	}
	// A Job's size only scales when there is one Job; many small Jobs scale
	// by their number.
	if w.Jobs == 1 {
		w.Completions = n(w.Completions)
	} else {
		w.Jobs = n(w.Jobs)
	}
	w.Pods = n(w.Pods)
	w.Parallelism = min(w.Parallelism, w.Completions)
	w.Title = fmt.Sprintf("%s [scaled x%g: %s]", w.Title, f, w.size())
	return w
}

// size describes the actual sizes.
func (w workload) size() string {
	switch w.Kind {
	case kindJobs:
		return fmt.Sprintf("%d Job(s) x %d completions, parallelism %d", w.Jobs, w.Completions, w.Parallelism)
	case kindFairness:
		return fmt.Sprintf("1 Job x %d completions, parallelism %d, and %d one-pod Jobs", w.Completions, w.Parallelism, w.OnePodJobs)
	case kindBusy:
		return fmt.Sprintf("%d running non-Job pods, 1 Job x %d completions, parallelism %d", w.Pods, w.Completions, w.Parallelism)
	case kindStartup:
		return fmt.Sprintf("1 Job with %d running pods", w.Pods)
	case kindTTL:
		return fmt.Sprintf("%d Jobs", w.Jobs)
	default:
		return fmt.Sprintf("%d Jobs, %d pods", w.Jobs, w.Pods)
	}
}

// units is what the per-unit request figure divides by: completed pods,
// deleted Jobs, or pods present.
func (w workload) units() int {
	switch w.Kind {
	case kindJobs, kindBusy:
		return w.Jobs * w.Completions
	case kindFairness:
		return w.Completions + w.OnePodJobs
	case kindTTL:
		return w.Jobs
	default:
		return w.Pods
	}
}

// unitName names units().
func (w workload) unitName() string {
	switch w.Kind {
	case kindJobs, kindFairness, kindBusy:
		return "completed pod"
	case kindTTL:
		return "deleted Job"
	default:
		return "pod present"
	}
}

// controllers are the controllers the workload runs.
func (w workload) controllers() string {
	switch w.Kind {
	case kindJobs, kindFairness:
		return "job"
	case kindTTL:
		return "ttl-after-finished"
	default:
		return "job,ttl-after-finished"
	}
}
