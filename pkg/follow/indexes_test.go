package follow

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// phasesOf reads an index map written with one letter per index:
// p(ending), r(unning), s(ucceeded), f(ailed).
func phasesOf(s string) []IndexPhase {
	out := make([]IndexPhase, len(s))
	for i, c := range s {
		out[i] = map[rune]IndexPhase{'p': IndexPending, 'r': IndexRunning, 's': IndexSucceeded, 'f': IndexFailed}[c]
	}
	return out
}

func TestIndexesIn(t *testing.T) {
	cases := map[string]struct {
		phases    string
		phase     IndexPhase
		maxRanges int
		want      string
	}{
		"none":                  {phases: "ppp", phase: IndexSucceeded, want: ""},
		"one":                   {phases: "psp", phase: IndexSucceeded, want: "1"},
		"ranges and singles":    {phases: "sssprsspss", phase: IndexSucceeded, want: "0-2,5-6,8-9"},
		"capped":                {phases: "spspspsps", phase: IndexSucceeded, maxRanges: 2, want: "0,2…(+3 ranges)"},
		"cap not reached":       {phases: "spsp", phase: IndexSucceeded, maxRanges: 2, want: "0,2"},
		"all":                   {phases: "rrrr", phase: IndexRunning, want: "0-3"},
		"last index on its own": {phases: "ppf", phase: IndexFailed, want: "2"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := IndexesIn(phasesOf(tc.phases), tc.phase, tc.maxRanges); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestSummarizeIndexes(t *testing.T) {
	got := SummarizeIndexes(phasesOf("ssfrrpps"), 0)
	if want := "failed 2; running 3-4; pending 5-6; succeeded 0-1,7"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := CountIndexes(phasesOf("ssfrrpps")); got != [4]int{2, 2, 3, 1} {
		t.Errorf("counts %v", got)
	}
}

func TestCells(t *testing.T) {
	cases := map[string]struct {
		phases  string
		n       int
		want    string
		wantPer int
	}{
		"fits":                        {phases: "sprf", n: 4, want: "sprf", wantPer: 1},
		"no limit":                    {phases: "sprf", n: 0, want: "sprf", wantPer: 1},
		"failed wins":                 {phases: "ssfsrrpp", n: 4, want: "sfrp", wantPer: 2},
		"succeeded only when all are": {phases: "sssspsss", n: 2, want: "sp", wantPer: 4},
		"last cell shorter":           {phases: "sssss", n: 2, want: "ss", wantPer: 3},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, per := Cells(phasesOf(tc.phases), tc.n)
			if diff := cmp.Diff(phasesOf(tc.want), got); diff != "" || per != tc.wantPer {
				t.Errorf("per %d (want %d); cells (-want +got):\n%s", per, tc.wantPer, diff)
			}
		})
	}
}
