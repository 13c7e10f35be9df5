package lifecycle

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
	waiting := ContainerState{}
	running := ContainerState{Phase: PhaseRunning, Ran: true, Started: true}
	probing := ContainerState{Phase: PhaseRunning, Ran: true}
	succeeded := ContainerState{Phase: PhaseExited, Ran: true, Last: &AttemptResult{Result: runtime.Result{ExitCode: 0}}}
	failed := ContainerState{Phase: PhaseExited, Ran: true, Last: &AttemptResult{Result: runtime.Result{ExitCode: 1}}}
	backingOff := ContainerState{Phase: PhaseBackOff, Ran: true, NotBefore: later, Last: &AttemptResult{Result: runtime.Result{ExitCode: 1}}}
	due := ContainerState{Phase: PhaseBackOff, Ran: true, NotBefore: now, Last: &AttemptResult{Result: runtime.Result{ExitCode: 1}}}
	stopping := ContainerState{Phase: phaseStopping, Ran: true}
	initialized := func(s ContainerState) ContainerState { s.Initialized = true; return s }
	sc, in, mn, eph := KindSidecar, KindInit, KindMain, KindEphemeral
	cases := map[string]struct {
		// setup
		kinds        []ContainerKind
		states       []ContainerState
		stopping     bool
		stopDeadline time.Time
		// want
		wantFinishing bool
		want          PodPlan
	}{
		"a pod stopping for good while it restarts in place stops the containers being reset": {
			kinds: []ContainerKind{sc, mn}, states: []ContainerState{{Phase: phaseStopping, Ran: true, resetting: true}, {Phase: phaseStopping, Ran: true, resetting: true}},
			stopping: true, stopDeadline: later, wantFinishing: true,
			want: PodPlan{Stop: []int{1}, Next: later},
		},
		"first init container first": {
			kinds: []ContainerKind{in, in, mn}, states: []ContainerState{waiting, waiting, waiting},
			want: PodPlan{Start: []int{0}},
		},
		"next init after success": {
			kinds: []ContainerKind{in, in, mn}, states: []ContainerState{succeeded, waiting, waiting},
			want: PodPlan{Start: []int{1}},
		},
		"init backing off holds the rest": {
			kinds: []ContainerKind{in, mn}, states: []ContainerState{backingOff, waiting},
			want: PodPlan{Next: later},
		},
		"sidecar starts in order": {
			kinds: []ContainerKind{in, sc, in, mn}, states: []ContainerState{succeeded, waiting, waiting, waiting},
			want: PodPlan{Start: []int{1}},
		},
		"sidecar waiting for its startup probe holds the rest": {
			kinds: []ContainerKind{sc, mn}, states: []ContainerState{probing, waiting},
			want: PodPlan{},
		},
		"started sidecar lets the next one start": {
			kinds: []ContainerKind{sc, in, mn}, states: []ContainerState{initialized(running), waiting, waiting},
			want: PodPlan{Start: []int{1}},
		},
		"mains start once the inits are through": {
			kinds: []ContainerKind{sc, in, mn, mn}, states: []ContainerState{initialized(running), succeeded, waiting, waiting},
			want: PodPlan{Start: []int{2, 3}},
		},
		"initialized sidecar restarts on its own, even during init": {
			kinds: []ContainerKind{sc, in, mn}, states: []ContainerState{initialized(due), ContainerState{Phase: PhaseRunning, Ran: true}, waiting},
			want: PodPlan{Start: []int{0}},
		},
		"initialized sidecar waits for its back-off": {
			kinds: []ContainerKind{sc, mn}, states: []ContainerState{initialized(backingOff), running},
			want: PodPlan{Next: later},
		},
		"main back-off is a wake-up": {
			kinds: []ContainerKind{mn, mn}, states: []ContainerState{backingOff, running},
			want: PodPlan{Next: later},
		},
		"failed init finishes the pod and stops the sidecar": {
			kinds: []ContainerKind{sc, in, mn}, states: []ContainerState{initialized(running), failed, waiting},
			stopDeadline: later, wantFinishing: true,
			want: PodPlan{Stop: []int{2, 0}},
		},
		"mains done: sidecars stop last first": {
			kinds: []ContainerKind{sc, sc, mn}, states: []ContainerState{initialized(running), initialized(running), succeeded},
			stopDeadline: later, wantFinishing: true,
			want: PodPlan{Stop: []int{1}, Next: later},
		},
		"earlier sidecar waits while a later one stops": {
			kinds: []ContainerKind{sc, sc, mn}, states: []ContainerState{initialized(running), initialized(stopping), failed},
			stopDeadline: later, wantFinishing: true,
			want: PodPlan{Next: later},
		},
		"earlier sidecar stops once the later one exited": {
			kinds: []ContainerKind{sc, sc, mn}, states: []ContainerState{initialized(running), succeeded, failed},
			stopDeadline: later, wantFinishing: true,
			want: PodPlan{Stop: []int{0}},
		},
		"deletion stops mains first, sidecars wait": {
			kinds: []ContainerKind{sc, mn}, states: []ContainerState{initialized(running), running},
			stopping: true, stopDeadline: later, wantFinishing: true,
			want: PodPlan{Stop: []int{1}, Next: later},
		},
		"grace over: every sidecar stops": {
			kinds: []ContainerKind{sc, sc, mn}, states: []ContainerState{initialized(running), initialized(running), stopping},
			stopping: true, stopDeadline: now, wantFinishing: true,
			want: PodPlan{Stop: []int{1, 0}},
		},
		"backing-off sidecar is stopped at once": {
			kinds: []ContainerKind{sc, mn}, states: []ContainerState{initialized(backingOff), running},
			stopping: true, stopDeadline: later, wantFinishing: true,
			want: PodPlan{Stop: []int{1, 0}},
		},
		"ephemeral starts during init": {
			kinds: []ContainerKind{in, mn, eph}, states: []ContainerState{running, waiting, waiting},
			want: PodPlan{Start: []int{2}},
		},
		"exited ephemeral neither holds nor finishes the pod": {
			kinds: []ContainerKind{mn, eph}, states: []ContainerState{running, failed},
			want: PodPlan{},
		},
		"running ephemeral does not keep a finished pod": {
			kinds: []ContainerKind{mn, eph}, states: []ContainerState{succeeded, running},
			stopDeadline: later, wantFinishing: true,
			want: PodPlan{Stop: []int{1}},
		},
		"main restarting under OnFailure keeps the pod going": {
			kinds: []ContainerKind{sc, mn}, states: []ContainerState{initialized(running), due},
			want: PodPlan{Start: []int{1}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			finishing := PodFinishing(tc.kinds, tc.states, tc.stopping)
			if finishing != tc.wantFinishing {
				t.Fatalf("podFinishing = %v, want %v", finishing, tc.wantFinishing)
			}
			got := PlanPod(PlanInput{Kinds: tc.kinds, States: tc.states, Finishing: finishing, StopDeadline: tc.stopDeadline, Now: now})
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(PodPlan{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}
