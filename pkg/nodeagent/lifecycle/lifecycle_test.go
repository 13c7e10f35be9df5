package lifecycle

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

func TestTransition(t *testing.T) {
	main := ContainerInfo{Name: "c", Kind: KindMain, Restart: RestartPolicy{Pod: corev1.RestartPolicyNever}, PodRef: "p_ns(u)"}
	onFailure := main
	onFailure.Restart.Pod = corev1.RestartPolicyOnFailure
	// containerOnFailure is the e2e Job spec's container: restartPolicy
	// OnFailure of its own in a pod whose restartPolicy is Never.
	containerOnFailure := main
	containerOnFailure.Restart.Container = ptr.To(corev1.ContainerRestartPolicyOnFailure)
	sidecar := ContainerInfo{Name: "s", Kind: KindSidecar, Restart: RestartPolicy{Pod: corev1.RestartPolicyNever}, PodRef: "p_ns(u)"}
	// restartAll is the e2e specs' source container: restartPolicy Never
	// of its own, RestartAllContainers on exit code 42.
	restartAll := main
	restartAll.Restart.Container = ptr.To(corev1.ContainerRestartPolicyNever)
	restartAll.Restart.Rules = []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestartAllContainers,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
	t1 := t0.Add(time.Minute)
	res := func(code int32) runtime.Result {
		return runtime.Result{ExitCode: code, Reason: runtime.ReasonFor(code), StartedAt: t0, FinishedAt: t1}
	}
	result := func(code int32, id string) *AttemptResult { return &AttemptResult{Result: res(code), ContainerID: id} }
	running := ContainerState{Phase: PhaseRunning, Ran: true, StartedAt: t0, ContainerID: "process://1", Started: true, Ready: true}
	withPreStop := running
	withPreStop.hooks = AttemptHooks{PreStop: true}
	created := recordEvent(corev1.EventTypeNormal, "Created", "Container created")
	started := recordEvent(corev1.EventTypeNormal, "Started", "Container started")
	cases := map[string]struct {
		// setup
		info  ContainerInfo
		state ContainerState
		ev    Event
		// want
		want        ContainerState
		wantActions []Action
	}{
		// RestartAllContainers (KEP-5532), as the kubelet's reset.
		"exit matching a RestartAllContainers rule asks for the pod's restart, overriding Never": {
			info: restartAll, state: running, ev: Event{Kind: EvExited, At: t1, Result: res(42)},
			want: ContainerState{Phase: PhaseBackOff, Ran: true, StartedAt: t0, ContainerID: "process://1", Last: result(42, "process://1"), NotBefore: t1, RestartAll: true,
				backoff: RestartBackoff{delay: BackoffInitial, lastRestart: t1}},
		},
		"a second restart all in a row waits out the back-off": {
			info: restartAll, state: func() ContainerState {
				s := running
				s.backoff = RestartBackoff{delay: BackoffInitial, lastRestart: t0}
				return s
			}(),
			ev: Event{Kind: EvExited, At: t1, Result: res(42)},
			want: ContainerState{Phase: PhaseBackOff, Ran: true, StartedAt: t0, ContainerID: "process://1", Last: result(42, "process://1"), NotBefore: t1.Add(BackoffInitial), RestartAll: true,
				backoff: RestartBackoff{delay: 2 * BackoffInitial, lastRestart: t1.Add(BackoffInitial)}},
		},
		"restart all: the back-off of the container that asked holds": {
			info:  restartAll,
			state: ContainerState{Phase: PhaseBackOff, Ran: true, Last: result(42, "process://1"), NotBefore: t1.Add(BackoffInitial), RestartAll: true},
			ev:    Event{Kind: EvRestartAll, At: t1},
			want: ContainerState{Phase: PhaseWaiting, Ran: true, restarted: true, NotBefore: t1.Add(BackoffInitial),
				Last:       &AttemptResult{Result: runtime.Result{ExitCode: 137, Reason: ReasonRestartingAllContainers, Message: MessageRestartingAllContainers}},
				WaitReason: ReasonRestartingAllContainers, WaitMessage: MessageRestartingAllContainers},
		},
		"restart all during a preStop hook: killed now, the hook abandoned": {
			info: main, state: ContainerState{Phase: phaseStopping, Ran: true, Hook: HookPreStop, stopAt: t0, stopGrace: 30 * time.Second},
			ev:          Event{Kind: EvRestartAll, At: t1},
			want:        ContainerState{Phase: phaseStopping, Ran: true, resetting: true, stopAt: t0, stopGrace: 30 * time.Second},
			wantActions: []Action{{Kind: ActStop, Grace: MinStopGrace}},
		},
		"exit matching no rule: the container's own Never decides": {
			info: restartAll, state: running, ev: Event{Kind: EvExited, At: t1, Result: res(1)},
			want: ContainerState{Phase: PhaseExited, Ran: true, StartedAt: t0, ContainerID: "process://1", Last: result(1, "process://1")},
		},
		"restart all: a running container is killed at once, no preStop hook": {
			info: main, state: withPreStop, ev: Event{Kind: EvRestartAll, At: t1},
			want:        ContainerState{Phase: phaseStopping, Ran: true, StartedAt: t0, ContainerID: "process://1", Started: true, Ready: true, hooks: AttemptHooks{PreStop: true}, resetting: true},
			wantActions: []Action{recordEvent(corev1.EventTypeNormal, "Killing", "killing"), {Kind: ActStop, Grace: MinStopGrace}},
		},
		"restart all: its exit resets it, the restart counted, the real exit hidden": {
			info: main, state: ContainerState{Phase: phaseStopping, Ran: true, Attempt: 2, StartedAt: t0, ContainerID: "process://1", resetting: true, Initialized: true},
			ev: Event{Kind: EvExited, At: t1, Result: res(143)},
			want: ContainerState{Phase: PhaseWaiting, Ran: true, Attempt: 2, StartedAt: t0, ContainerID: "process://1", restarted: true, Prev: nil,
				Last:       &AttemptResult{Result: runtime.Result{ExitCode: 137, Reason: ReasonRestartingAllContainers, Message: MessageRestartingAllContainers}},
				WaitReason: ReasonRestartingAllContainers, WaitMessage: MessageRestartingAllContainers},
		},
		"restart all: the trigger itself resets at once": {
			info:  restartAll,
			state: ContainerState{Phase: PhaseBackOff, Ran: true, ContainerID: "process://1", Last: result(42, "process://1"), NotBefore: t1, RestartAll: true},
			ev:    Event{Kind: EvRestartAll, At: t1},
			want: ContainerState{Phase: PhaseWaiting, Ran: true, ContainerID: "process://1", restarted: true, NotBefore: t1,
				Last:       &AttemptResult{Result: runtime.Result{ExitCode: 137, Reason: ReasonRestartingAllContainers, Message: MessageRestartingAllContainers}},
				WaitReason: ReasonRestartingAllContainers, WaitMessage: MessageRestartingAllContainers},
		},
		"restart all: a container that never ran waits as before": {
			info: main, state: ContainerState{Phase: PhaseWaiting, WaitReason: ReasonPodInitializing}, ev: Event{Kind: EvRestartAll, At: t1},
			want: ContainerState{Phase: PhaseWaiting, WaitReason: ReasonPodInitializing},
		},
		"restart all: a sidecar must start again before the containers after it": {
			info: sidecar, state: ContainerState{Phase: PhaseExited, Ran: true, Initialized: true, Last: result(0, "process://1")}, ev: Event{Kind: EvRestartAll, At: t1},
			want: ContainerState{Phase: PhaseWaiting, Ran: true, restarted: true,
				Last:       &AttemptResult{Result: runtime.Result{ExitCode: 137, Reason: ReasonRestartingAllContainers, Message: MessageRestartingAllContainers}},
				WaitReason: ReasonRestartingAllContainers, WaitMessage: MessageRestartingAllContainers},
		},
		"restart all: the next start takes the next attempt number": {
			info: main, state: ContainerState{Phase: PhaseWaiting, Ran: true, Attempt: 2, restarted: true, WaitReason: ReasonRestartingAllContainers}, ev: Event{Kind: EvStarted, At: t1, ContainerID: "process://2"},
			want:        ContainerState{Phase: PhaseRunning, Ran: true, Attempt: 3, StartedAt: t1, ContainerID: "process://2", Started: true, Ready: true},
			wantActions: []Action{created, started},
		},
		"restart all asked while the pod stops for good: it ends": {
			info: restartAll, state: ContainerState{Phase: PhaseBackOff, Ran: true, Last: result(42, "process://1"), RestartAll: true}, ev: Event{Kind: EvStop, At: t1},
			want: ContainerState{Phase: PhaseExited, Ran: true, Last: result(42, "process://1")},
		},
		"restart all: the pod stopping for good meanwhile ends it": {
			info: main, state: ContainerState{Phase: phaseStopping, Ran: true, resetting: true}, ev: Event{Kind: EvStop, At: t1, Grace: time.Second},
			want: ContainerState{Phase: phaseStopping, Ran: true},
		},
		"first start": {
			info: main, state: ContainerState{}, ev: Event{Kind: EvStarted, At: t0, ContainerID: "process://1"},
			want:        running,
			wantActions: []Action{created, started},
		},
		"start with a startup probe is not started yet": {
			info: main, state: ContainerState{}, ev: Event{Kind: EvStarted, At: t0, ContainerID: "process://1", Probes: AttemptProbes{Startup: true}},
			want:        ContainerState{Phase: PhaseRunning, Ran: true, StartedAt: t0, ContainerID: "process://1", Probes: AttemptProbes{Startup: true}},
			wantActions: []Action{created, started, {Kind: ActProbe}},
		},
		"restart counts an attempt and keeps the last result with its own ID": {
			info:        onFailure,
			state:       ContainerState{Phase: PhaseBackOff, Ran: true, ContainerID: "process://1", Last: result(1, "process://1"), WaitReason: ReasonCrashLoopBackOff},
			ev:          Event{Kind: EvStarted, At: t1, ContainerID: "process://2"},
			want:        ContainerState{Phase: PhaseRunning, Ran: true, Attempt: 1, StartedAt: t1, ContainerID: "process://2", Started: true, Ready: true, Last: result(1, "process://1")},
			wantActions: []Action{created, started},
		},
		"adopted after an agent restart: no event, started and ready as they were": {
			info: main, state: ContainerState{}, ev: Event{Kind: EvAdopted, At: t0, Attempt: 0, ContainerID: "process://1", Probes: AttemptProbes{Startup: true, Readiness: true}, OK: true, Ready: true},
			want:        ContainerState{Phase: PhaseRunning, Ran: true, StartedAt: t0, ContainerID: "process://1", Probes: AttemptProbes{Startup: true, Readiness: true}, Started: true, Ready: true},
			wantActions: []Action{{Kind: ActProbe}},
		},
		"adopted before its startup probe passed: the probe runs again": {
			info: main, state: ContainerState{}, ev: Event{Kind: EvAdopted, At: t0, Attempt: 0, ContainerID: "process://1", Probes: AttemptProbes{Startup: true}},
			want:        ContainerState{Phase: PhaseRunning, Ran: true, StartedAt: t0, ContainerID: "process://1", Probes: AttemptProbes{Startup: true}},
			wantActions: []Action{{Kind: ActProbe}},
		},
		"adopted attempt 3 of a restarting container": {
			info:  onFailure,
			state: ContainerState{Phase: PhaseBackOff, Ran: true, Attempt: 2, ContainerID: "process://1", Last: result(1, "process://1")},
			ev:    Event{Kind: EvAdopted, At: t1, Attempt: 3, ContainerID: "process://2"},
			want:  ContainerState{Phase: PhaseRunning, Ran: true, Attempt: 3, StartedAt: t1, ContainerID: "process://2", Started: true, Ready: true, Last: result(1, "process://1")},
		},
		"ended while the agent was away: its exit code decides, under Never final": {
			info: main, state: ContainerState{}, ev: Event{Kind: EvEndedAway, At: t1, Attempt: 0, ContainerID: "process://1", Result: res(3)},
			want: ContainerState{Phase: PhaseExited, Ran: true, ContainerID: "process://1", Last: result(3, "process://1")},
		},
		"ended while away under OnFailure: restarts": {
			info: onFailure, state: ContainerState{}, ev: Event{Kind: EvEndedAway, At: t1, Attempt: 0, ContainerID: "process://1", Result: res(3)},
			want: ContainerState{Phase: PhaseBackOff, Ran: true, ContainerID: "process://1", Last: result(3, "process://1"), NotBefore: t1, backoff: RestartBackoff{delay: BackoffInitial, lastRestart: t1}},
		},
		"exit under Never is final": {
			info: main, state: running, ev: Event{Kind: EvExited, At: t1, Result: res(0)},
			want: ContainerState{Phase: PhaseExited, Ran: true, StartedAt: t0, ContainerID: "process://1", Last: result(0, "process://1")},
		},
		"first failure under OnFailure restarts at once": {
			info: onFailure, state: running, ev: Event{Kind: EvExited, At: t1, Result: res(1)},
			want: ContainerState{Phase: PhaseBackOff, Ran: true, StartedAt: t0, ContainerID: "process://1", Last: result(1, "process://1"),
				NotBefore: t1, backoff: RestartBackoff{delay: BackoffInitial, lastRestart: t1}},
		},
		"second failure backs off with CrashLoopBackOff": {
			info:  onFailure,
			state: ContainerState{Phase: PhaseRunning, Ran: true, Attempt: 1, StartedAt: t0, ContainerID: "process://2", Started: true, Ready: true, Last: result(1, "process://1"), backoff: RestartBackoff{delay: BackoffInitial, lastRestart: t0}},
			ev:    Event{Kind: EvExited, At: t1, Result: res(2)},
			want: ContainerState{Phase: PhaseBackOff, Ran: true, Attempt: 1, StartedAt: t0, ContainerID: "process://2",
				Last: result(2, "process://2"), Prev: result(1, "process://1"),
				NotBefore: t1.Add(BackoffInitial), backoff: RestartBackoff{delay: 2 * BackoffInitial, lastRestart: t1.Add(BackoffInitial)},
				WaitReason: ReasonCrashLoopBackOff, WaitMessage: "back-off 10s restarting failed container=c pod=p_ns(u)"},
			wantActions: []Action{recordEvent(corev1.EventTypeWarning, "BackOff", "Back-off restarting failed container c in pod p_ns(u)")},
		},
		"container-level OnFailure in a Never pod restarts a failure": {
			info: containerOnFailure, state: running, ev: Event{Kind: EvExited, At: t1, Result: res(1)},
			want: ContainerState{Phase: PhaseBackOff, Ran: true, StartedAt: t0, ContainerID: "process://1", Last: result(1, "process://1"),
				NotBefore: t1, backoff: RestartBackoff{delay: BackoffInitial, lastRestart: t1}},
		},
		"container-level OnFailure in a Never pod: success is final": {
			info: containerOnFailure, state: running, ev: Event{Kind: EvExited, At: t1, Result: res(0)},
			want: ContainerState{Phase: PhaseExited, Ran: true, StartedAt: t0, ContainerID: "process://1", Last: result(0, "process://1")},
		},
		"sidecar restarts after success under Never": {
			info: sidecar, state: ContainerState{Phase: PhaseRunning, Ran: true, StartedAt: t0, ContainerID: "process://1", Started: true, Ready: true, Initialized: true},
			ev: Event{Kind: EvExited, At: t1, Result: res(0)},
			want: ContainerState{Phase: PhaseBackOff, Ran: true, StartedAt: t0, ContainerID: "process://1", Initialized: true, Last: result(0, "process://1"),
				NotBefore: t1, backoff: RestartBackoff{delay: BackoffInitial, lastRestart: t1}},
		},
		"sidecar is initialized once started": {
			info: sidecar, state: ContainerState{}, ev: Event{Kind: EvStarted, At: t0, ContainerID: "process://1"},
			want:        ContainerState{Phase: PhaseRunning, Ran: true, StartedAt: t0, ContainerID: "process://1", Started: true, Ready: true, Initialized: true},
			wantActions: []Action{created, started},
		},
		"sidecar is initialized once its probe passes": {
			info: sidecar, state: ContainerState{Phase: PhaseRunning, Ran: true, StartedAt: t0}, ev: Event{Kind: EvProbeSucceeded, At: t1},
			want: ContainerState{Phase: PhaseRunning, Ran: true, StartedAt: t0, Started: true, Ready: true, Initialized: true},
		},
		"failed start is an attempt that ended, started at the epoch": {
			info: main, state: ContainerState{},
			ev: Event{Kind: EvStartFailed, At: t1, Result: runtime.Result{ExitCode: 128, Reason: "StartError", Message: "not found", FinishedAt: t1}},
			want: ContainerState{Phase: PhaseExited, Ran: true,
				Last: &AttemptResult{Result: runtime.Result{ExitCode: 128, Reason: "StartError", Message: "not found", StartedAt: failedStartedAt, FinishedAt: t1}}},
			wantActions: []Action{recordEvent(corev1.EventTypeWarning, "Failed", "Error: StartError: not found")},
		},
		"configuration error waits and retries": {
			info: main, state: ContainerState{}, ev: Event{Kind: EvConfigFailed, At: t0, Message: `configmap "x" not found`},
			want:        ContainerState{NotBefore: t0.Add(RetryConfigError), WaitReason: ReasonCreateContainerConfigError, WaitMessage: `configmap "x" not found`},
			wantActions: []Action{recordEvent(corev1.EventTypeWarning, "Failed", `Error: configmap "x" not found`)},
		},
		"stop a running container": {
			info: main, state: running, ev: Event{Kind: EvStop, At: t1, Grace: 30 * time.Second},
			want:        ContainerState{Phase: phaseStopping, Ran: true, StartedAt: t0, ContainerID: "process://1", Started: true, Ready: true},
			wantActions: []Action{recordEvent(corev1.EventTypeNormal, "Killing", "Stopping container c"), {Kind: ActStop, Grace: 30 * time.Second}},
		},
		"stopped container exits for good whatever the policy": {
			info: sidecar, state: ContainerState{Phase: phaseStopping, Ran: true, StartedAt: t0, ContainerID: "process://1", Initialized: true},
			ev:   Event{Kind: EvExited, At: t1, Result: res(143)},
			want: ContainerState{Phase: PhaseExited, Ran: true, StartedAt: t0, ContainerID: "process://1", Initialized: true, Last: result(143, "process://1")},
		},
		"stop a backing-off container": {
			info: onFailure, state: ContainerState{Phase: PhaseBackOff, Ran: true, Last: result(1, "process://1"), WaitReason: ReasonCrashLoopBackOff, WaitMessage: "m"},
			ev:   Event{Kind: EvStop, At: t1},
			want: ContainerState{Phase: PhaseExited, Ran: true, Last: result(1, "process://1")},
		},
		"stop an exited container does nothing": {
			info: main, state: ContainerState{Phase: PhaseExited, Ran: true, Last: result(0, "x")}, ev: Event{Kind: EvStop, At: t1},
			want: ContainerState{Phase: PhaseExited, Ran: true, Last: result(0, "x")},
		},
		"failed startup probe kills a sidecar, which restarts": {
			info: sidecar, state: ContainerState{Phase: PhaseRunning, Ran: true, StartedAt: t0, ContainerID: "process://1"},
			ev:          Event{Kind: EvProbeFailed, At: t1, Grace: 30 * time.Second},
			want:        ContainerState{Phase: phaseStopping, Ran: true, StartedAt: t0, ContainerID: "process://1", policyDecides: true},
			wantActions: []Action{recordEvent(corev1.EventTypeNormal, "Killing", "Init container s failed startup probe"), {Kind: ActStop, Grace: 30 * time.Second}},
		},
		"failed startup probe message says a main container restarts": {
			info: onFailure, state: ContainerState{Phase: PhaseRunning, Ran: true, StartedAt: t0, ContainerID: "process://1"},
			ev:          Event{Kind: EvProbeFailed, At: t1, Grace: time.Second},
			want:        ContainerState{Phase: phaseStopping, Ran: true, StartedAt: t0, ContainerID: "process://1", policyDecides: true},
			wantActions: []Action{recordEvent(corev1.EventTypeNormal, "Killing", "Container c failed startup probe, will be restarted"), {Kind: ActStop, Grace: time.Second}},
		},
		"exit after a failed probe follows the policy": {
			info: sidecar, state: ContainerState{Phase: phaseStopping, Ran: true, StartedAt: t0, ContainerID: "process://1", policyDecides: true},
			ev: Event{Kind: EvExited, At: t1, Result: res(143)},
			want: ContainerState{Phase: PhaseBackOff, Ran: true, StartedAt: t0, ContainerID: "process://1", Last: result(143, "process://1"),
				NotBefore: t1, backoff: RestartBackoff{delay: BackoffInitial, lastRestart: t1}},
		},
		"a killed container that will be restarted restarts even after exit 0": {
			info: onFailure, state: ContainerState{Phase: phaseStopping, Ran: true, StartedAt: t0, ContainerID: "process://1", policyDecides: true},
			ev: Event{Kind: EvExited, At: t1, Result: res(0)},
			want: ContainerState{Phase: PhaseBackOff, Ran: true, StartedAt: t0, ContainerID: "process://1", Last: result(0, "process://1"),
				NotBefore: t1, backoff: RestartBackoff{delay: BackoffInitial, lastRestart: t1}},
		},
		"a killed container under Never exits for good": {
			info: main, state: ContainerState{Phase: phaseStopping, Ran: true, StartedAt: t0, ContainerID: "process://1", policyDecides: true},
			ev:   Event{Kind: EvExited, At: t1, Result: res(137)},
			want: ContainerState{Phase: PhaseExited, Ran: true, StartedAt: t0, ContainerID: "process://1", Last: result(137, "process://1")},
		},
		"failed startup probe message under a container-level OnFailure": {
			info: containerOnFailure, state: ContainerState{Phase: PhaseRunning, Ran: true, StartedAt: t0, ContainerID: "process://1"},
			ev:          Event{Kind: EvProbeFailed, At: t1, Grace: time.Second},
			want:        ContainerState{Phase: phaseStopping, Ran: true, StartedAt: t0, ContainerID: "process://1", policyDecides: true},
			wantActions: []Action{recordEvent(corev1.EventTypeNormal, "Killing", "Container c failed startup probe, will be restarted"), {Kind: ActStop, Grace: time.Second}},
		},
		"a resize that requires a restart kills the container": {
			info: main, state: ContainerState{Phase: PhaseRunning, Ran: true, StartedAt: t0, ContainerID: "process://1"},
			ev:          Event{Kind: EvResizeRestart, At: t1, Grace: 30 * time.Second},
			want:        ContainerState{Phase: phaseStopping, Ran: true, StartedAt: t0, ContainerID: "process://1", policyDecides: true, resizeRestart: true},
			wantActions: []Action{recordEvent(corev1.EventTypeNormal, "Killing", "Container c resize requires restart"), {Kind: ActStop, Grace: 30 * time.Second}},
		},
		"a container restarted for a resize starts again at once, even under Never": {
			info: main, state: ContainerState{Phase: phaseStopping, Ran: true, StartedAt: t0, ContainerID: "process://1", policyDecides: true, resizeRestart: true},
			ev:   Event{Kind: EvExited, At: t1, Result: res(137)},
			want: ContainerState{Phase: PhaseBackOff, Ran: true, StartedAt: t0, ContainerID: "process://1", Last: result(137, "process://1"), NotBefore: t1},
		},
		"a resize of a container not running restarts nothing": {
			info: main, state: ContainerState{Phase: PhaseBackOff, Ran: true, NotBefore: t1}, ev: Event{Kind: EvResizeRestart, At: t0},
			want: ContainerState{Phase: PhaseBackOff, Ran: true, NotBefore: t1},
		},
		"pod stop during a resize restart makes the exit final": {
			info: main, state: ContainerState{Phase: phaseStopping, Ran: true, policyDecides: true, resizeRestart: true}, ev: Event{Kind: EvStop, At: t1},
			want: ContainerState{Phase: phaseStopping, Ran: true},
		},
		"pod stop during a probe kill makes the exit final": {
			info: sidecar, state: ContainerState{Phase: phaseStopping, Ran: true, policyDecides: true}, ev: Event{Kind: EvStop, At: t1},
			want: ContainerState{Phase: phaseStopping, Ran: true},
		},
		"start with a postStart hook runs the hook before the container is running": {
			info: main, state: ContainerState{}, ev: Event{Kind: EvStarted, At: t0, ContainerID: "process://1", Hooks: AttemptHooks{PostStart: true}},
			want:        ContainerState{Phase: PhaseStarting, Ran: true, StartedAt: t0, ContainerID: "process://1", hooks: AttemptHooks{PostStart: true}, Hook: HookPostStart},
			wantActions: []Action{created, started, {Kind: ActPostStart}},
		},
		"postStart hook success: running, probes begin": {
			info:        main,
			state:       ContainerState{Phase: PhaseStarting, Ran: true, StartedAt: t0, ContainerID: "process://1", Probes: AttemptProbes{Liveness: true}, hooks: AttemptHooks{PostStart: true}, Hook: HookPostStart, WaitReason: ReasonCrashLoopBackOff},
			ev:          Event{Kind: EvHookDone, At: t1, Hook: HookPostStart, OK: true},
			want:        ContainerState{Phase: PhaseRunning, Ran: true, StartedAt: t0, ContainerID: "process://1", Started: true, Ready: true, Probes: AttemptProbes{Liveness: true}, hooks: AttemptHooks{PostStart: true}},
			wantActions: []Action{{Kind: ActProbe}},
		},
		"postStart hook failure kills the container with its preStop hook first": {
			info:  main,
			state: ContainerState{Phase: PhaseStarting, Ran: true, StartedAt: t0, ContainerID: "process://1", hooks: AttemptHooks{PostStart: true, PreStop: true}, Hook: HookPostStart},
			ev:    Event{Kind: EvHookDone, At: t1, Hook: HookPostStart, Message: "Exec lifecycle hook failed", Grace: 30 * time.Second},
			want: ContainerState{Phase: phaseStopping, Ran: true, StartedAt: t0, ContainerID: "process://1", hooks: AttemptHooks{PostStart: true, PreStop: true}, Hook: HookPreStop,
				stopAt: t1, stopGrace: 30 * time.Second, policyDecides: true, postStartFailed: true, postStartMessage: "Exec lifecycle hook failed"},
			wantActions: []Action{
				recordEvent(corev1.EventTypeWarning, ReasonFailedPostStartHook, "PostStartHook failed"),
				recordEvent(corev1.EventTypeNormal, "Killing", ReasonFailedPostStartHook),
				{Kind: ActPreStop, Grace: 30 * time.Second},
			},
		},
		"exit after a failed postStart hook: the exit code decides, exit 0 under OnFailure is final": {
			info:  onFailure,
			state: ContainerState{Phase: phaseStopping, Ran: true, StartedAt: t0, ContainerID: "process://1", policyDecides: true, postStartFailed: true, postStartMessage: "m"},
			ev:    Event{Kind: EvExited, At: t1, Result: res(0)},
			want:  ContainerState{Phase: PhaseExited, Ran: true, StartedAt: t0, ContainerID: "process://1", Last: result(0, "process://1")},
		},
		"exit after a failed postStart hook restarting at once waits with PostStartHookError": {
			info:  onFailure,
			state: ContainerState{Phase: phaseStopping, Ran: true, StartedAt: t0, ContainerID: "process://1", policyDecides: true, postStartFailed: true, postStartMessage: "m"},
			ev:    Event{Kind: EvExited, At: t1, Result: res(143)},
			want: ContainerState{Phase: PhaseBackOff, Ran: true, StartedAt: t0, ContainerID: "process://1", Last: result(143, "process://1"),
				NotBefore: t1, backoff: RestartBackoff{delay: BackoffInitial, lastRestart: t1}, WaitReason: ReasonPostStartHookError, WaitMessage: "m"},
		},
		"exit during the postStart hook: the policy decides as after a crash": {
			info:  main,
			state: ContainerState{Phase: PhaseStarting, Ran: true, StartedAt: t0, ContainerID: "process://1", hooks: AttemptHooks{PostStart: true}, Hook: HookPostStart},
			ev:    Event{Kind: EvExited, At: t1, Result: res(1)},
			want:  ContainerState{Phase: PhaseExited, Ran: true, StartedAt: t0, ContainerID: "process://1", Last: result(1, "process://1")},
		},
		"stop during the postStart hook": {
			info:        main,
			state:       ContainerState{Phase: PhaseStarting, Ran: true, StartedAt: t0, ContainerID: "process://1", Hook: HookPostStart},
			ev:          Event{Kind: EvStop, At: t1, Grace: 30 * time.Second},
			want:        ContainerState{Phase: phaseStopping, Ran: true, StartedAt: t0, ContainerID: "process://1"},
			wantActions: []Action{recordEvent(corev1.EventTypeNormal, "Killing", "Stopping container c"), {Kind: ActStop, Grace: 30 * time.Second}},
		},
		"stop with a preStop hook runs it first": {
			info: main, state: ContainerState{Phase: PhaseRunning, Ran: true, StartedAt: t0, hooks: AttemptHooks{PreStop: true}},
			ev:          Event{Kind: EvStop, At: t1, Grace: 30 * time.Second},
			want:        ContainerState{Phase: phaseStopping, Ran: true, StartedAt: t0, hooks: AttemptHooks{PreStop: true}, Hook: HookPreStop, stopAt: t1, stopGrace: 30 * time.Second},
			wantActions: []Action{recordEvent(corev1.EventTypeNormal, "Killing", "Stopping container c"), {Kind: ActPreStop, Grace: 30 * time.Second}},
		},
		"no preStop hook without a grace period": {
			info: main, state: ContainerState{Phase: PhaseRunning, Ran: true, StartedAt: t0, hooks: AttemptHooks{PreStop: true}},
			ev:          Event{Kind: EvStop, At: t1},
			want:        ContainerState{Phase: phaseStopping, Ran: true, StartedAt: t0, hooks: AttemptHooks{PreStop: true}},
			wantActions: []Action{recordEvent(corev1.EventTypeNormal, "Killing", "Stopping container c"), {Kind: ActStop}},
		},
		"failed liveness probe runs the preStop hook with the probe's grace": {
			info: onFailure, state: ContainerState{Phase: PhaseRunning, Ran: true, StartedAt: t0, hooks: AttemptHooks{PreStop: true}},
			ev:          Event{Kind: EvProbeFailed, At: t1, Probe: ProbeLiveness, Grace: 5 * time.Second},
			want:        ContainerState{Phase: phaseStopping, Ran: true, StartedAt: t0, hooks: AttemptHooks{PreStop: true}, Hook: HookPreStop, stopAt: t1, stopGrace: 5 * time.Second, policyDecides: true},
			wantActions: []Action{recordEvent(corev1.EventTypeNormal, "Killing", "Container c failed liveness probe, will be restarted"), {Kind: ActPreStop, Grace: 5 * time.Second}},
		},
		"preStop hook's whole seconds are deducted from the grace period": {
			info: main, state: ContainerState{Phase: phaseStopping, Ran: true, Hook: HookPreStop, stopAt: t0, stopGrace: 30 * time.Second},
			ev:          Event{Kind: EvHookDone, At: t0.Add(10*time.Second + 900*time.Millisecond), Hook: HookPreStop, OK: true},
			want:        ContainerState{Phase: phaseStopping, Ran: true, stopAt: t0, stopGrace: 30 * time.Second},
			wantActions: []Action{{Kind: ActStop, Grace: 20 * time.Second}},
		},
		"failed preStop hook: event, then the stop signal with at least 2s": {
			info: main, state: ContainerState{Phase: phaseStopping, Ran: true, Hook: HookPreStop, stopAt: t0, stopGrace: 3 * time.Second},
			ev:          Event{Kind: EvHookDone, At: t0.Add(2 * time.Second), Hook: HookPreStop, Message: "m"},
			want:        ContainerState{Phase: phaseStopping, Ran: true, stopAt: t0, stopGrace: 3 * time.Second},
			wantActions: []Action{recordEvent(corev1.EventTypeWarning, ReasonFailedPreStopHook, "PreStopHook failed"), {Kind: ActStop, Grace: MinStopGrace}},
		},
		"preStop hook abandoned at the end of the grace period": {
			info: main, state: ContainerState{Phase: phaseStopping, Ran: true, Hook: HookPreStop, stopAt: t0, stopGrace: 30 * time.Second},
			ev:          Event{Kind: EvHookDone, At: t0.Add(30 * time.Second), Hook: HookPreStop, Abandoned: true},
			want:        ContainerState{Phase: phaseStopping, Ran: true, stopAt: t0, stopGrace: 30 * time.Second},
			wantActions: []Action{{Kind: ActStop, Grace: MinStopGrace}},
		},
		"late postStart result after a stop is ignored": {
			info: main, state: ContainerState{Phase: phaseStopping, Ran: true, Hook: HookPreStop}, ev: Event{Kind: EvHookDone, At: t1, Hook: HookPostStart},
			want: ContainerState{Phase: phaseStopping, Ran: true, Hook: HookPreStop},
		},
		"late probe result is ignored": {
			info: main, state: ContainerState{Phase: PhaseExited, Ran: true}, ev: Event{Kind: EvProbeSucceeded, At: t1},
			want: ContainerState{Phase: PhaseExited, Ran: true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, actions := Transition(tc.state, tc.info, tc.ev)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(ContainerState{}, AttemptResult{}, RestartBackoff{}, AttemptProbes{}, AttemptHooks{})); diff != "" {
				t.Errorf("state (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantActions, actions, cmp.AllowUnexported(Action{})); diff != "" {
				t.Errorf("actions (-want +got):\n%s", diff)
			}
		})
	}
}

// t0 is the tests' fake now.
var t0 = time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
