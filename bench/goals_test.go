package main

import (
	"strings"
	"testing"
)

func TestGoalLines(t *testing.T) {
	busy, _ := findWorkload("busy")
	startup, _ := findWorkload("startup")
	row := func(fig string, v float64, reqs map[string]float64) summaryRow {
		return summaryRow{Figures: map[string]float64{fig: v}, Requests: reqs}
	}
	cases := []struct {
		name   string
		w      workload
		jk, up summaryRow
		want   []string
	}{
		{"busy met", busy, row(figRSS, 50, map[string]float64{"watch pods": 2, "list pods": 2}), row(figRSS, 250, map[string]float64{"watch pods": 1, "list pods": 1}),
			[]string{"**met** (0.20x", "jobkeeper list pods 2, watch pods 2; upstream list pods 1, watch pods 1"}},
		{"busy not met", busy, row(figRSS, 100, nil), row(figRSS, 250, nil), []string{"**not met** (0.40x", "jobkeeper none"}},
		{"startup at the bound", startup, row(figFirstPod, 2, nil), row(figFirstPod, 2, nil), []string{"**met** (1.00x"}},
		{"startup not measured", startup, row(figFirstPod, 2, nil), summaryRow{}, []string{"**not measured** (n/a"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.Join(goalLines(tc.w, tc.jk, tc.up), "\n")
			for _, want := range tc.want {
				if !strings.Contains(got, want) {
					t.Errorf("goal lines %q lack %q", got, want)
				}
			}
		})
	}
}

func TestFailedRuns(t *testing.T) {
	if err := failedRuns([]runResult{{Workload: "busy"}}); err != nil {
		t.Errorf("no failed run: got %v", err)
	}
	err := failedRuns([]runResult{{Workload: "busy", Impl: "jobkeeper", Budget: "100/200", Repeat: 1, Error: "3 pods still hold the tracking finalizer"}, {Workload: "busy"}})
	if err == nil || !strings.Contains(err.Error(), "1 run(s) failed") || !strings.Contains(err.Error(), "busy jobkeeper 100/200 #1: 3 pods still hold") {
		t.Errorf("one failed run: got %v", err)
	}
}
