package nodeagent

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

func TestTransition(t *testing.T) {
	main := containerInfo{name: "c", kind: kindMain, restart: restartPolicy{pod: corev1.RestartPolicyNever}, podRef: "p_ns(u)"}
	onFailure := main
	onFailure.restart.pod = corev1.RestartPolicyOnFailure
	// containerOnFailure is the e2e Job spec's container: restartPolicy
	// OnFailure of its own in a pod whose restartPolicy is Never.
	containerOnFailure := main
	containerOnFailure.restart.container = ptr.To(corev1.ContainerRestartPolicyOnFailure)
	sidecar := containerInfo{name: "s", kind: kindSidecar, restart: restartPolicy{pod: corev1.RestartPolicyNever}, podRef: "p_ns(u)"}
	t1 := t0.Add(time.Minute)
	res := func(code int32) runtime.Result {
		return runtime.Result{ExitCode: code, Reason: runtime.ReasonFor(code), StartedAt: t0, FinishedAt: t1}
	}
	result := func(code int32, id string) *attemptResult { return &attemptResult{Result: res(code), containerID: id} }
	running := containerState{phase: phaseRunning, ran: true, startedAt: t0, containerID: "process://1", started: true, ready: true}
	created := recordEvent(corev1.EventTypeNormal, "Created", "Container created")
	started := recordEvent(corev1.EventTypeNormal, "Started", "Container started")
	cases := map[string]struct {
		// setup
		info  containerInfo
		state containerState
		ev    event
		// want
		want        containerState
		wantActions []action
	}{
		"first start": {
			info: main, state: containerState{}, ev: event{kind: evStarted, at: t0, containerID: "process://1"},
			want:        running,
			wantActions: []action{created, started},
		},
		"start with a startup probe is not started yet": {
			info: main, state: containerState{}, ev: event{kind: evStarted, at: t0, containerID: "process://1", probes: attemptProbes{startup: true}},
			want:        containerState{phase: phaseRunning, ran: true, startedAt: t0, containerID: "process://1", probes: attemptProbes{startup: true}},
			wantActions: []action{created, started, {kind: actProbe}},
		},
		"restart counts an attempt and keeps the last result with its own ID": {
			info:        onFailure,
			state:       containerState{phase: phaseBackOff, ran: true, containerID: "process://1", last: result(1, "process://1"), waitReason: ReasonCrashLoopBackOff},
			ev:          event{kind: evStarted, at: t1, containerID: "process://2"},
			want:        containerState{phase: phaseRunning, ran: true, attempt: 1, startedAt: t1, containerID: "process://2", started: true, ready: true, last: result(1, "process://1")},
			wantActions: []action{created, started},
		},
		"adopted after an agent restart: no event, started and ready as they were": {
			info: main, state: containerState{}, ev: event{kind: evAdopted, at: t0, attempt: 0, containerID: "process://1", probes: attemptProbes{startup: true, readiness: true}, ok: true, ready: true},
			want:        containerState{phase: phaseRunning, ran: true, startedAt: t0, containerID: "process://1", probes: attemptProbes{startup: true, readiness: true}, started: true, ready: true},
			wantActions: []action{{kind: actProbe}},
		},
		"adopted before its startup probe passed: the probe runs again": {
			info: main, state: containerState{}, ev: event{kind: evAdopted, at: t0, attempt: 0, containerID: "process://1", probes: attemptProbes{startup: true}},
			want:        containerState{phase: phaseRunning, ran: true, startedAt: t0, containerID: "process://1", probes: attemptProbes{startup: true}},
			wantActions: []action{{kind: actProbe}},
		},
		"adopted attempt 3 of a restarting container": {
			info:  onFailure,
			state: containerState{phase: phaseBackOff, ran: true, attempt: 2, containerID: "process://1", last: result(1, "process://1")},
			ev:    event{kind: evAdopted, at: t1, attempt: 3, containerID: "process://2"},
			want:  containerState{phase: phaseRunning, ran: true, attempt: 3, startedAt: t1, containerID: "process://2", started: true, ready: true, last: result(1, "process://1")},
		},
		"ended while the agent was away: its exit code decides, under Never final": {
			info: main, state: containerState{}, ev: event{kind: evEndedAway, at: t1, attempt: 0, containerID: "process://1", result: res(3)},
			want: containerState{phase: phaseExited, ran: true, containerID: "process://1", last: result(3, "process://1")},
		},
		"ended while away under OnFailure: restarts": {
			info: onFailure, state: containerState{}, ev: event{kind: evEndedAway, at: t1, attempt: 0, containerID: "process://1", result: res(3)},
			want: containerState{phase: phaseBackOff, ran: true, containerID: "process://1", last: result(3, "process://1"), notBefore: t1, backoff: restartBackoff{delay: BackoffInitial, lastRestart: t1}},
		},
		"exit under Never is final": {
			info: main, state: running, ev: event{kind: evExited, at: t1, result: res(0)},
			want: containerState{phase: phaseExited, ran: true, startedAt: t0, containerID: "process://1", last: result(0, "process://1")},
		},
		"first failure under OnFailure restarts at once": {
			info: onFailure, state: running, ev: event{kind: evExited, at: t1, result: res(1)},
			want: containerState{phase: phaseBackOff, ran: true, startedAt: t0, containerID: "process://1", last: result(1, "process://1"),
				notBefore: t1, backoff: restartBackoff{delay: BackoffInitial, lastRestart: t1}},
		},
		"second failure backs off with CrashLoopBackOff": {
			info:  onFailure,
			state: containerState{phase: phaseRunning, ran: true, attempt: 1, startedAt: t0, containerID: "process://2", started: true, ready: true, last: result(1, "process://1"), backoff: restartBackoff{delay: BackoffInitial, lastRestart: t0}},
			ev:    event{kind: evExited, at: t1, result: res(2)},
			want: containerState{phase: phaseBackOff, ran: true, attempt: 1, startedAt: t0, containerID: "process://2",
				last: result(2, "process://2"), prev: result(1, "process://1"),
				notBefore: t1.Add(BackoffInitial), backoff: restartBackoff{delay: 2 * BackoffInitial, lastRestart: t1.Add(BackoffInitial)},
				waitReason: ReasonCrashLoopBackOff, waitMessage: "back-off 10s restarting failed container=c pod=p_ns(u)"},
			wantActions: []action{recordEvent(corev1.EventTypeWarning, "BackOff", "Back-off restarting failed container c in pod p_ns(u)")},
		},
		"container-level OnFailure in a Never pod restarts a failure": {
			info: containerOnFailure, state: running, ev: event{kind: evExited, at: t1, result: res(1)},
			want: containerState{phase: phaseBackOff, ran: true, startedAt: t0, containerID: "process://1", last: result(1, "process://1"),
				notBefore: t1, backoff: restartBackoff{delay: BackoffInitial, lastRestart: t1}},
		},
		"container-level OnFailure in a Never pod: success is final": {
			info: containerOnFailure, state: running, ev: event{kind: evExited, at: t1, result: res(0)},
			want: containerState{phase: phaseExited, ran: true, startedAt: t0, containerID: "process://1", last: result(0, "process://1")},
		},
		"sidecar restarts after success under Never": {
			info: sidecar, state: containerState{phase: phaseRunning, ran: true, startedAt: t0, containerID: "process://1", started: true, ready: true, initialized: true},
			ev: event{kind: evExited, at: t1, result: res(0)},
			want: containerState{phase: phaseBackOff, ran: true, startedAt: t0, containerID: "process://1", initialized: true, last: result(0, "process://1"),
				notBefore: t1, backoff: restartBackoff{delay: BackoffInitial, lastRestart: t1}},
		},
		"sidecar is initialized once started": {
			info: sidecar, state: containerState{}, ev: event{kind: evStarted, at: t0, containerID: "process://1"},
			want:        containerState{phase: phaseRunning, ran: true, startedAt: t0, containerID: "process://1", started: true, ready: true, initialized: true},
			wantActions: []action{created, started},
		},
		"sidecar is initialized once its probe passes": {
			info: sidecar, state: containerState{phase: phaseRunning, ran: true, startedAt: t0}, ev: event{kind: evProbeSucceeded, at: t1},
			want: containerState{phase: phaseRunning, ran: true, startedAt: t0, started: true, ready: true, initialized: true},
		},
		"failed start is an attempt that ended, started at the epoch": {
			info: main, state: containerState{},
			ev: event{kind: evStartFailed, at: t1, result: runtime.Result{ExitCode: 128, Reason: "StartError", Message: "not found", FinishedAt: t1}},
			want: containerState{phase: phaseExited, ran: true,
				last: &attemptResult{Result: runtime.Result{ExitCode: 128, Reason: "StartError", Message: "not found", StartedAt: failedStartedAt, FinishedAt: t1}}},
			wantActions: []action{recordEvent(corev1.EventTypeWarning, "Failed", "Error: StartError: not found")},
		},
		"configuration error waits and retries": {
			info: main, state: containerState{}, ev: event{kind: evConfigFailed, at: t0, message: `configmap "x" not found`},
			want:        containerState{notBefore: t0.Add(retryConfigError), waitReason: ReasonCreateContainerConfigError, waitMessage: `configmap "x" not found`},
			wantActions: []action{recordEvent(corev1.EventTypeWarning, "Failed", `Error: configmap "x" not found`)},
		},
		"stop a running container": {
			info: main, state: running, ev: event{kind: evStop, at: t1, grace: 30 * time.Second},
			want:        containerState{phase: phaseStopping, ran: true, startedAt: t0, containerID: "process://1", started: true, ready: true},
			wantActions: []action{recordEvent(corev1.EventTypeNormal, "Killing", "Stopping container c"), {kind: actStop, grace: 30 * time.Second}},
		},
		"stopped container exits for good whatever the policy": {
			info: sidecar, state: containerState{phase: phaseStopping, ran: true, startedAt: t0, containerID: "process://1", initialized: true},
			ev:   event{kind: evExited, at: t1, result: res(143)},
			want: containerState{phase: phaseExited, ran: true, startedAt: t0, containerID: "process://1", initialized: true, last: result(143, "process://1")},
		},
		"stop a backing-off container": {
			info: onFailure, state: containerState{phase: phaseBackOff, ran: true, last: result(1, "process://1"), waitReason: ReasonCrashLoopBackOff, waitMessage: "m"},
			ev:   event{kind: evStop, at: t1},
			want: containerState{phase: phaseExited, ran: true, last: result(1, "process://1")},
		},
		"stop an exited container does nothing": {
			info: main, state: containerState{phase: phaseExited, ran: true, last: result(0, "x")}, ev: event{kind: evStop, at: t1},
			want: containerState{phase: phaseExited, ran: true, last: result(0, "x")},
		},
		"failed startup probe kills a sidecar, which restarts": {
			info: sidecar, state: containerState{phase: phaseRunning, ran: true, startedAt: t0, containerID: "process://1"},
			ev:          event{kind: evProbeFailed, at: t1, grace: 30 * time.Second},
			want:        containerState{phase: phaseStopping, ran: true, startedAt: t0, containerID: "process://1", policyDecides: true},
			wantActions: []action{recordEvent(corev1.EventTypeNormal, "Killing", "Init container s failed startup probe"), {kind: actStop, grace: 30 * time.Second}},
		},
		"failed startup probe message says a main container restarts": {
			info: onFailure, state: containerState{phase: phaseRunning, ran: true, startedAt: t0, containerID: "process://1"},
			ev:          event{kind: evProbeFailed, at: t1, grace: time.Second},
			want:        containerState{phase: phaseStopping, ran: true, startedAt: t0, containerID: "process://1", policyDecides: true},
			wantActions: []action{recordEvent(corev1.EventTypeNormal, "Killing", "Container c failed startup probe, will be restarted"), {kind: actStop, grace: time.Second}},
		},
		"exit after a failed probe follows the policy": {
			info: sidecar, state: containerState{phase: phaseStopping, ran: true, startedAt: t0, containerID: "process://1", policyDecides: true},
			ev: event{kind: evExited, at: t1, result: res(143)},
			want: containerState{phase: phaseBackOff, ran: true, startedAt: t0, containerID: "process://1", last: result(143, "process://1"),
				notBefore: t1, backoff: restartBackoff{delay: BackoffInitial, lastRestart: t1}},
		},
		"a killed container that will be restarted restarts even after exit 0": {
			info: onFailure, state: containerState{phase: phaseStopping, ran: true, startedAt: t0, containerID: "process://1", policyDecides: true},
			ev: event{kind: evExited, at: t1, result: res(0)},
			want: containerState{phase: phaseBackOff, ran: true, startedAt: t0, containerID: "process://1", last: result(0, "process://1"),
				notBefore: t1, backoff: restartBackoff{delay: BackoffInitial, lastRestart: t1}},
		},
		"a killed container under Never exits for good": {
			info: main, state: containerState{phase: phaseStopping, ran: true, startedAt: t0, containerID: "process://1", policyDecides: true},
			ev:   event{kind: evExited, at: t1, result: res(137)},
			want: containerState{phase: phaseExited, ran: true, startedAt: t0, containerID: "process://1", last: result(137, "process://1")},
		},
		"failed startup probe message under a container-level OnFailure": {
			info: containerOnFailure, state: containerState{phase: phaseRunning, ran: true, startedAt: t0, containerID: "process://1"},
			ev:          event{kind: evProbeFailed, at: t1, grace: time.Second},
			want:        containerState{phase: phaseStopping, ran: true, startedAt: t0, containerID: "process://1", policyDecides: true},
			wantActions: []action{recordEvent(corev1.EventTypeNormal, "Killing", "Container c failed startup probe, will be restarted"), {kind: actStop, grace: time.Second}},
		},
		"pod stop during a probe kill makes the exit final": {
			info: sidecar, state: containerState{phase: phaseStopping, ran: true, policyDecides: true}, ev: event{kind: evStop, at: t1},
			want: containerState{phase: phaseStopping, ran: true},
		},
		"start with a postStart hook runs the hook before the container is running": {
			info: main, state: containerState{}, ev: event{kind: evStarted, at: t0, containerID: "process://1", hooks: attemptHooks{postStart: true}},
			want:        containerState{phase: phaseStarting, ran: true, startedAt: t0, containerID: "process://1", hooks: attemptHooks{postStart: true}, hook: hookPostStart},
			wantActions: []action{created, started, {kind: actPostStart}},
		},
		"postStart hook success: running, probes begin": {
			info:        main,
			state:       containerState{phase: phaseStarting, ran: true, startedAt: t0, containerID: "process://1", probes: attemptProbes{liveness: true}, hooks: attemptHooks{postStart: true}, hook: hookPostStart, waitReason: ReasonCrashLoopBackOff},
			ev:          event{kind: evHookDone, at: t1, hook: hookPostStart, ok: true},
			want:        containerState{phase: phaseRunning, ran: true, startedAt: t0, containerID: "process://1", started: true, ready: true, probes: attemptProbes{liveness: true}, hooks: attemptHooks{postStart: true}},
			wantActions: []action{{kind: actProbe}},
		},
		"postStart hook failure kills the container with its preStop hook first": {
			info:  main,
			state: containerState{phase: phaseStarting, ran: true, startedAt: t0, containerID: "process://1", hooks: attemptHooks{postStart: true, preStop: true}, hook: hookPostStart},
			ev:    event{kind: evHookDone, at: t1, hook: hookPostStart, message: "Exec lifecycle hook failed", grace: 30 * time.Second},
			want: containerState{phase: phaseStopping, ran: true, startedAt: t0, containerID: "process://1", hooks: attemptHooks{postStart: true, preStop: true}, hook: hookPreStop,
				stopAt: t1, stopGrace: 30 * time.Second, policyDecides: true, postStartFailed: true, postStartMessage: "Exec lifecycle hook failed"},
			wantActions: []action{
				recordEvent(corev1.EventTypeWarning, ReasonFailedPostStartHook, "PostStartHook failed"),
				recordEvent(corev1.EventTypeNormal, "Killing", ReasonFailedPostStartHook),
				{kind: actPreStop, grace: 30 * time.Second},
			},
		},
		"exit after a failed postStart hook: the exit code decides, exit 0 under OnFailure is final": {
			info:  onFailure,
			state: containerState{phase: phaseStopping, ran: true, startedAt: t0, containerID: "process://1", policyDecides: true, postStartFailed: true, postStartMessage: "m"},
			ev:    event{kind: evExited, at: t1, result: res(0)},
			want:  containerState{phase: phaseExited, ran: true, startedAt: t0, containerID: "process://1", last: result(0, "process://1")},
		},
		"exit after a failed postStart hook restarting at once waits with PostStartHookError": {
			info:  onFailure,
			state: containerState{phase: phaseStopping, ran: true, startedAt: t0, containerID: "process://1", policyDecides: true, postStartFailed: true, postStartMessage: "m"},
			ev:    event{kind: evExited, at: t1, result: res(143)},
			want: containerState{phase: phaseBackOff, ran: true, startedAt: t0, containerID: "process://1", last: result(143, "process://1"),
				notBefore: t1, backoff: restartBackoff{delay: BackoffInitial, lastRestart: t1}, waitReason: ReasonPostStartHookError, waitMessage: "m"},
		},
		"exit during the postStart hook: the policy decides as after a crash": {
			info:  main,
			state: containerState{phase: phaseStarting, ran: true, startedAt: t0, containerID: "process://1", hooks: attemptHooks{postStart: true}, hook: hookPostStart},
			ev:    event{kind: evExited, at: t1, result: res(1)},
			want:  containerState{phase: phaseExited, ran: true, startedAt: t0, containerID: "process://1", last: result(1, "process://1")},
		},
		"stop during the postStart hook": {
			info:        main,
			state:       containerState{phase: phaseStarting, ran: true, startedAt: t0, containerID: "process://1", hook: hookPostStart},
			ev:          event{kind: evStop, at: t1, grace: 30 * time.Second},
			want:        containerState{phase: phaseStopping, ran: true, startedAt: t0, containerID: "process://1"},
			wantActions: []action{recordEvent(corev1.EventTypeNormal, "Killing", "Stopping container c"), {kind: actStop, grace: 30 * time.Second}},
		},
		"stop with a preStop hook runs it first": {
			info: main, state: containerState{phase: phaseRunning, ran: true, startedAt: t0, hooks: attemptHooks{preStop: true}},
			ev:          event{kind: evStop, at: t1, grace: 30 * time.Second},
			want:        containerState{phase: phaseStopping, ran: true, startedAt: t0, hooks: attemptHooks{preStop: true}, hook: hookPreStop, stopAt: t1, stopGrace: 30 * time.Second},
			wantActions: []action{recordEvent(corev1.EventTypeNormal, "Killing", "Stopping container c"), {kind: actPreStop, grace: 30 * time.Second}},
		},
		"no preStop hook without a grace period": {
			info: main, state: containerState{phase: phaseRunning, ran: true, startedAt: t0, hooks: attemptHooks{preStop: true}},
			ev:          event{kind: evStop, at: t1},
			want:        containerState{phase: phaseStopping, ran: true, startedAt: t0, hooks: attemptHooks{preStop: true}},
			wantActions: []action{recordEvent(corev1.EventTypeNormal, "Killing", "Stopping container c"), {kind: actStop}},
		},
		"failed liveness probe runs the preStop hook with the probe's grace": {
			info: onFailure, state: containerState{phase: phaseRunning, ran: true, startedAt: t0, hooks: attemptHooks{preStop: true}},
			ev:          event{kind: evProbeFailed, at: t1, probe: probeLiveness, grace: 5 * time.Second},
			want:        containerState{phase: phaseStopping, ran: true, startedAt: t0, hooks: attemptHooks{preStop: true}, hook: hookPreStop, stopAt: t1, stopGrace: 5 * time.Second, policyDecides: true},
			wantActions: []action{recordEvent(corev1.EventTypeNormal, "Killing", "Container c failed liveness probe, will be restarted"), {kind: actPreStop, grace: 5 * time.Second}},
		},
		"preStop hook's whole seconds are deducted from the grace period": {
			info: main, state: containerState{phase: phaseStopping, ran: true, hook: hookPreStop, stopAt: t0, stopGrace: 30 * time.Second},
			ev:          event{kind: evHookDone, at: t0.Add(10*time.Second + 900*time.Millisecond), hook: hookPreStop, ok: true},
			want:        containerState{phase: phaseStopping, ran: true, stopAt: t0, stopGrace: 30 * time.Second},
			wantActions: []action{{kind: actStop, grace: 20 * time.Second}},
		},
		"failed preStop hook: event, then the stop signal with at least 2s": {
			info: main, state: containerState{phase: phaseStopping, ran: true, hook: hookPreStop, stopAt: t0, stopGrace: 3 * time.Second},
			ev:          event{kind: evHookDone, at: t0.Add(2 * time.Second), hook: hookPreStop, message: "m"},
			want:        containerState{phase: phaseStopping, ran: true, stopAt: t0, stopGrace: 3 * time.Second},
			wantActions: []action{recordEvent(corev1.EventTypeWarning, ReasonFailedPreStopHook, "PreStopHook failed"), {kind: actStop, grace: minStopGrace}},
		},
		"preStop hook abandoned at the end of the grace period": {
			info: main, state: containerState{phase: phaseStopping, ran: true, hook: hookPreStop, stopAt: t0, stopGrace: 30 * time.Second},
			ev:          event{kind: evHookDone, at: t0.Add(30 * time.Second), hook: hookPreStop, abandoned: true},
			want:        containerState{phase: phaseStopping, ran: true, stopAt: t0, stopGrace: 30 * time.Second},
			wantActions: []action{{kind: actStop, grace: minStopGrace}},
		},
		"late postStart result after a stop is ignored": {
			info: main, state: containerState{phase: phaseStopping, ran: true, hook: hookPreStop}, ev: event{kind: evHookDone, at: t1, hook: hookPostStart},
			want: containerState{phase: phaseStopping, ran: true, hook: hookPreStop},
		},
		"late probe result is ignored": {
			info: main, state: containerState{phase: phaseExited, ran: true}, ev: event{kind: evProbeSucceeded, at: t1},
			want: containerState{phase: phaseExited, ran: true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, actions := transition(tc.state, tc.info, tc.ev)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(containerState{}, attemptResult{}, restartBackoff{}, attemptProbes{}, attemptHooks{})); diff != "" {
				t.Errorf("state (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantActions, actions, cmp.AllowUnexported(action{})); diff != "" {
				t.Errorf("actions (-want +got):\n%s", diff)
			}
		})
	}
}
