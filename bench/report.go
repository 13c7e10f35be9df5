package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"jobkeeper.dev/jobkeeper/bench/harness"
)

// runResult is one run of one implementation.
type runResult struct {
	Workload string `json:"workload"`
	Impl     string `json:"impl"`
	Budget   string `json:"budget"`
	Repeat   int    `json:"repeat"`
	// Units is what requests are divided by (completed pods, deleted Jobs,
	// pods present).
	Units int `json:"units"`
	// WallSeconds is the time to the workload's end state (for memory: the
	// start-up time).
	WallSeconds float64 `json:"wallSeconds"`
	// StartupSeconds is from the process start to its informers synced.
	StartupSeconds float64 `json:"startupSeconds"`
	// FirstPodSeconds is from the process start to its first pod creation
	// request (startup workload).
	FirstPodSeconds float64 `json:"firstPodSeconds,omitempty"`
	// P50Seconds and P99Seconds are Job creation to Complete.
	P50Seconds float64 `json:"p50Seconds,omitempty"`
	P99Seconds float64 `json:"p99Seconds,omitempty"`
	// FinalizersAtComplete is how many pods the benchmark's (slightly
	// lagging) cache still saw with the tracking finalizer when the last Job
	// was seen Complete; FinalizersDoneSeconds is when none was left.
	FinalizersAtComplete  int     `json:"finalizersAtComplete,omitempty"`
	FinalizersDoneSeconds float64 `json:"finalizersDoneSeconds,omitempty"`
	// Requests are the controller's requests by kind.
	Requests map[string]int `json:"requests"`
	// CPUSeconds is the controller process's user+system time.
	CPUSeconds float64 `json:"cpuSeconds"`
	// SystemCPUSeconds is the system (kernel) part of CPUSeconds.
	SystemCPUSeconds float64 `json:"systemCPUSeconds,omitempty"`
	// VoluntarySwitches and InvoluntarySwitches are the process's context
	// switches (the kernel's rusage): waits for I/O or a lock, and preemptions.
	VoluntarySwitches   int64 `json:"voluntarySwitches,omitempty"`
	InvoluntarySwitches int64 `json:"involuntarySwitches,omitempty"`
	// GoroutinesCreated and Threads are the controller's goroutines started
	// over the run and its OS threads at the end.
	GoroutinesCreated uint64 `json:"goroutinesCreated,omitempty"`
	Threads           uint64 `json:"threads,omitempty"`
	// GCCycles, GCCPUSeconds and AllocatedMiB are the controller's garbage
	// collections, their CPU (the Go runtime's estimate) and its heap
	// allocations over the run.
	GCCycles     float64 `json:"gcCycles,omitempty"`
	GCCPUSeconds float64 `json:"gcCPUSeconds,omitempty"`
	AllocatedMiB float64 `json:"allocatedMiB,omitempty"`
	// MaxRSSMiB is the controller process's peak resident set.
	MaxRSSMiB float64 `json:"maxRSSMiB"`
	// PeakHeapMiB is the peak heap in use, PeakLiveHeapMiB the peak live heap
	// after a GC, SteadyHeapMiB the live heap at the end of the run.
	PeakHeapMiB     float64 `json:"peakHeapMiB"`
	PeakLiveHeapMiB float64 `json:"peakLiveHeapMiB"`
	SteadyHeapMiB   float64 `json:"steadyHeapMiB"`
	// LoadBefore is the 1-minute load average when the run started.
	LoadBefore float64 `json:"loadBefore"`
	// Error says why the run failed; its figures are then left out.
	Error string `json:"error,omitempty"`
}

func (r runResult) summary() string {
	if r.Error != "" {
		return "FAILED: " + r.Error
	}
	return fmt.Sprintf("wall %.1fs, %d requests (%.3f per unit), CPU %.2fs (system %.2fs, %d/%d context switches, %d goroutines, %d threads; GC %.2fs, %.0f cycles, %.0f MiB allocated), RSS %.0f MiB, heap %.0f MiB",
		r.WallSeconds, harness.Total(r.Requests), float64(harness.Total(r.Requests))/float64(max(r.Units, 1)), r.CPUSeconds, r.SystemCPUSeconds, r.VoluntarySwitches, r.InvoluntarySwitches, r.GoroutinesCreated, r.Threads, r.GCCPUSeconds, r.GCCycles, r.AllocatedMiB, r.MaxRSSMiB, r.PeakHeapMiB)
}

// meta describes the run for the results page.
type meta struct {
	Command    string    `json:"command"`
	Started    time.Time `json:"started"`
	Finished   time.Time `json:"finished"`
	Commit     string    `json:"commit"`
	GoVersion  string    `json:"goVersion"`
	Machine    string    `json:"machine"`
	LoadBefore float64   `json:"loadBefore"`
	LoadAfter  float64   `json:"loadAfter"`
	Repeats    int       `json:"repeats"`
	Workers    int       `json:"workers"`
	Scale      float64   `json:"scale"`
	// Interrupted is set when the run was stopped before its end.
	Interrupted bool `json:"interrupted,omitempty"`
}

func collectMeta(cfg *suiteConfig) meta {
	commit := "unknown"
	if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		commit = strings.TrimSpace(string(out))
		if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
			commit += " (with uncommitted changes)"
		}
	}
	return meta{
		Command:    strings.TrimSpace("go run ./bench " + strings.Join(cfg.args, " ")),
		Started:    time.Now().UTC(),
		Commit:     commit,
		GoVersion:  runtime.Version(),
		Machine:    machine(),
		LoadBefore: loadAverage(),
		Repeats:    cfg.repeats,
		Workers:    cfg.workers,
		Scale:      cfg.scale,
	}
}

// machine describes the CPU and memory from /proc.
func machine() string {
	model := ""
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb float64
		if _, err := fmt.Sscanf(string(b), "MemTotal: %f kB", &kb); err == nil {
			mem = fmt.Sprintf(", %.0f GiB RAM", kb/(1<<20))
		}
	}
	return fmt.Sprintf("%s/%s, %d CPUs (%s)%s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), model, mem)
}

// loadAverage returns the 1-minute load average (0 if unknown).
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var l float64
	fmt.Sscanf(string(b), "%f", &l)
	return l
}

// report is the aggregated results.
type report struct {
	Meta      meta         `json:"meta"`
	Workloads []workload   `json:"workloads"`
	Budgets   []string     `json:"budgets"`
	Runs      []runResult  `json:"runs"`
	Summaries []summaryRow `json:"summaries"`
}

// summaryRow is the medians of one implementation on one workload and budget.
type summaryRow struct {
	Workload string `json:"workload"`
	Budget   string `json:"budget"`
	Impl     string `json:"impl"`
	// Runs is the number of successful runs the medians are over; Failed the
	// number of failed ones.
	Runs   int `json:"runs"`
	Failed int `json:"failed"`
	// Figures are the medians by figure name.
	Figures map[string]float64 `json:"figures"`
	// Requests are the median count of each request kind.
	Requests map[string]float64 `json:"requests"`
}

// Figure names, in table order.
const (
	figWall        = "wall (s)"
	figStartup     = "start-up to informers synced (s)"
	figFirstPod    = "process start to first pod created (s)"
	figP50         = "Job create to Complete p50 (s)"
	figP99         = "Job create to Complete p99 (s)"
	figOnePodP50   = "one-pod Job create to Complete p50 (s)"
	figOnePodP99   = "one-pod Job create to Complete p99 (s)"
	figFinalizers  = "wall to no tracking finalizer left (s)"
	figLeftover    = "pods with the finalizer when the last Job completed"
	figRequests    = "API requests"
	figPerUnit     = "requests per "
	figCPU         = "CPU (s)"
	figGCCPU       = "of which GC, runtime's estimate (s)"
	figGCCycles    = "GC cycles"
	figAllocated   = "heap allocated (MiB)"
	figRSS         = "peak RSS (MiB)"
	figHeap        = "peak heap in use (MiB)"
	figSteadyHeap  = "live heap at the end (MiB)"
	figLoad        = "load average at start"
	notApplicable  = "n/a"
	implJobkeeper  = "jobkeeper"
	implUpstream   = "upstream"
	readingStart   = "<!-- reading: kept when the page is regenerated -->"
	readingEnd     = "<!-- end of reading -->"
	defaultReading = "_No reading yet: write one between the markers; regenerating the page keeps it._"
)

// figures lists the figures of a workload kind, in table order.
func figures(w workload) []string {
	per := figPerUnit + w.unitName()
	switch w.Kind {
	case kindJobs:
		f := []string{figWall, figFinalizers, figLeftover, per, figRequests, figCPU, figGCCPU, figGCCycles, figAllocated, figRSS, figHeap, figSteadyHeap}
		if w.Jobs > 1 {
			f = append(f, figP50, figP99)
		}
		return append(f, figStartup, figLoad)
	case kindFairness:
		return []string{figWall, figOnePodP50, figOnePodP99, figFinalizers, figLeftover, per, figRequests, figCPU, figGCCPU, figGCCycles, figAllocated, figRSS, figHeap, figSteadyHeap, figStartup, figLoad}
	case kindTTL:
		return []string{figWall, per, figRequests, figCPU, figGCCPU, figGCCycles, figAllocated, figRSS, figHeap, figSteadyHeap, figStartup, figLoad}
	case kindBusy:
		return []string{figRSS, figHeap, figSteadyHeap, figWall, figFinalizers, figLeftover, per, figRequests, figCPU, figGCCPU, figGCCycles, figAllocated, figStartup, figLoad}
	case kindStartup:
		return []string{figFirstPod, figStartup, figRSS, figHeap, figCPU, figRequests, figLoad}
	default:
		return []string{figStartup, figSteadyHeap, figHeap, figRSS, figCPU, figRequests, per, figLoad}
	}
}

// runFigures extracts every figure of a run.
func runFigures(w workload, r runResult) map[string]float64 {
	total := float64(harness.Total(r.Requests))
	return map[string]float64{
		figWall:                   r.WallSeconds,
		figStartup:                r.StartupSeconds,
		figFirstPod:               r.FirstPodSeconds,
		figP50:                    r.P50Seconds,
		figP99:                    r.P99Seconds,
		figOnePodP50:              r.P50Seconds,
		figOnePodP99:              r.P99Seconds,
		figFinalizers:             r.FinalizersDoneSeconds,
		figLeftover:               float64(r.FinalizersAtComplete),
		figRequests:               total,
		figPerUnit + w.unitName(): total / float64(max(w.units(), 1)),
		figCPU:                    r.CPUSeconds,
		figGCCPU:                  r.GCCPUSeconds,
		figGCCycles:               r.GCCycles,
		figAllocated:              r.AllocatedMiB,
		figRSS:                    r.MaxRSSMiB,
		figHeap:                   r.PeakHeapMiB,
		figSteadyHeap:             r.SteadyHeapMiB,
		figLoad:                   r.LoadBefore,
	}
}

// buildReport computes the medians.
func buildReport(m meta, cfg *suiteConfig, runs []runResult) report {
	rep := report{Meta: m, Workloads: cfg.workloads, Runs: runs}
	for _, b := range cfg.budgets {
		rep.Budgets = append(rep.Budgets, b.String())
	}
	for _, w := range cfg.workloads {
		for _, b := range rep.Budgets {
			for _, impl := range implementations {
				rep.Summaries = append(rep.Summaries, summarize(w, b, impl, runs))
			}
		}
	}
	return rep
}

// summarize takes the medians of impl's successful runs of w at budget b.
func summarize(w workload, b, impl string, runs []runResult) summaryRow {
	row := summaryRow{Workload: w.Name, Budget: b, Impl: impl, Figures: map[string]float64{}, Requests: map[string]float64{}}
	values := map[string][]float64{}
	var ok []runResult
	for _, r := range runs {
		if r.Workload != w.Name || r.Budget != b || r.Impl != impl {
			continue
		}
		if r.Error != "" {
			row.Failed++
			continue
		}
		ok = append(ok, r)
		for k, v := range runFigures(w, r) {
			values[k] = append(values[k], v)
		}
	}
	row.Runs = len(ok)
	for k, vs := range values {
		row.Figures[k] = harness.Median(vs)
	}
	kinds := map[string]bool{}
	for _, r := range ok {
		for k := range r.Requests {
			kinds[k] = true
		}
	}
	for k := range kinds {
		var vs []float64
		for _, r := range ok {
			vs = append(vs, float64(r.Requests[k]))
		}
		row.Requests[k] = harness.Median(vs)
	}
	return row
}

func (rep report) summary(w, b, impl string) summaryRow {
	for _, s := range rep.Summaries {
		if s.Workload == w && s.Budget == b && s.Impl == impl {
			return s
		}
	}
	return summaryRow{}
}

// formatValue renders a figure with a precision that suits its size.
func formatValue(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return notApplicable
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	case math.Abs(v) >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

// ratio renders a/b ("n/a" when either is missing or b is zero).
func ratio(a, b float64, haveA, haveB bool) string {
	if !haveA || !haveB || b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return notApplicable
	}
	return fmt.Sprintf("%.2f", a/b)
}

// markdownTable renders a table with a header row.
func markdownTable(header []string, rows [][]string) string {
	var b strings.Builder
	b.WriteString("| " + strings.Join(header, " | ") + " |\n")
	seps := make([]string, len(header))
	for i := range seps {
		seps[i] = "---"
		if i > 0 {
			seps[i] = "---:"
		}
	}
	b.WriteString("| " + strings.Join(seps, " | ") + " |\n")
	for _, r := range rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	return b.String()
}

// workloadTables renders the figures and the requests by kind of w at b.
func workloadTables(rep report, w workload, b string) string {
	jk, up := rep.summary(w.Name, b, implJobkeeper), rep.summary(w.Name, b, implUpstream)
	var rows [][]string
	for _, f := range figures(w) {
		a, okA := jk.Figures[f]
		u, okU := up.Figures[f]
		cell := func(v float64, ok bool) string {
			if !ok {
				return notApplicable
			}
			return formatValue(v)
		}
		r := ratio(a, u, okA, okU)
		if f == figLoad {
			r = ""
		}
		rows = append(rows, []string{f, cell(a, okA), cell(u, okU), r})
	}
	var b2 strings.Builder
	fmt.Fprintf(&b2, "QPS/burst %s, median of %d (jobkeeper) and %d (upstream) runs", b, jk.Runs, up.Runs)
	if jk.Failed+up.Failed > 0 {
		fmt.Fprintf(&b2, "; FAILED runs: %d jobkeeper, %d upstream (see the JSON)", jk.Failed, up.Failed)
	}
	b2.WriteString(":\n\n")
	b2.WriteString(markdownTable([]string{"figure", "jobkeeper", "upstream", "jobkeeper/upstream"}, rows))
	if w.Kind == kindFairness {
		b2.WriteString("\n" + fairnessGoal(jk) + "\n")
	}
	for _, g := range goalLines(w, jk, up) {
		b2.WriteString("\n" + g + "\n")
	}
	kinds := map[string]bool{}
	for k := range jk.Requests {
		kinds[k] = true
	}
	for k := range up.Requests {
		kinds[k] = true
	}
	if len(kinds) > 0 {
		names := make([]string, 0, len(kinds))
		for k := range kinds {
			names = append(names, k)
		}
		sort.Strings(names)
		var kr [][]string
		for _, k := range names {
			kr = append(kr, []string{k, formatValue(jk.Requests[k]), formatValue(up.Requests[k])})
		}
		b2.WriteString("\nRequests by kind (median):\n\n")
		b2.WriteString(markdownTable([]string{"request", "jobkeeper", "upstream"}, kr))
	}
	return b2.String()
}

// renderTables renders every workload's tables (stdout and the page).
func renderTables(rep report) string {
	var b strings.Builder
	for _, w := range rep.Workloads {
		fmt.Fprintf(&b, "### %d. %s (`%s`)\n\n", w.number(), w.Title, w.Name)
		for _, budget := range rep.Budgets {
			b.WriteString(workloadTables(rep, w, budget))
			b.WriteString("\n")
		}
	}
	return b.String()
}

// extractReading returns the hand-written reading of an existing page.
func extractReading(page string) string {
	_, rest, ok := strings.Cut(page, readingStart)
	if !ok {
		return defaultReading
	}
	reading, _, ok := strings.Cut(rest, readingEnd)
	if !ok {
		return defaultReading
	}
	return strings.TrimSpace(reading)
}

// renderPage renders docs/benchmarks.md.
func renderPage(rep report, reading, jsonName string) string {
	m := rep.Meta
	var b strings.Builder
	b.WriteString("# Benchmarks: jobkeeper against upstream's controllers\n\n")
	b.WriteString("<!-- Generated by `go run ./bench`; only the reading below survives regeneration. -->\n\n")
	b.WriteString(methodology)
	b.WriteString("\n## This run\n\n")
	fmt.Fprintf(&b, "- Command: `%s` (%d repeat(s), %d workers per controller, scale %g)\n", m.Command, m.Repeats, m.Workers, m.Scale)
	fmt.Fprintf(&b, "- Date: %s to %s\n", m.Started.Format(time.RFC3339), m.Finished.Format(time.RFC3339))
	if m.Interrupted {
		b.WriteString("- **Interrupted** before the end: workloads or runs are missing\n")
	}
	fmt.Fprintf(&b, "- Commit: %s; %s; upstream controllers of k8s.io/kubernetes v1.36.3\n", m.Commit, m.GoVersion)
	fmt.Fprintf(&b, "- Machine: %s\n", m.Machine)
	fmt.Fprintf(&b, "- Load average (1 min): %.2f at the start, %.2f at the end; each run's is in the tables\n", m.LoadBefore, m.LoadAfter)
	if jsonName != "" {
		fmt.Fprintf(&b, "- Raw results of every run: [%s](%s)\n", jsonName, jsonName)
	}
	b.WriteString("\n## Reading\n\n")
	b.WriteString(readingStart + "\n")
	b.WriteString(reading + "\n")
	b.WriteString(readingEnd + "\n\n")
	b.WriteString("## Results\n\n")
	b.WriteString(renderTables(rep))
	return b.String()
}

// writeOutputs writes the page (keeping its reading) and the raw JSON.
func writeOutputs(cfg *suiteConfig, rep report) error {
	jsonName := ""
	if cfg.jsonPath != "" {
		data, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(cfg.jsonPath), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(cfg.jsonPath, append(data, '\n'), 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", cfg.jsonPath, err)
		}
		jsonName = cfg.jsonPath[strings.LastIndex(cfg.jsonPath, "/")+1:]
	}
	if cfg.out == "" {
		return nil
	}
	reading := defaultReading
	if old, err := os.ReadFile(cfg.out); err == nil {
		reading = extractReading(string(old))
	}
	if err := os.MkdirAll(filepath.Dir(cfg.out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(cfg.out, []byte(renderPage(rep, reading, jsonName)), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", cfg.out, err)
	}
	fmt.Fprintf(os.Stderr, "bench: wrote %s and %s\n", cfg.out, cfg.jsonPath)
	return nil
}

// fairnessGoalSeconds is issue 27's goal for the fairness workload: the
// one-pod Jobs' create to Complete p99 at QPS 100 while a big Job runs.
const fairnessGoalSeconds = 1.0

// fairnessGoal says whether jobkeeper's one-pod Jobs met the goal.
func fairnessGoal(jk summaryRow) string {
	p99, ok := jk.Figures[figOnePodP99]
	verdict := "not met"
	switch {
	case !ok || math.IsNaN(p99):
		verdict, p99 = "not measured", math.NaN()
	case p99 <= fairnessGoalSeconds:
		verdict = "met"
	}
	return fmt.Sprintf("Goal (issue 27, stated at QPS 100): one-pod Jobs' create to Complete p99 <= %.1f s while the big Job runs: **%s** (jobkeeper %s s).",
		fairnessGoalSeconds, verdict, formatValue(p99))
}
