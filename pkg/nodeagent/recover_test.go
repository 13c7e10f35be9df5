package nodeagent

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/volume"
	"jobkeeper.dev/jobkeeper/test/builder"
)

func TestDecideRecovery(t *testing.T) {
	running := func(n int32) foundAttempt {
		return foundAttempt{attempt: n, adopted: runtime.Adopted{Found: true, Handle: &fakeHandle{}, PID: 10 + int(n)}}
	}
	ended := func(n, code int32) foundAttempt {
		return foundAttempt{attempt: n, adopted: runtime.Adopted{Found: true, Result: runtime.Result{ExitCode: code}}}
	}
	never := func(n int32) foundAttempt { return foundAttempt{attempt: n} }
	api := &apiRun{attempt: 2, containerID: "process://7"}
	cases := map[string]struct {
		api   *apiRun
		found []foundAttempt
		// want: kind, the attempts recorded as ended (in order), the
		// adopted one (-1: none) and the stale ones.
		kind    recoveryKind
		ended   []int32
		adopted int32
		stale   []int32
	}{
		"nothing ran, nothing found":              {kind: recoverNothing, adopted: -1},
		"a start the previous run never finished": {found: []foundAttempt{never(0)}, kind: recoverNothing, adopted: -1},
		"running in the API, still running":       {api: api, found: []foundAttempt{running(2)}, kind: recoverAdopt, adopted: 2},
		"running in the API, ended meanwhile":     {api: api, found: []foundAttempt{ended(2, 3)}, kind: recoverEnded, ended: []int32{2}, adopted: -1},
		"running in the API, nothing left":        {api: api, kind: recoverLost, adopted: -1},
		"running in the API, record unreadable":   {api: api, found: []foundAttempt{never(2)}, kind: recoverLost, adopted: -1},
		// The previous run started the attempt and was killed before the
		// API heard of it: taking it over is what keeps an index from
		// running twice.
		"not in the API yet, running":         {found: []foundAttempt{running(0)}, kind: recoverAdopt, adopted: 0},
		"not in the API yet, ended":           {found: []foundAttempt{ended(0, 0)}, kind: recoverEnded, ended: []int32{0}, adopted: -1},
		"ended and restarted while away":      {api: api, found: []foundAttempt{running(3), ended(2, 1)}, kind: recoverAdopt, ended: []int32{2}, adopted: 3},
		"lost, then a later attempt runs":     {api: api, found: []foundAttempt{running(3)}, kind: recoverAdopt, ended: []int32{2}, adopted: 3},
		"two running: the older one is stale": {found: []foundAttempt{running(0), running(1)}, kind: recoverAdopt, adopted: 1, stale: []int32{0}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := decideRecovery(tc.api, tc.found, t0)
			if r.kind != tc.kind {
				t.Errorf("kind = %d, want %d", r.kind, tc.kind)
			}
			var gotEnded, gotStale []int32
			for _, f := range r.ended {
				gotEnded = append(gotEnded, f.attempt)
			}
			for _, f := range r.stale {
				gotStale = append(gotStale, f.attempt)
			}
			if !equalInts(gotEnded, tc.ended) || !equalInts(gotStale, tc.stale) {
				t.Errorf("ended %v stale %v, want %v and %v", gotEnded, gotStale, tc.ended, tc.stale)
			}
			gotAdopted := int32(-1)
			if r.kind == recoverAdopt {
				gotAdopted = r.adopt.attempt
			}
			if gotAdopted != tc.adopted {
				t.Errorf("adopted %d, want %d", gotAdopted, tc.adopted)
			}
		})
	}
}

// equalInts compares two attempt lists.
func equalInts(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// adoptingRuntime is a fake runtime whose attempts outlive the agent: left
// holds, per state directory, what a previous run left there.
type adoptingRuntime struct {
	*fakeRuntime
	// mu guards left.
	mu sync.Mutex
	// left is what Adopt finds, by state directory.
	left map[string]runtime.Adopted
}

// Adopt implements runtime.Adopter.
func (r *adoptingRuntime) Adopt(_ context.Context, dir string) (runtime.Adopted, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.left[dir], nil
}

// startAgentAdopting runs an agent whose runtime finds, for pod uid's
// container main, what left says per attempt (its state directories are
// created as a previous run would have).
func startAgentAdopting(t *testing.T, uid types.UID, left map[int32]runtime.Adopted, objs ...kruntime.Object) (*testAgent, *adoptingRuntime) {
	t.Helper()
	dataDir := t.TempDir()
	a := &Agent{opts: Options{DataDir: dataDir}}
	rt := &adoptingRuntime{left: map[string]runtime.Adopted{}}
	for n, got := range left {
		dir := a.attemptStateDir(uid, "main", n)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		rt.left[dir] = got
	}
	ta := startAgentOn(t, Options{MaxPods: 10, Runtime: "simulated", DataDir: dataDir}, func(clk *testingclock.FakeClock) runtime.Runtime {
		rt.fakeRuntime = newFakeRuntime(clk)
		return rt
	}, objs...)
	return ta, rt
}

// runningPod is a pod the API shows running attempt 0 of its container
// main, started at started, with the container ID process://42.
func runningPod(name string, uid types.UID, started time.Time) *corev1.Pod {
	p := builder.MakePod(name, "ns").UID(string(uid)).NodeName(testNode).Obj()
	p.Status = corev1.PodStatus{
		Phase:     corev1.PodRunning,
		StartTime: ptr.To(metav1.NewTime(started)),
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: "main", ContainerID: "process://42", Started: ptr.To(true), Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(started)}},
		}},
	}
	return p
}

// TestRestartedAgentAdoptsRunningContainers: a container that still runs
// after the agent restarted is taken over: same ID, start time and
// restart count, nothing started again, and its end is the pod's.
func TestRestartedAgentAdoptsRunningContainers(t *testing.T) {
	started := t0.Add(-time.Minute).Truncate(time.Second)
	h := &fakeHandle{pid: 42, started: started, done: make(chan struct{})}
	ta, rt := startAgentAdopting(t, "u1", map[int32]runtime.Adopted{0: {Found: true, Handle: h, PID: 42, StartedAt: started}}, runningPod("p", "u1", started))
	h.rt = rt.fakeRuntime
	got := ta.waitPod(t, "p", func(p *corev1.Pod) bool { return getCondition(p, corev1.PodReady) != nil })
	cs := got.Status.ContainerStatuses[0]
	if cs.State.Running == nil || !cs.State.Running.StartedAt.Time.Equal(started) || cs.ContainerID != "process://42" || cs.RestartCount != 0 || !cs.Ready {
		t.Errorf("after the restart: %+v, want the same running attempt, ready", cs)
	}
	h.exit(0)
	got = ta.waitPod(t, "p", phaseIs(corev1.PodSucceeded))
	if term := got.Status.ContainerStatuses[0].State.Terminated; term == nil || term.ExitCode != 0 || term.ContainerID != "process://42" {
		t.Errorf("terminated = %+v", got.Status.ContainerStatuses[0].State)
	}
	if n := rt.count("main"); n != 0 {
		t.Errorf("%d attempts started, want none", n)
	}
}

// TestRestartedAgentReportsExitsWhileAway: a container that ended while the
// agent was away is reported with its recorded exit code, not as lost.
func TestRestartedAgentReportsExitsWhileAway(t *testing.T) {
	started := t0.Add(-time.Minute).Truncate(time.Second)
	finished := t0.Add(-time.Second).Truncate(time.Second)
	res := runtime.Result{ExitCode: 3, Reason: "Error", StartedAt: started, FinishedAt: finished}
	ta, rt := startAgentAdopting(t, "u1", map[int32]runtime.Adopted{0: {Found: true, PID: 42, StartedAt: started, Result: res}}, runningPod("p", "u1", started))
	got := ta.waitPod(t, "p", phaseIs(corev1.PodFailed))
	term := got.Status.ContainerStatuses[0].State.Terminated
	if term == nil || term.ExitCode != 3 || term.Reason != "Error" || !term.FinishedAt.Time.Equal(finished) || term.ContainerID != "process://42" {
		t.Errorf("terminated = %+v, want the recorded exit 3", got.Status.ContainerStatuses[0].State)
	}
	if n := rt.count("main"); n != 0 {
		t.Errorf("%d attempts started, want none", n)
	}
}

// TestRestartedAgentAdoptsAStartTheAPIMissed: the previous run started the
// container and died before writing it to the API; the new run takes that
// attempt over instead of starting the container a second time.
func TestRestartedAgentAdoptsAStartTheAPIMissed(t *testing.T) {
	started := t0.Add(-time.Second).Truncate(time.Second)
	h := &fakeHandle{pid: 77, started: started, done: make(chan struct{})}
	pod := builder.MakePod("p", "ns").UID("u1").NodeName(testNode).Obj()
	ta, rt := startAgentAdopting(t, "u1", map[int32]runtime.Adopted{0: {Found: true, Handle: h, PID: 77, StartedAt: started}}, pod)
	h.rt = rt.fakeRuntime
	got := ta.waitPod(t, "p", phaseIs(corev1.PodRunning))
	cs := got.Status.ContainerStatuses[0]
	if cs.State.Running == nil || cs.ContainerID != "fake://77" || !cs.State.Running.StartedAt.Time.Equal(started) || cs.RestartCount != 0 {
		t.Errorf("status = %+v, want attempt 0 taken over", cs)
	}
	h.exit(0)
	ta.waitPod(t, "p", phaseIs(corev1.PodSucceeded))
	if n := rt.count("main"); n != 0 {
		t.Errorf("%d attempts started, want none: the container ran twice", n)
	}
}

// isolatingAdopter is an adopting runtime that also gives containers a
// private view, so that the agent prepares and refreshes volumes.
type isolatingAdopter struct {
	*adoptingRuntime
}

// Isolation implements runtime.Isolator.
func (isolatingAdopter) Isolation() (bool, string) { return true, "" }

// TestRestartedAgentRefreshesAdoptedPodsVolumes: the configMap volume of a
// pod whose container a restarted agent took over is refreshed as that of
// a pod it started: the previous run wrote it, the container runs on and
// reads the ConfigMap's later changes.
func TestRestartedAgentRefreshesAdoptedPodsVolumes(t *testing.T) {
	started := t0.Add(-time.Minute).Truncate(time.Second)
	h := &fakeHandle{pid: 42, started: started, done: make(chan struct{})}
	pod := runningPod("p", "u1", started)
	pod.Spec.Volumes = []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "cfg", MountPath: "/etc/cfg"}}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg", Namespace: "ns"}, Data: map[string]string{"a": "1"}}

	dataDir := t.TempDir()
	prev := &Agent{opts: Options{DataDir: dataDir}}
	// What the previous run of the agent wrote when it started the container.
	vol := filepath.Join(prev.podDir("u1"), "volumes", "cfg")
	if _, err := volume.WriteAtomic(vol, []volume.ProjectedFile{{Path: "a", Data: []byte("1"), Mode: 0o644}}, t0.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	dir := prev.attemptStateDir("u1", "main", 0)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	rt := &adoptingRuntime{left: map[string]runtime.Adopted{dir: {Found: true, Handle: h, PID: 42, StartedAt: started}}}
	ta := startAgentOn(t, Options{MaxPods: 10, Runtime: "simulated", DataDir: dataDir}, func(clk *testingclock.FakeClock) runtime.Runtime {
		rt.fakeRuntime = newFakeRuntime(clk)
		return isolatingAdopter{rt}
	}, pod, cm)
	h.rt = rt.fakeRuntime
	ta.waitPod(t, "p", func(p *corev1.Pod) bool { return getCondition(p, corev1.PodReady) != nil })

	cm.Data["a"] = "2"
	if _, err := ta.client.CoreV1().ConfigMaps("ns").Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ta.agent.volumes.RefreshAll(context.Background())
	if b, err := os.ReadFile(filepath.Join(vol, "a")); err != nil || string(b) != "2" {
		t.Errorf("the taken-over pod's cfg/a after a refresh reads %q (%v), want 2", b, err)
	}
	if n := rt.count("main"); n != 0 {
		t.Errorf("%d attempts started, want none", n)
	}
}

// networkAdoptingRuntime is an adoptingRuntime that joins network
// namespaces.
type networkAdoptingRuntime struct{ *adoptingRuntime }

func (networkAdoptingRuntime) NetworkNamespaces() (bool, string) { return true, "" }

// TestRestartedAgentKillsContainersWithoutNetwork: a restarted agent whose
// pod network no longer has a running pod's namespace (the rootless
// node's ended with up) does not adopt its container: it is killed, with
// the kubelet's SandboxChanged event, and reported terminated with exit
// code 137; a pod that restarts its containers starts one again, in a new
// namespace. One whose namespace is still there, and which is in it, is
// adopted; so is a hostNetwork pod's in the agent's own namespace, and
// not one in another's (the last rootless node's).
func TestRestartedAgentKillsContainersWithoutNetwork(t *testing.T) {
	for _, tc := range []struct {
		name        string
		policy      corev1.RestartPolicy
		hostNetwork bool
		// pinned: the pod network has the pod's namespace; inNS: the
		// container's process is in the namespace it should be in.
		pinned, inNS bool
	}{
		{name: "never", policy: corev1.RestartPolicyNever},
		{name: "always", policy: corev1.RestartPolicyAlways},
		{name: "namespace kept", policy: corev1.RestartPolicyNever, pinned: true, inNS: true},
		{name: "pinned but another", policy: corev1.RestartPolicyNever, pinned: true},
		{name: "host network kept", policy: corev1.RestartPolicyNever, hostNetwork: true, inNS: true},
		{name: "host network of another node", policy: corev1.RestartPolicyNever, hostNetwork: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			started := t0.Add(-time.Minute).Truncate(time.Second)
			h := &fakeHandle{pid: 42, started: started, done: make(chan struct{})}
			pn := newFakePodNetwork()
			if tc.pinned {
				if _, _, err := pn.Ensure("u1"); err != nil {
					t.Fatal(err)
				}
			}
			pod := runningPod("p", "u1", started)
			pod.Spec.RestartPolicy = tc.policy
			pod.Spec.HostNetwork = tc.hostNetwork
			dataDir := t.TempDir()
			a := &Agent{opts: Options{DataDir: dataDir}}
			rt := &adoptingRuntime{left: map[string]runtime.Adopted{}}
			dir := a.attemptStateDir("u1", "main", 0)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			// The sandbox (pid 7) stays in the container's namespace.
			rt.left[dir] = runtime.Adopted{Found: true, Handle: h, PID: 42, NetPID: 7, StartedAt: started}
			pinned, agents, other := netNSID{dev: 4, ino: 1, ok: true}, netNSID{dev: 4, ino: 2, ok: true}, netNSID{dev: 4, ino: 3, ok: true}
			stat := func(path string) netNSID {
				switch path {
				case "/netns/u1":
					return pinned
				case "/proc/thread-self/ns/net":
					return agents
				case "/proc/7/ns/net":
					switch {
					case !tc.inNS:
						return other
					case tc.hostNetwork:
						return agents
					}
					return pinned
				}
				t.Errorf("the namespace of %s read", path)
				return netNSID{}
			}
			ta := startAgentOn(t, Options{MaxPods: 10, Runtime: "simulated", DataDir: dataDir, PodNetwork: pn, NodeIP: "10.244.0.1", statNetNS: stat}, func(clk *testingclock.FakeClock) runtime.Runtime {
				rt.fakeRuntime = newFakeRuntime(clk)
				h.rt = rt.fakeRuntime
				return networkAdoptingRuntime{rt}
			}, pod)
			if tc.inNS {
				got := ta.waitPod(t, "p", func(p *corev1.Pod) bool { return getCondition(p, corev1.PodReady) != nil })
				if cs := got.Status.ContainerStatuses[0]; cs.State.Running == nil || cs.ContainerID != "process://42" {
					t.Errorf("with its namespace kept the container was not adopted: %+v", cs)
				}
				if h.stopped() {
					t.Error("an adopted container was stopped")
				}
				return
			}
			var got *corev1.Pod
			if tc.policy == corev1.RestartPolicyNever {
				got = ta.waitPod(t, "p", phaseIs(corev1.PodFailed))
			} else {
				got = ta.waitPod(t, "p", func(p *corev1.Pod) bool {
					return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount == 1
				})
			}
			cs := got.Status.ContainerStatuses[0]
			term := cs.State.Terminated
			if tc.policy != corev1.RestartPolicyNever {
				term = cs.LastTerminationState.Terminated
			}
			if term == nil || term.ExitCode != 137 || term.Reason != "Error" || !strings.Contains(term.Message, "network namespace") || term.ContainerID != "process://42" {
				t.Errorf("the killed attempt: %+v", cs)
			}
			if !h.stopped() {
				t.Error("the container was not stopped")
			}
			if e := ta.waitEvent(t, ReasonSandboxChanged); e.Message != "Pod sandbox changed, it will be killed and re-created." || e.Type != corev1.EventTypeNormal {
				t.Errorf("event %s %q, want the kubelet's", e.Type, e.Message)
			}
			if tc.policy == corev1.RestartPolicyAlways {
				if _, _, ok := pn.Lookup("u1"); !ok {
					t.Error("the restarted container's pod has no network namespace")
				}
			}
		})
	}
}

// TestStatNetNS: a process's namespace link and the namespace it is in
// compare equal, a namespace and a regular file do not identify alike, and
// a file that is not there identifies nothing.
func TestStatNetNS(t *testing.T) {
	a := &Agent{}
	own := a.ownNetNS()
	if !own.ok || a.statNetNS("/proc/"+strconv.Itoa(os.Getpid())+"/task/"+strconv.Itoa(os.Getpid())+"/ns/net") != own {
		t.Errorf("this process's namespace %+v, as its main thread's link says %+v", own, a.statNetNS("/proc/self/ns/net"))
	}
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := a.statNetNS(file); !got.ok || got == own {
		t.Errorf("a regular file identifies as %+v, the namespace as %+v", got, own)
	}
	if got := a.statNetNS(filepath.Join(t.TempDir(), "missing")); got.ok {
		t.Errorf("a missing file identifies as %+v", got)
	}
}
