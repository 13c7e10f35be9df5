package job

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestPodExpectations(t *testing.T) {
	type op struct {
		// expect, observe, forget or step (the clock).
		kind       string
		adds, dels int
		step       time.Duration
	}
	cases := map[string]struct {
		ops           []op
		wantSatisfied bool
	}{
		"nothing expected":           {wantSatisfied: true},
		"creations outstanding":      {ops: []op{{kind: "expect", adds: 2}, {kind: "observe", adds: 1}}, wantSatisfied: false},
		"creations all observed":     {ops: []op{{kind: "expect", adds: 2}, {kind: "observe", adds: 2}}, wantSatisfied: true},
		"deletions outstanding":      {ops: []op{{kind: "expect", dels: 1}}, wantSatisfied: false},
		"over-observed stays met":    {ops: []op{{kind: "expect", dels: 1}, {kind: "observe", dels: 2}}, wantSatisfied: true},
		"expect replaces":            {ops: []op{{kind: "expect", adds: 5}, {kind: "expect", adds: 0}}, wantSatisfied: true},
		"forgotten":                  {ops: []op{{kind: "expect", adds: 5}, {kind: "forget"}}, wantSatisfied: true},
		"lost events expire":         {ops: []op{{kind: "expect", adds: 1}, {kind: "step", step: expectationsTimeout + time.Second}}, wantSatisfied: true},
		"not expired before timeout": {ops: []op{{kind: "expect", adds: 1}, {kind: "step", step: expectationsTimeout}}, wantSatisfied: false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(t0)
			e := newPodExpectations(clk)
			for _, o := range tc.ops {
				switch o.kind {
				case "expect":
					e.expect("k", o.adds, o.dels)
				case "observe":
					e.observe("k", o.adds, o.dels)
				case "forget":
					e.forget("k")
				case "step":
					clk.SetTime(clk.Now().Add(o.step))
				}
			}
			if got := e.satisfied("k"); got != tc.wantSatisfied {
				t.Errorf("satisfied = %v, want %v", got, tc.wantSatisfied)
			}
			if !e.satisfied("other") {
				t.Error("another key is affected")
			}
		})
	}
}

func TestFinalizerExpectations(t *testing.T) {
	cases := map[string]struct {
		expect   []types.UID
		observed []types.UID
		forget   bool
		want     []types.UID
	}{
		"nothing":           {},
		"in flight":         {expect: []types.UID{"a", "b"}, want: []types.UID{"a", "b"}},
		"partly observed":   {expect: []types.UID{"a", "b"}, observed: []types.UID{"a"}, want: []types.UID{"b"}},
		"all observed":      {expect: []types.UID{"a"}, observed: []types.UID{"a"}, want: nil},
		"unknown observed":  {expect: []types.UID{"a"}, observed: []types.UID{"z"}, want: []types.UID{"a"}},
		"forgotten":         {expect: []types.UID{"a"}, forget: true, want: nil},
		"observed, no list": {observed: []types.UID{"a"}, want: nil},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFinalizerExpectations()
			if len(tc.expect) > 0 {
				f.expect("k", tc.expect)
			}
			for _, uid := range tc.observed {
				f.observed("k", uid)
			}
			if tc.forget {
				f.forget("k")
			}
			got := f.expected("k")
			if diff := cmp.Diff(sets.New(tc.want...), got.Union(sets.New[types.UID]())); diff != "" {
				t.Errorf("expected (-want +got):\n%s", diff)
			}
			if _, ok := f.m["k"]; ok && got.Len() == 0 {
				t.Error("an empty entry is kept (leak)")
			}
		})
	}
}
