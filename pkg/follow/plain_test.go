package follow

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestPlain feeds a Plain sink the States of an Indexed Job's life, stepping
// a fake clock, and checks every line it prints.
func TestPlain(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(t0)
	var out strings.Builder
	p := NewPlain(&out, clock)
	s := State{Namespace: "demo", Name: "big", Indexed: true, Completions: 4, Parallelism: 2, Indexes: phasesOf("pppp")}
	step := func(d time.Duration, change func(*State)) {
		clock.SetTime(clock.Now().Add(d))
		change(&s)
		p.State(s)
	}
	step(0, func(*State) {})
	step(time.Second, func(s *State) {
		s.Active, s.Elapsed, s.Indexes = 2, time.Second, phasesOf("rrpp")
	})
	step(time.Second, func(s *State) { s.Elapsed = 2 * time.Second }) // nothing new: no line
	step(time.Second, func(s *State) {
		s.Ready, s.Elapsed = 2, 3*time.Second
		s.Warnings = []Warning{{UID: "w1", Object: "pod/big-1-x", Index: "1", Reason: "BackOff", Message: "Back-off\nrestarting", Count: 1}}
	})
	step(time.Second, func(s *State) { s.Warnings[0].Count = 3 })
	step(time.Second, func(s *State) {
		s.Suspended = true
		s.Conditions = []Condition{{Type: "Suspended", Status: "True", Reason: "JobSuspended", Message: "Job suspended"}}
	})
	step(time.Second, func(s *State) {
		s.Suspended = false
		s.Conditions = []Condition{{Type: "Suspended", Status: "False", Reason: "JobResumed", Message: "Job resumed"}}
	})
	p.Log(Line{Prefix: "[index 0]", Text: "hello from 0"})
	step(20*time.Second, func(s *State) {
		s.Active, s.Ready, s.Succeeded, s.Elapsed, s.Indexes = 0, 0, 4, 25*time.Second, phasesOf("ssss")
		s.Conditions = append(s.Conditions, Condition{Type: "Complete", Status: "True", Reason: "CompletionsReached"})
		s.Outcome = Complete
	})
	step(time.Second, func(s *State) { s.Active = 9 }) // after the end: nothing
	want := `2026-01-02T15:04:05Z job demo/big: Indexed, 4 completions, parallelism 2
2026-01-02T15:04:05Z progress: succeeded 0/4, failed 0, active 0, ready 0, terminating 0 (elapsed 0s)
2026-01-02T15:04:05Z indexes: pending 0-3
2026-01-02T15:04:06Z progress: succeeded 0/4, failed 0, active 2, ready 0, terminating 0 (elapsed 1s)
2026-01-02T15:04:06Z indexes: running 0-1; pending 2-3
2026-01-02T15:04:08Z progress: succeeded 0/4, failed 0, active 2, ready 2, terminating 0 (elapsed 3s)
2026-01-02T15:04:08Z warning pod/big-1-x [index 1] BackOff: Back-off restarting
2026-01-02T15:04:09Z warning pod/big-1-x [index 1] BackOff: Back-off restarting (x3)
2026-01-02T15:04:10Z job suspended (spec.suspend=true): following on
2026-01-02T15:04:10Z condition Suspended=True (JobSuspended): Job suspended
2026-01-02T15:04:11Z job resumed (spec.suspend=false)
2026-01-02T15:04:11Z condition Suspended=False (JobResumed): Job resumed
[index 0] hello from 0
2026-01-02T15:04:31Z progress: succeeded 4/4, failed 0, active 0, ready 0, terminating 0 (elapsed 25s)
2026-01-02T15:04:31Z indexes: succeeded 0-3
2026-01-02T15:04:31Z condition Complete=True (CompletionsReached)
2026-01-02T15:04:31Z job demo/big complete: 4/4 succeeded in 25s
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
}

func TestPlainResultLines(t *testing.T) {
	cases := map[string]struct {
		state State
		want  string
	}{
		"failed": {
			state: State{Namespace: "ns", Name: "j", Completions: 1, Failed: 3, Elapsed: 12 * time.Second, Outcome: Failed,
				Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit"},
			want: "job ns/j failed after 12s: BackoffLimitExceeded: Job has reached the specified backoff limit",
		},
		"deleted":             {state: State{Namespace: "ns", Name: "j", Outcome: Deleted}, want: "job ns/j was deleted before it finished"},
		"work queue complete": {state: State{Namespace: "ns", Name: "j", WorkQueue: true, Succeeded: 2, Elapsed: 1500 * time.Millisecond, Outcome: Complete}, want: "job ns/j complete: 2 succeeded in 1.5s"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var out strings.Builder
			NewPlain(&out, clocktesting.NewFakePassiveClock(t0)).State(tc.state)
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if got := strings.TrimPrefix(lines[len(lines)-1], "2026-01-02T15:04:05Z "); got != tc.want {
				t.Errorf("last line %q, want %q", got, tc.want)
			}
		})
	}
}
