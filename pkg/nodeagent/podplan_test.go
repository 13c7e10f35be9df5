package nodeagent

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

func TestPlanPod(t *testing.T) {
	now := t0.Add(time.Minute)
	later := now.Add(10 * time.Second)
	waiting := containerState{}
	running := containerState{phase: phaseRunning, ran: true, started: true}
	probing := containerState{phase: phaseRunning, ran: true}
	succeeded := containerState{phase: phaseExited, ran: true, last: &attemptResult{Result: runtime.Result{ExitCode: 0}}}
	failed := containerState{phase: phaseExited, ran: true, last: &attemptResult{Result: runtime.Result{ExitCode: 1}}}
	backingOff := containerState{phase: phaseBackOff, ran: true, notBefore: later, last: &attemptResult{Result: runtime.Result{ExitCode: 1}}}
	due := containerState{phase: phaseBackOff, ran: true, notBefore: now, last: &attemptResult{Result: runtime.Result{ExitCode: 1}}}
	stopping := containerState{phase: phaseStopping, ran: true}
	initialized := func(s containerState) containerState { s.initialized = true; return s }
	sc, in, mn, eph := kindSidecar, kindInit, kindMain, kindEphemeral
	cases := map[string]struct {
		// setup
		kinds        []containerKind
		states       []containerState
		stopping     bool
		stopDeadline time.Time
		// want
		wantFinishing bool
		want          podPlan
	}{
		"first init container first": {
			kinds: []containerKind{in, in, mn}, states: []containerState{waiting, waiting, waiting},
			want: podPlan{start: []int{0}},
		},
		"next init after success": {
			kinds: []containerKind{in, in, mn}, states: []containerState{succeeded, waiting, waiting},
			want: podPlan{start: []int{1}},
		},
		"init backing off holds the rest": {
			kinds: []containerKind{in, mn}, states: []containerState{backingOff, waiting},
			want: podPlan{next: later},
		},
		"sidecar starts in order": {
			kinds: []containerKind{in, sc, in, mn}, states: []containerState{succeeded, waiting, waiting, waiting},
			want: podPlan{start: []int{1}},
		},
		"sidecar waiting for its startup probe holds the rest": {
			kinds: []containerKind{sc, mn}, states: []containerState{probing, waiting},
			want: podPlan{},
		},
		"started sidecar lets the next one start": {
			kinds: []containerKind{sc, in, mn}, states: []containerState{initialized(running), waiting, waiting},
			want: podPlan{start: []int{1}},
		},
		"mains start once the inits are through": {
			kinds: []containerKind{sc, in, mn, mn}, states: []containerState{initialized(running), succeeded, waiting, waiting},
			want: podPlan{start: []int{2, 3}},
		},
		"initialized sidecar restarts on its own, even during init": {
			kinds: []containerKind{sc, in, mn}, states: []containerState{initialized(due), containerState{phase: phaseRunning, ran: true}, waiting},
			want: podPlan{start: []int{0}},
		},
		"initialized sidecar waits for its back-off": {
			kinds: []containerKind{sc, mn}, states: []containerState{initialized(backingOff), running},
			want: podPlan{next: later},
		},
		"main back-off is a wake-up": {
			kinds: []containerKind{mn, mn}, states: []containerState{backingOff, running},
			want: podPlan{next: later},
		},
		"failed init finishes the pod and stops the sidecar": {
			kinds: []containerKind{sc, in, mn}, states: []containerState{initialized(running), failed, waiting},
			stopDeadline: later, wantFinishing: true,
			want: podPlan{stop: []int{2, 0}},
		},
		"mains done: sidecars stop last first": {
			kinds: []containerKind{sc, sc, mn}, states: []containerState{initialized(running), initialized(running), succeeded},
			stopDeadline: later, wantFinishing: true,
			want: podPlan{stop: []int{1}, next: later},
		},
		"earlier sidecar waits while a later one stops": {
			kinds: []containerKind{sc, sc, mn}, states: []containerState{initialized(running), initialized(stopping), failed},
			stopDeadline: later, wantFinishing: true,
			want: podPlan{next: later},
		},
		"earlier sidecar stops once the later one exited": {
			kinds: []containerKind{sc, sc, mn}, states: []containerState{initialized(running), succeeded, failed},
			stopDeadline: later, wantFinishing: true,
			want: podPlan{stop: []int{0}},
		},
		"deletion stops mains first, sidecars wait": {
			kinds: []containerKind{sc, mn}, states: []containerState{initialized(running), running},
			stopping: true, stopDeadline: later, wantFinishing: true,
			want: podPlan{stop: []int{1}, next: later},
		},
		"grace over: every sidecar stops": {
			kinds: []containerKind{sc, sc, mn}, states: []containerState{initialized(running), initialized(running), stopping},
			stopping: true, stopDeadline: now, wantFinishing: true,
			want: podPlan{stop: []int{1, 0}},
		},
		"backing-off sidecar is stopped at once": {
			kinds: []containerKind{sc, mn}, states: []containerState{initialized(backingOff), running},
			stopping: true, stopDeadline: later, wantFinishing: true,
			want: podPlan{stop: []int{1, 0}},
		},
		"ephemeral starts during init": {
			kinds: []containerKind{in, mn, eph}, states: []containerState{running, waiting, waiting},
			want: podPlan{start: []int{2}},
		},
		"exited ephemeral neither holds nor finishes the pod": {
			kinds: []containerKind{mn, eph}, states: []containerState{running, failed},
			want: podPlan{},
		},
		"running ephemeral does not keep a finished pod": {
			kinds: []containerKind{mn, eph}, states: []containerState{succeeded, running},
			stopDeadline: later, wantFinishing: true,
			want: podPlan{stop: []int{1}},
		},
		"main restarting under OnFailure keeps the pod going": {
			kinds: []containerKind{sc, mn}, states: []containerState{initialized(running), due},
			want: podPlan{start: []int{1}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			finishing := podFinishing(tc.kinds, tc.states, tc.stopping)
			if finishing != tc.wantFinishing {
				t.Fatalf("podFinishing = %v, want %v", finishing, tc.wantFinishing)
			}
			got := planPod(planInput{kinds: tc.kinds, states: tc.states, finishing: finishing, stopDeadline: tc.stopDeadline, now: now})
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(podPlan{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}
