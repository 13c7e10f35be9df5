package nodeagent

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	testingclock "k8s.io/utils/clock/testing"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
	"jobkeeper.dev/jobkeeper/test/builder"
)

// fakeRuntime runs no process: each attempt lives until the test ends it
// (exit) or the worker stops it (it then exits at once with 143). It is
// neither Quiet nor HostDirs, so the agent records events and makes no
// directories.
type fakeRuntime struct {
	// clock stamps results.
	clock *testingclock.FakeClock

	// mu guards the fields below.
	mu sync.Mutex
	// attempts are the started attempts per container, in order.
	attempts map[string][]*fakeHandle
	// failures are start errors to return, per container.
	failures map[string]error
	// stopped lists container names in the order they were stopped, and
	// graces their grace periods.
	stopped []string
	graces  []time.Duration
	// nextPID numbers the handles.
	nextPID int
}

// newFakeRuntime returns an empty fake runtime.
func newFakeRuntime(clk *testingclock.FakeClock) *fakeRuntime {
	return &fakeRuntime{clock: clk, attempts: map[string][]*fakeHandle{}, failures: map[string]error{}, nextPID: 100}
}

// Name implements runtime.Runtime.
func (r *fakeRuntime) Name() string { return "fake" }

// Start implements runtime.Runtime.
func (r *fakeRuntime) Start(_ context.Context, spec runtime.Spec) (runtime.Handle, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failures[spec.ContainerName]; err != nil {
		return nil, err
	}
	r.nextPID++
	h := &fakeHandle{rt: r, pid: r.nextPID, spec: spec, started: r.clock.Now(), done: make(chan struct{})}
	r.attempts[spec.ContainerName] = append(r.attempts[spec.ContainerName], h)
	return h, nil
}

// attempt returns attempt n of a container once it exists.
func (r *fakeRuntime) attempt(t *testing.T, name string, n int) *fakeHandle {
	t.Helper()
	var h *fakeHandle
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.attempts[name]) > n {
			h = r.attempts[name][n]
		}
		return h != nil, nil
	}); err != nil {
		t.Fatalf("attempt %d of container %s never started", n, name)
	}
	return h
}

// podAttempt returns attempt n of a container of the named pod once it
// exists (attempt keys containers by name alone).
func (r *fakeRuntime) podAttempt(t *testing.T, pod, name string, n int) *fakeHandle {
	t.Helper()
	var h *fakeHandle
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		i := 0
		for _, a := range r.attempts[name] {
			if a.spec.PodName != pod {
				continue
			}
			if i == n {
				h = a
			}
			i++
		}
		return h != nil, nil
	}); err != nil {
		t.Fatalf("attempt %d of container %s of pod %s never started", n, name, pod)
	}
	return h
}

// count returns how many attempts of a container started.
func (r *fakeRuntime) count(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.attempts[name])
}

// stopOrder returns the containers stopped so far, in order.
func (r *fakeRuntime) stopOrder() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.stopped...)
}

// fakeHandle is one attempt of the fake runtime.
type fakeHandle struct {
	// rt is the runtime.
	rt *fakeRuntime
	// pid identifies the attempt.
	pid int
	// spec is what the worker asked to run.
	spec runtime.Spec
	// started is when the attempt started.
	started time.Time
	// once guards done.
	once sync.Once
	// done is closed once the attempt ended.
	done chan struct{}
	// res is the outcome, set before done closes.
	res runtime.Result
}

// PID implements runtime.Handle.
func (h *fakeHandle) PID() int { return h.pid }

// Done implements runtime.Handle.
func (h *fakeHandle) Done() <-chan struct{} { return h.done }

// Result implements runtime.Handle.
func (h *fakeHandle) Result() runtime.Result { return h.res }

// Stop implements runtime.Handle: the attempt ends at once as if SIGTERM
// killed it.
func (h *fakeHandle) Stop(grace time.Duration) {
	h.rt.mu.Lock()
	h.rt.stopped = append(h.rt.stopped, h.spec.ContainerName)
	h.rt.graces = append(h.rt.graces, grace)
	h.rt.mu.Unlock()
	h.finish(143, 15)
}

// stopped reports whether the attempt ended.
func (h *fakeHandle) stopped() bool {
	select {
	case <-h.done:
		return true
	default:
		return false
	}
}

// exit ends the attempt with code.
func (h *fakeHandle) exit(code int32) { h.finish(code, 0) }

// finish ends the attempt once.
func (h *fakeHandle) finish(code, signal int32) {
	h.once.Do(func() {
		h.res = runtime.Result{ExitCode: code, Signal: signal, Reason: runtime.ReasonFor(code), StartedAt: h.started, FinishedAt: h.rt.clock.Now()}
		close(h.done)
	})
}

// startAgentWithFake runs an agent whose runtime is a fake runtime.
func startAgentWithFake(t *testing.T, objs ...kruntime.Object) (*testAgent, *fakeRuntime) {
	t.Helper()
	var rt *fakeRuntime
	ta := startAgentOn(t, Options{MaxPods: 10, Runtime: "simulated"}, func(clk *testingclock.FakeClock) runtime.Runtime {
		rt = newFakeRuntime(clk)
		return rt
	}, objs...)
	return ta, rt
}

// serverPort is the port of a test server.
func serverPort(t *testing.T, srv *httptest.Server) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return int32(port)
}

// stepUntil advances the fake clock by d at a time until cond holds: a
// goroutine may not wait on the clock yet when the first step comes.
func (ta *testAgent) stepUntil(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		if cond() {
			return true, nil
		}
		ta.clock.Step(d)
		return false, nil
	}); err != nil {
		t.Fatal("condition never held while stepping the clock")
	}
}

// initStatus returns the status of an init container.
func initStatus(p *corev1.Pod, name string) (corev1.ContainerStatus, bool) {
	for _, s := range p.Status.InitContainerStatuses {
		if s.Name == name {
			return s, true
		}
	}
	return corev1.ContainerStatus{}, false
}

// waitEvent polls until an event with reason exists in "ns" and returns it.
func (ta *testAgent) waitEvent(t *testing.T, reason string) corev1.Event {
	t.Helper()
	var found corev1.Event
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := ta.client.CoreV1().Events("ns").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, e := range evs.Items {
			if e.Reason == reason {
				found = e
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("no %s event", reason)
	}
	return found
}

func TestSidecarsStartInOrderAndStopAfterTheMainContainers(t *testing.T) {
	pod := builder.MakePod("p", "ns").UID("u1").Sidecar("first", "sleep", "1d").InitContainer("setup", "true").
		Sidecar("second", "sleep", "1d").Obj()
	ta, rt := startAgentWithFake(t, pod)

	first := rt.attempt(t, "first", 0)
	setup := rt.attempt(t, "setup", 0)
	if n := rt.count("second"); n != 0 {
		t.Fatalf("second sidecar started before setup finished")
	}
	setup.exit(0)
	rt.attempt(t, "second", 0)
	main := rt.attempt(t, "main", 0)
	ta.waitPod(t, "p", phaseIs(corev1.PodRunning))

	// A sidecar that exits is restarted, even under restartPolicy Never.
	first.exit(0)
	rt.attempt(t, "first", 1)
	got := ta.waitPod(t, "p", func(p *corev1.Pod) bool {
		s, _ := initStatus(p, "first")
		return s.RestartCount == 1 && s.State.Running != nil
	})
	if got.Status.Phase != corev1.PodRunning {
		t.Errorf("phase = %s while a sidecar restarts, want Running", got.Status.Phase)
	}

	main.exit(0)
	got = ta.waitPod(t, "p", phaseIs(corev1.PodSucceeded))
	if order := rt.stopOrder(); fmt.Sprint(order) != "[second first]" {
		t.Errorf("sidecars stopped in order %v, want [second first]", order)
	}
	for _, name := range []string{"first", "second"} {
		s, _ := initStatus(got, name)
		if term := s.State.Terminated; term == nil || term.ExitCode != 143 || term.Reason != "Error" {
			t.Errorf("sidecar %s state = %+v, want terminated 143 Error", name, s.State)
		}
	}
	if c := getCondition(got, corev1.PodInitialized); len(c) != 1 || c[0].Status != corev1.ConditionTrue || c[0].Reason != "PodCompleted" {
		t.Errorf("Initialized = %+v, want True PodCompleted", c)
	}
}

func TestSidecarKilledAfterInitFailureFailsThePod(t *testing.T) {
	pod := builder.MakePod("p", "ns").UID("u1").Sidecar("proxy", "sleep", "1d").InitContainer("setup", "false").Obj()
	ta, rt := startAgentWithFake(t, pod)
	rt.attempt(t, "proxy", 0)
	rt.attempt(t, "setup", 0).exit(1)
	got := ta.waitPod(t, "p", phaseIs(corev1.PodFailed))
	if s, _ := initStatus(got, "proxy"); s.State.Terminated == nil {
		t.Errorf("sidecar state = %+v, want terminated", s.State)
	}
	if n := rt.count("main"); n != 0 {
		t.Errorf("main container started %d times after a failed init", n)
	}
}

func TestSidecarStartupProbe(t *testing.T) {
	var healthy atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !healthy.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	pod := builder.MakePod("p", "ns").UID("u1").Sidecar("proxy", "sleep", "1d").Obj()
	pod.Spec.InitContainers[0].StartupProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(serverPort(t, srv))}},
		PeriodSeconds: 10, FailureThreshold: 3,
	}
	ta, rt := startAgentWithFake(t, pod)
	rt.attempt(t, "proxy", 0)
	ev := ta.waitEvent(t, "Unhealthy")
	if ev.Message != "Startup probe failed: HTTP probe failed with statuscode: 503" || ev.Type != corev1.EventTypeWarning {
		t.Errorf("Unhealthy event = %s %q", ev.Type, ev.Message)
	}
	got := ta.waitPod(t, "p", func(p *corev1.Pod) bool { s, _ := initStatus(p, "proxy"); return s.State.Running != nil })
	if s, _ := initStatus(got, "proxy"); *s.Started || s.Ready {
		t.Errorf("sidecar started=%v ready=%v before its probe passed", *s.Started, s.Ready)
	}
	if rt.count("main") != 0 || got.Status.Phase != corev1.PodPending {
		t.Fatalf("main started (phase %s) before the sidecar's startup probe passed", got.Status.Phase)
	}
	healthy.Store(true)
	ta.stepUntil(t, 10*time.Second, func() bool { return rt.count("main") > 0 })
	got = ta.waitPod(t, "p", func(p *corev1.Pod) bool { s, _ := initStatus(p, "proxy"); return s.Started != nil && *s.Started })
	if s, _ := initStatus(got, "proxy"); !s.Ready {
		t.Error("started sidecar is not ready")
	}
}

func TestSidecarFailingStartupProbeIsRestarted(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) }))
	defer srv.Close()
	pod := builder.MakePod("p", "ns").UID("u1").Sidecar("proxy", "sleep", "1d").Obj()
	pod.Spec.InitContainers[0].StartupProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(serverPort(t, srv))}},
		PeriodSeconds: 1, FailureThreshold: 2,
	}
	ta, rt := startAgentWithFake(t, pod)
	rt.attempt(t, "proxy", 0)
	ta.stepUntil(t, time.Second, func() bool { return rt.count("proxy") > 1 })
	if ev := ta.waitEvent(t, "Killing"); ev.Message != "Init container proxy failed startup probe" {
		t.Errorf("Killing event message %q", ev.Message)
	}
	if rt.count("main") != 0 {
		t.Error("main started although the sidecar never passed its startup probe")
	}
}

func TestExecProbeNeedsARuntimeThatExecs(t *testing.T) {
	pod := builder.MakePod("p", "ns").UID("u1").Sidecar("proxy", "sleep", "1d").Obj()
	pod.Spec.InitContainers[0].StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
	ta, rt := startAgentWithFake(t, pod)
	rt.attempt(t, "main", 0)
	ev := ta.waitEvent(t, ReasonProbeNotSupported)
	if ev.Type != corev1.EventTypeWarning || ev.Message != "Startup probe of container proxy not run: this runtime cannot run commands in containers" {
		t.Errorf("event = %s %q", ev.Type, ev.Message)
	}
}

func TestArgsRunWithoutCommand(t *testing.T) {
	pod := builder.MakePod("p", "ns").UID("u1").Args("sleep", "$(N)").Env("N", "1").Obj()
	_, rt := startAgentWithFake(t, pod)
	h := rt.attempt(t, "main", 0)
	if got := fmt.Sprint(h.spec.Command); got != "[sleep 1]" {
		t.Errorf("command = %s, want [sleep 1]", got)
	}
}

func TestFailedStartReportsTheEpochAsStartedAt(t *testing.T) {
	pod := builder.MakePod("p", "ns").UID("u1").Command("nope").Obj()
	ta, rt := startAgentWithFake(t)
	rt.mu.Lock()
	rt.failures["main"] = &runtime.StartError{Reason: "StartError", Message: `exec: "nope": executable file not found in $PATH`}
	rt.mu.Unlock()
	if _, err := ta.client.CoreV1().Pods("ns").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := ta.waitPod(t, "p", phaseIs(corev1.PodFailed))
	term := got.Status.ContainerStatuses[0].State.Terminated
	if term == nil || term.Reason != "StartError" || term.ExitCode != 128 {
		t.Fatalf("state = %+v, want terminated StartError 128", got.Status.ContainerStatuses[0].State)
	}
	if !term.StartedAt.Time.Equal(time.Unix(0, 0)) {
		t.Errorf("startedAt = %v, want the Unix epoch", term.StartedAt)
	}
}

func TestLastStateKeepsTheTerminatedAttemptsID(t *testing.T) {
	pod := builder.MakePod("p", "ns").UID("u1").RestartPolicy(corev1.RestartPolicyOnFailure).Obj()
	ta, rt := startAgentWithFake(t, pod)
	first := rt.attempt(t, "main", 0)
	first.exit(1)
	second := rt.attempt(t, "main", 1)
	got := ta.waitPod(t, "p", func(p *corev1.Pod) bool {
		cs := p.Status.ContainerStatuses
		return len(cs) == 1 && cs[0].RestartCount == 1 && cs[0].State.Running != nil
	})
	cs := got.Status.ContainerStatuses[0]
	if want := "fake://" + strconv.Itoa(second.pid); cs.ContainerID != want {
		t.Errorf("containerID = %q, want %q", cs.ContainerID, want)
	}
	if want := "fake://" + strconv.Itoa(first.pid); cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ContainerID != want {
		t.Errorf("lastState = %+v, want containerID %q", cs.LastTerminationState.Terminated, want)
	}
}

func TestEventSources(t *testing.T) {
	huge := builder.MakePod("huge", "ns").UID("u1").RequestCPU("100000").Obj()
	fits := builder.MakePod("p", "ns").UID("u2").Obj()
	ta, _ := startAgentWithFake(t, huge, fits)
	for reason, component := range map[string]string{"FailedScheduling": "default-scheduler", "Scheduled": "default-scheduler", "Started": "kubelet"} {
		if ev := ta.waitEvent(t, reason); ev.Source.Component != component {
			t.Errorf("%s event source %q, want %q", reason, ev.Source.Component, component)
		}
	}
}

// addEphemeral adds an ephemeral container to pod p, as kubectl debug does.
func (ta *testAgent) addEphemeral(t *testing.T, p string, ec corev1.EphemeralContainer) {
	t.Helper()
	ctx := context.Background()
	pod, err := ta.client.CoreV1().Pods("ns").Get(ctx, p, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers, ec)
	if _, err := ta.client.CoreV1().Pods("ns").UpdateEphemeralContainers(ctx, p, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// ephemeralStatus returns the status of an ephemeral container.
func ephemeralStatus(p *corev1.Pod, name string) (corev1.ContainerStatus, bool) {
	for _, s := range p.Status.EphemeralContainerStatuses {
		if s.Name == name {
			return s, true
		}
	}
	return corev1.ContainerStatus{}, false
}

// TestEphemeralContainers: an ephemeral container starts as soon as it is
// added, even while the pod initializes, is never restarted, reports its
// status apart, counts for neither the phase nor readiness, and is stopped
// when the pod finishes; its events name it in spec.ephemeralContainers.
func TestEphemeralContainers(t *testing.T) {
	pod := builder.MakePod("p", "ns").UID("u1").InitContainer("setup", "sleep", "1d").Obj()
	pod.Spec.RestartPolicy = corev1.RestartPolicyAlways
	ta, rt := startAgentWithFake(t, pod)
	setup := rt.attempt(t, "setup", 0)

	ta.addEphemeral(t, "p", corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
		Name: "debugger", Image: "busybox", Command: []string{"sh"}, Stdin: true, TTY: true,
	}, TargetContainerName: "main"})
	dbg := rt.attempt(t, "debugger", 0)
	if !dbg.spec.Stdin || !dbg.spec.TTY {
		t.Errorf("ephemeral container spec stdin %v tty %v, want both", dbg.spec.Stdin, dbg.spec.TTY)
	}
	got := ta.waitPod(t, "p", func(p *corev1.Pod) bool {
		s, ok := ephemeralStatus(p, "debugger")
		return ok && s.State.Running != nil
	})
	if got.Status.Phase != corev1.PodPending {
		t.Errorf("phase %s with a running ephemeral container during init, want Pending", got.Status.Phase)
	}
	ta.waitEventAt(t, "Started", "spec.ephemeralContainers{debugger}")

	// It fails: never restarted, whatever the pod's restartPolicy (Always).
	dbg.exit(1)
	got = ta.waitPod(t, "p", func(p *corev1.Pod) bool {
		s, ok := ephemeralStatus(p, "debugger")
		return ok && s.State.Terminated != nil
	})
	if s, _ := ephemeralStatus(got, "debugger"); s.State.Terminated.ExitCode != 1 || s.RestartCount != 0 {
		t.Errorf("ephemeral status %+v", s)
	}
	setup.exit(0)
	rt.attempt(t, "main", 0)
	got = ta.waitPod(t, "p", phaseIs(corev1.PodRunning))
	if n := rt.count("debugger"); n != 1 {
		t.Errorf("ephemeral container started %d times, want once", n)
	}
	if c := getCondition(got, corev1.PodReady); len(c) != 1 || c[0].Status != corev1.ConditionTrue {
		t.Errorf("Ready = %+v: an exited ephemeral container must not make the pod unready", c)
	}

	// A second one runs until the pod finishes, and is stopped then.
	ta.addEphemeral(t, "p", corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
		Name: "second", Image: "busybox", Command: []string{"sleep", "1d"},
	}})
	rt.attempt(t, "second", 0)
	ta.deletePod(t, "p", 30)
	ta.waitGone(t, "p")
	if order := rt.stopOrder(); len(order) != 2 || !slices.Contains(order, "main") || !slices.Contains(order, "second") {
		t.Errorf("stopped %v, want main and second", order)
	}
}

// waitEventAt polls until an event with reason names fieldPath.
func (ta *testAgent) waitEventAt(t *testing.T, reason, fieldPath string) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := ta.client.CoreV1().Events("ns").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, e := range evs.Items {
			if e.Reason == reason && e.InvolvedObject.FieldPath == fieldPath {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("no %s event for %s", reason, fieldPath)
	}
}
