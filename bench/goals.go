package main

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// ratioGoal is one of issue 27's goals stated as a ratio jobkeeper/upstream
// of one figure of one workload, measured side by side in the same run.
type ratioGoal struct {
	// workload is the workload's name.
	workload string
	// figure is the figure compared.
	figure string
	// max is the highest ratio that meets the goal.
	max float64
	// what says the goal in words, with the size it was stated for.
	what string
}

// ratioGoals are issue 27's goals stated as ratios.
var ratioGoals = []ratioGoal{
	{workload: "nonindexed", figure: figCPU, max: 0.85, what: "controller CPU on one NonIndexed Job (stated for 2,000 pods: -scale 0.2)"},
	{workload: "small", figure: figCPU, max: 0.85, what: "controller CPU on many 5-pod Jobs (stated for 100 Jobs: -scale 0.1)"},
	{workload: "busy", figure: figRSS, max: 0.25, what: "peak RSS with 10,000 running pods of no Job and a 2,000-pod Job"},
	{workload: "startup", figure: figFirstPod, max: 1.0, what: "process start to the first pod created for an existing Job of 10,000 pods"},
}

// goalLines returns the goal lines of w: for each of its ratio goals,
// whether jobkeeper met it against upstream in this run, and for the busy
// workload what the pod informers cost in requests.
func goalLines(w workload, jk, up summaryRow) []string {
	var out []string
	for _, g := range ratioGoals {
		if g.workload != w.Name {
			continue
		}
		out = append(out, g.line(jk, up))
	}
	if w.Kind == kindBusy {
		out = append(out, podInformerRequests(jk, up))
	}
	return out
}

// line renders the goal's verdict from the two sides' medians.
func (g ratioGoal) line(jk, up summaryRow) string {
	a, okA := jk.Figures[g.figure]
	u, okU := up.Figures[g.figure]
	verdict, r := "not measured", math.NaN()
	if okA && okU && u > 0 && !math.IsNaN(a) {
		r = a / u
		verdict = "not met"
		if r <= g.max {
			verdict = "met"
		}
	}
	return fmt.Sprintf("Goal (issue 27): %s <= %.2fx upstream's: **%s** (%s, jobkeeper %s, upstream %s).",
		g.what, g.max, verdict, ratioText(r), formatValue(a), formatValue(u))
}

func ratioText(r float64) string {
	if math.IsNaN(r) {
		return notApplicable
	}
	return fmt.Sprintf("%.2fx", r)
}

// podInformerRequests says what keeping pods in memory cost in requests on
// each side: the pod lists and watches (every informer's, and any sweep's).
func podInformerRequests(jk, up summaryRow) string {
	render := func(s summaryRow) string {
		var kinds []string
		for k := range s.Requests {
			if strings.HasSuffix(k, " pods") && (strings.HasPrefix(k, "list ") || strings.HasPrefix(k, "watch ")) {
				kinds = append(kinds, k)
			}
		}
		sort.Strings(kinds)
		var parts []string
		for _, k := range kinds {
			parts = append(parts, fmt.Sprintf("%s %s", k, formatValue(s.Requests[k])))
		}
		if len(parts) == 0 {
			return "none"
		}
		return strings.Join(parts, ", ")
	}
	return fmt.Sprintf("Pod lists and watches (what the pod caches cost in requests; they must not grow with pods of no Job): jobkeeper %s; upstream %s.", render(jk), render(up))
}
