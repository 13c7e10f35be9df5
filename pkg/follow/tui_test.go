package follow

import (
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/google/go-cmp/cmp"
	"github.com/muesli/termenv"
)

func init() {
	// Plain glyphs, no colour codes, whatever terminal runs the tests.
	lipgloss.SetColorProfile(termenv.Ascii)
}

func TestRenderView(t *testing.T) {
	s := State{
		Namespace: "demo", Name: "big", Indexed: true, Completions: 12, Parallelism: 4,
		Succeeded: 6, Active: 4, Ready: 3, Failed: 1, Started: t0,
		Indexes:    phasesOf("ssssssrrrfpp"),
		Conditions: []Condition{{Type: "Suspended", Status: "False", Reason: "JobResumed", Message: "Job resumed"}},
		Warnings:   []Warning{{Object: "pod/big-9-x", Index: "9", Reason: "BackOff", Message: "Back-off", Count: 2, Last: t0}},
	}
	got := renderView(s, t0.Add(65*time.Second), 60, newTUIModel(t0).bar, false)
	for _, want := range []string{
		"RUNNING job demo/big  Indexed, 12 completions, parallelism 4",
		" 6/12  50%",
		"active 4  ready 3  terminating 0  failed 1  elapsed 1m5s",
		"█ succeeded 6  ▒ running 3  · pending 2  ✗ failed 1",
		"██████▒▒▒✗··\n",
		"  Suspended=False (JobResumed): Job resumed",
		"pod/big-9-x [index 9] BackOff: Back-off (x2)",
		"Ctrl-C or q: stop following",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("view lacks %q:\n%s", want, got)
		}
	}

	s.Outcome, s.Reason, s.Message, s.Elapsed = Failed, "BackoffLimitExceeded", "Job has reached the specified backoff limit", 9*time.Second
	s.FailedPods, s.MoreFailedPods = []FailedPod{{Name: "big-9-x", Index: "9", Container: "main", ExitCode: 137, Reason: "OOMKilled"}}, 2
	got = renderView(s, t0.Add(time.Hour), 60, newTUIModel(t0).bar, false)
	for _, want := range []string{"FAILED job demo/big", "elapsed 9s",
		"failed pods\n  pod/big-9-x [index 9]: container main exit code 137\n    (OOMKilled)\n  and 2 more failed pods\n",
		"job demo/big failed after 9s: BackoffLimitExceeded: Job has reached the specified backoff limit"} {
		if !strings.Contains(got, want) {
			t.Errorf("view of the failed Job lacks %q:\n%s", want, got)
		}
	}
}

func TestRenderViewPercentRoundsDown(t *testing.T) {
	s := State{Namespace: "d", Name: "j", Completions: 200, Succeeded: 199}
	if got := renderView(s, t0, 80, newTUIModel(t0).bar, false); !strings.Contains(got, " 199/200  99%") {
		t.Errorf("199 of 200 is not shown as 99%%:\n%s", got)
	}
}

func TestRenderViewBigIndexMap(t *testing.T) {
	s := State{Namespace: "d", Name: "huge", Indexed: true, Completions: 100000, Indexes: make([]IndexPhase, 100000)}
	got := renderView(s, t0, 80, newTUIModel(t0).bar, false)
	// 100,000 indexes in at most 8 rows of 70 cells: 179 a cell, 559 cells.
	if !strings.Contains(got, "(a cell: 179 indexes)") {
		t.Errorf("view lacks the cell size:\n%s", got)
	}
	var rows []int
	for _, l := range strings.Split(got, "\n") {
		if l != "" && strings.Trim(l, "·") == "" {
			rows = append(rows, utf8.RuneCountInString(l))
		}
	}
	if want := []int{70, 70, 70, 70, 70, 70, 70, 69}; !slices.Equal(rows, want) {
		t.Errorf("index map rows %v, want %v:\n%s", rows, want, got)
	}
}

func TestTUIModel(t *testing.T) {
	var m tea.Model = newTUIModel(t0)
	if got := m.View(); !strings.Contains(got, "waiting for the Job") {
		t.Errorf("view before any State: %q", got)
	}
	if done, _ := m.Update(finishMsg{}); done.View() != "" {
		t.Errorf("view of a follow that ended before any State: %q", done.View())
	}
	m, _ = m.Update(stateMsg(State{Namespace: "ns", Name: "j", Completions: 1}))
	m, _ = m.Update(tea.WindowSizeMsg{Width: 100, Height: 40})
	if got := m.View(); !strings.Contains(got, "job ns/j") {
		t.Errorf("view after a State: %q", got)
	}
	if _, cmd := m.Update(finishMsg{}); cmd == nil || cmd() != tea.Quit() {
		t.Error("finishing does not quit")
	}
	m, cmd := m.Update(tea.KeyMsg{Type: tea.KeyCtrlC})
	if cmd == nil || cmd() != tea.Quit() || !m.(tuiModel).stopped {
		t.Error("Ctrl-C does not stop following")
	}
	if got := m.View(); !strings.Contains(got, "stopped following") {
		t.Errorf("view after Ctrl-C: %q", got)
	}
}

func TestWrap(t *testing.T) {
	cases := map[string]struct {
		text  string
		width int
		want  []string
	}{
		"fits":           {text: "pod/a: exit code 1", width: 20, want: []string{"pod/a: exit code 1"}},
		"at spaces":      {text: "pod/a: container main exit code 1", width: 15, want: []string{"pod/a:", "container main", "exit code 1"}},
		"a long word":    {text: "ab abcdefghij c", width: 4, want: []string{"ab", "abcd", "efgh", "ij c"}},
		"wide runes":     {text: "ééé ü", width: 3, want: []string{"ééé", "ü"}},
		"empty":          {text: "", width: 10},
		"width too thin": {text: "ab", width: 0, want: []string{"a", "b"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, wrap(tc.text, tc.width)); diff != "" {
				t.Errorf("lines (-want +got):\n%s", diff)
			}
		})
	}
}
