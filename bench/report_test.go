package main

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseBudgets(t *testing.T) {
	cases := map[string]struct {
		in      string
		want    []budget
		wantErr bool
	}{
		"default": {in: "50/100,500/1000", want: []budget{{QPS: 50, Burst: 100}, {QPS: 500, Burst: 1000}}},
		"spaces":  {in: " 20/40 ", want: []budget{{QPS: 20, Burst: 40}}},
		"no /":    {in: "50", wantErr: true},
		"zero":    {in: "0/10", wantErr: true},
		"garbage": {in: "a/b", wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := parseBudgets(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("budgets (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"-workloads", "ttl,small", "-scale", "0.1", "-out", "/tmp/x.md"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, w := range cfg.workloads {
		names = append(names, w.Name)
	}
	if diff := cmp.Diff([]string{"ttl", "small"}, names); diff != "" {
		t.Errorf("workloads (-want +got):\n%s", diff)
	}
	if cfg.jsonPath != "/tmp/x.json" || cfg.repeats != 3 || len(cfg.budgets) != 2 {
		t.Errorf("json %q, repeats %d, budgets %v", cfg.jsonPath, cfg.repeats, cfg.budgets)
	}
	for _, args := range [][]string{{"-suite", "huge"}, {"-workloads", "nope"}, {"-repeats", "0"}} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("parseFlags(%v) succeeded, want an error", args)
		}
	}
}

func TestParseFlagsGoals(t *testing.T) {
	cfg, err := parseFlags([]string{"-suite", "goals"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][2]int{}
	for _, w := range cfg.workloads {
		got[w.Name] = [2]int{w.Jobs, w.Completions}
	}
	// The sizes issue 27 states its goals for.
	want := map[string][2]int{
		"fairness":   {1, 2000},
		"busy":       {1, 2000},
		"nonindexed": {1, 2000},
		"small":      {100, 5},
		"startup":    {1, 0},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("workloads' Jobs and completions (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]budget{{QPS: 100, Burst: 200}}, cfg.budgets); diff != "" {
		t.Errorf("budgets (-want +got):\n%s", diff)
	}
	// An explicit -qps wins, and -scale multiplies the goal sizes.
	cfg, err = parseFlags([]string{"-suite", "goals", "-qps", "50/100", "-scale", "0.5", "-workloads", "nonindexed"})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.workloads) != 1 || cfg.workloads[0].Completions != 1000 || cfg.budgets[0].QPS != 50 {
		t.Errorf("workloads %+v, budgets %v; want one of 1000 completions at QPS 50", cfg.workloads, cfg.budgets)
	}
}

func TestWorkloadScaled(t *testing.T) {
	cases := map[string]struct {
		name  string
		f     float64
		units int
		par   int
	}{
		"one job scales completions": {name: "nonindexed", f: 0.01, units: 100, par: 100},
		"parallelism kept":           {name: "indexed", f: 0.2, units: 2000, par: 500},
		"many jobs scale in number":  {name: "small", f: 0.1, units: 500, par: 5},
		"ttl":                        {name: "ttl", f: 0.001, units: 5},
		"memory counts pods":         {name: "memory", f: 0.1, units: 10000},
		"never below one":            {name: "ttl", f: 0.00001, units: 1},
		"unscaled":                   {name: "long", f: 1, units: 100000, par: 500},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			w, ok := findWorkload(tc.name)
			if !ok {
				t.Fatalf("no workload %q", tc.name)
			}
			s := w.scaled(tc.f)
			if s.units() != tc.units || s.Parallelism != tc.par {
				t.Errorf("units %d parallelism %d, want %d and %d", s.units(), s.Parallelism, tc.units, tc.par)
			}
			if tc.f != 1 && !strings.Contains(s.Title, "scaled") {
				t.Errorf("title %q does not say it is scaled", s.Title)
			}
		})
	}
}

func TestFormatValueAndRatio(t *testing.T) {
	got := []string{
		formatValue(0), formatValue(2034), formatValue(2.034), formatValue(12.34), formatValue(0.1234),
		formatValue(math.NaN()), ratio(1, 2, true, true), ratio(1, 0, true, true), ratio(1, 2, false, true),
	}
	want := []string{"0", "2034", "2.03", "12.3", "0.123", "n/a", "0.50", "n/a", "n/a"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestSummarizeAndTables(t *testing.T) {
	w, _ := findWorkload("small")
	w = w.scaled(0.01) // 10 Jobs x 5 = 50 pods
	run := func(impl string, rep int, wall float64, creates int, failed bool) runResult {
		r := runResult{Workload: w.Name, Impl: impl, Budget: "50/100", Repeat: rep, WallSeconds: wall,
			Requests: map[string]int{"create pods": creates, "watch pods": 1}, CPUSeconds: wall / 10, P50Seconds: 1, P99Seconds: 2}
		if failed {
			r.Error = "boom"
		}
		return r
	}
	runs := []runResult{
		run("jobkeeper", 1, 10, 50, false), run("upstream", 1, 20, 60, false),
		run("upstream", 2, 30, 70, false), run("jobkeeper", 2, 12, 50, false),
		run("jobkeeper", 3, 11, 50, false), run("upstream", 3, 1000, 1, true),
	}
	cfg := &suiteConfig{workloads: []workload{w}, budgets: []budget{{QPS: 50, Burst: 100}}}
	rep := buildReport(meta{}, cfg, runs)
	jk, up := rep.summary(w.Name, "50/100", "jobkeeper"), rep.summary(w.Name, "50/100", "upstream")
	if jk.Runs != 3 || up.Runs != 2 || up.Failed != 1 {
		t.Fatalf("runs: jobkeeper %d, upstream %d (%d failed)", jk.Runs, up.Runs, up.Failed)
	}
	gotFigures := map[string]float64{"jk wall": jk.Figures[figWall], "up wall": up.Figures[figWall], "jk per pod": jk.Figures[figPerUnit+"completed pod"], "up creates": up.Requests["create pods"]}
	wantFigures := map[string]float64{"jk wall": 11, "up wall": 25, "jk per pod": 51.0 / 50, "up creates": 65}
	if diff := cmp.Diff(wantFigures, gotFigures); diff != "" {
		t.Errorf("medians (-want +got):\n%s", diff)
	}
	table := renderTables(rep)
	for _, want := range []string{
		"### 3. 1,000 Jobs of 5 completions",
		"QPS/burst 50/100, median of 3 (jobkeeper) and 2 (upstream) runs; FAILED runs: 0 jobkeeper, 1 upstream",
		"| wall (s) | 11 | 25 | 0.44 |",
		"| create pods | 50 | 65 |",
		"| Job create to Complete p99 (s) | 2 | 2 | 1.00 |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("tables lack %q:\n%s", want, table)
		}
	}
}

func TestReadingSurvivesRegeneration(t *testing.T) {
	rep := report{Meta: meta{Command: "go run ./bench"}}
	page := renderPage(rep, "It is faster.\n\nBecause.", "benchmarks.json")
	if got := extractReading(page); got != "It is faster.\n\nBecause." {
		t.Errorf("reading = %q", got)
	}
	if got := extractReading("# no markers"); got != defaultReading {
		t.Errorf("reading of a page without markers = %q", got)
	}
	if !strings.Contains(page, "[benchmarks.json](benchmarks.json)") {
		t.Error("page does not link the raw results")
	}
}

func TestFairnessGoal(t *testing.T) {
	cases := map[string]struct {
		figures map[string]float64
		want    string
	}{
		"met":          {figures: map[string]float64{figOnePodP99: 0.8}, want: "**met** (jobkeeper 0.800 s)"},
		"at the goal":  {figures: map[string]float64{figOnePodP99: 1.0}, want: "**met** (jobkeeper 1 s)"},
		"not met":      {figures: map[string]float64{figOnePodP99: 2.8}, want: "**not met** (jobkeeper 2.80 s)"},
		"not measured": {figures: map[string]float64{}, want: "**not measured** (jobkeeper n/a s)"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := fairnessGoal(summaryRow{Figures: tc.figures})
			if !strings.HasSuffix(got, tc.want+".") {
				t.Errorf("fairnessGoal = %q, want it to end with %q", got, tc.want)
			}
		})
	}
	w, _ := findWorkload("fairness")
	if w.units() != 2020 || w.controllers() != "job" {
		t.Errorf("fairness: units %d, controllers %q", w.units(), w.controllers())
	}
}
