package follow

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"jobkeeper.dev/jobkeeper/test/builder"
)

func TestFailedPods(t *testing.T) {
	failed := func(name string, exit int32, finished time.Duration) *builder.PodWrapper {
		return builder.MakePod(name, "ns").Terminated(exit, at(finished))
	}
	withStatus := func(w *builder.PodWrapper, change func(*corev1.PodStatus)) *corev1.Pod {
		p := w.Obj()
		change(&p.Status)
		return p
	}
	cases := map[string]struct {
		// pods are the Job's pods; limit caps the pods named.
		pods  []*corev1.Pod
		limit int
		// want are the pods named, wantMore the number not named.
		want     []FailedPod
		wantMore int
	}{
		"exit code, reason and termination message": {
			pods: []*corev1.Pod{withStatus(failed("j-a", 3, 0), func(s *corev1.PodStatus) {
				s.ContainerStatuses[0].State.Terminated.Message = "disk full\n"
			})},
			want: []FailedPod{{Name: "j-a", Container: "main", ExitCode: 3, Reason: "Error", Message: "disk full"}},
		},
		"succeeded, running and pending pods are not failed pods": {
			pods: []*corev1.Pod{
				failed("j-ok", 0, 0).Obj(),
				builder.MakePod("j-run", "ns").Phase(corev1.PodRunning).Obj(),
				builder.MakePod("j-new", "ns").Obj(),
			},
		},
		"OOMKilled, with the index of an Indexed Job's pod": {
			pods: []*corev1.Pod{withStatus(failed("j-4-x", 137, 0).Index("4"), func(s *corev1.PodStatus) {
				s.ContainerStatuses[0].State.Terminated.Reason = "OOMKilled"
			})},
			want: []FailedPod{{Name: "j-4-x", Index: "4", Container: "main", ExitCode: 137, Reason: "OOMKilled"}},
		},
		"the pod's reason and message win: evicted": {
			pods: []*corev1.Pod{withStatus(failed("j-ev", 137, 0), func(s *corev1.PodStatus) {
				s.Reason, s.Message = "Evicted", "The node was low on resource: memory."
			})},
			want: []FailedPod{{Name: "j-ev", Container: "main", ExitCode: 137, Reason: "Evicted", Message: "The node was low on resource: memory."}},
		},
		"pod deadline exceeded, no container ran": {
			pods: []*corev1.Pod{withStatus(builder.MakePod("j-dl", "ns").Phase(corev1.PodFailed), func(s *corev1.PodStatus) {
				s.Reason, s.Message = "DeadlineExceeded", "Pod was active on the node longer than the specified deadline"
			})},
			want: []FailedPod{{Name: "j-dl", Reason: "DeadlineExceeded", Message: "Pod was active on the node longer than the specified deadline"}},
		},
		"no reason: the DisruptionTarget condition's": {
			pods: []*corev1.Pod{withStatus(builder.MakePod("j-dt", "ns").Phase(corev1.PodFailed), func(s *corev1.PodStatus) {
				s.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
					Reason: "DeletionByTaintManager", Message: "Taint manager: deleting due to NoExecute taint"}}
			})},
			want: []FailedPod{{Name: "j-dt", Reason: "DeletionByTaintManager", Message: "Taint manager: deleting due to NoExecute taint"}},
		},
		"a failed init container, before the containers that did not run": {
			pods: []*corev1.Pod{withStatus(builder.MakePod("j-init", "ns").Phase(corev1.PodFailed), func(s *corev1.PodStatus) {
				s.InitContainerStatuses = []corev1.ContainerStatus{
					{Name: "fetch", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}},
					{Name: "setup", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 2, Reason: "Error"}}},
				}
				s.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}}
			})},
			want: []FailedPod{{Name: "j-init", Container: "setup", ExitCode: 2, Reason: "Error"}},
		},
		"restartPolicy OnFailure: a running pod's last non-zero exit": {
			pods: []*corev1.Pod{withStatus(builder.MakePod("j-loop", "ns").Phase(corev1.PodRunning), func(s *corev1.PodStatus) {
				s.ContainerStatuses = []corev1.ContainerStatus{{
					Name: "main", RestartCount: 6,
					State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
					LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: "bad config"}},
				}}
			})},
			want: []FailedPod{{Name: "j-loop", Container: "main", ExitCode: 1, Reason: "Error", Message: "bad config"}},
		},
		"a message of several lines: its last line; a long one: cut": {
			pods: []*corev1.Pod{
				withStatus(failed("j-tb", 1, 0), func(s *corev1.PodStatus) {
					s.ContainerStatuses[0].State.Terminated.Message = "Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: boom\n\n"
				}),
				withStatus(failed("j-long", 1, time.Second), func(s *corev1.PodStatus) {
					s.ContainerStatuses[0].State.Terminated.Message = strings.Repeat("x", 200)
				}),
			},
			want: []FailedPod{
				{Name: "j-tb", Container: "main", ExitCode: 1, Reason: "Error", Message: "…ValueError: boom"},
				{Name: "j-long", Container: "main", ExitCode: 1, Reason: "Error", Message: strings.Repeat("x", maxFailureMessage-1) + "…"},
			},
		},
		"order: not being deleted first, then by index, then the earliest failure": {
			pods: []*corev1.Pod{
				failed("j-0-stopped", 143, 0).Index("0").DeletionTimestamp(mt0).Obj(),
				failed("j-2-first", 1, 0).Index("2").Obj(),
				failed("j-1-second", 1, 2*time.Second).Index("1").Obj(),
				failed("j-1-first", 1, time.Second).Index("1").Obj(),
			},
			want: []FailedPod{
				{Name: "j-1-first", Index: "1", Container: "main", ExitCode: 1, Reason: "Error"},
				{Name: "j-1-second", Index: "1", Container: "main", ExitCode: 1, Reason: "Error"},
				{Name: "j-2-first", Index: "2", Container: "main", ExitCode: 1, Reason: "Error"},
				{Name: "j-0-stopped", Index: "0", Container: "main", ExitCode: 143, Reason: "Error", Deleting: true},
			},
		},
		"over the limit: the first ones, the others counted": {
			pods: []*corev1.Pod{
				failed("j-c", 1, 3*time.Second).Obj(),
				failed("j-a", 1, time.Second).Obj(),
				failed("j-d", 1, 4*time.Second).Obj(),
				failed("j-b", 1, 2*time.Second).Obj(),
			},
			limit: 2,
			want: []FailedPod{
				{Name: "j-a", Container: "main", ExitCode: 1, Reason: "Error"},
				{Name: "j-b", Container: "main", ExitCode: 1, Reason: "Error"},
			},
			wantMore: 2,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			limit := tc.limit
			if limit == 0 {
				limit = MaxFailedPods
			}
			got, more := failedPods(tc.pods, limit)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("failed pods (-want +got):\n%s", diff)
			}
			if more != tc.wantMore {
				t.Errorf("%d more, want %d", more, tc.wantMore)
			}
		})
	}
}

func TestFailureLines(t *testing.T) {
	failedState := func(more int, pods ...FailedPod) State {
		return State{Namespace: "ns", Name: "j", Outcome: Failed, Reason: "FailedIndexes", FailedPods: pods, MoreFailedPods: more}
	}
	cases := map[string]struct {
		state State
		want  []string
	}{
		"complete: none": {state: State{Outcome: Complete}},
		"deleted: none":  {state: State{Outcome: Deleted}},
		"failed, no pod left": {
			state: failedState(0),
			want:  []string{"no failed pod left to inspect"},
		},
		"container exit code, reason and message": {
			state: failedState(0, FailedPod{Name: "j-x", Container: "main", ExitCode: 3, Reason: "Error", Message: "disk full"}),
			want:  []string{"failed pod/j-x: container main exit code 3 (Error): disk full"},
		},
		"index, no reason, no message": {
			state: failedState(0, FailedPod{Name: "j-7-x", Index: "7", Container: "work", ExitCode: 2}),
			want:  []string{"failed pod/j-7-x [index 7]: container work exit code 2"},
		},
		"no container: the pod's reason": {
			state: failedState(0, FailedPod{Name: "j-x", Reason: "Evicted", Message: "The node was low on resource: memory."}),
			want:  []string{"failed pod/j-x: Evicted: The node was low on resource: memory."},
		},
		"nothing known": {
			state: failedState(0, FailedPod{Name: "j-x"}),
			want:  []string{"failed pod/j-x: failed, no reason given"},
		},
		"being deleted, and more": {
			state: failedState(3, FailedPod{Name: "j-x", Container: "main", ExitCode: 143, Reason: "Error", Deleting: true}),
			want:  []string{"failed pod/j-x (being deleted): container main exit code 143 (Error)", "and 3 more failed pods"},
		},
		"one more": {
			state: failedState(1, FailedPod{Name: "j-x", Container: "main", ExitCode: 1}),
			want:  []string{"failed pod/j-x: container main exit code 1", "and 1 more failed pod"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, failureLines(tc.state, "failed ")); diff != "" {
				t.Errorf("lines (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPlainFailedPods checks where the failed pods' lines go: after the
// Failed condition, before the last line.
func TestPlainFailedPods(t *testing.T) {
	var out strings.Builder
	NewPlain(&out, clocktesting.NewFakePassiveClock(t0)).State(State{
		Namespace: "ns", Name: "j", Completions: 1, Parallelism: 1, Failed: 1, Elapsed: 3 * time.Second,
		Conditions: []Condition{{Type: "Failed", Status: "True", Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit"}},
		Outcome:    Failed, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit",
		FailedPods: []FailedPod{{Name: "j-x", Container: "main", ExitCode: 3, Reason: "Error"}},
	})
	want := `2026-01-02T15:04:05Z job ns/j: NonIndexed, 1 completions, parallelism 1
2026-01-02T15:04:05Z progress: succeeded 0/1, failed 1, active 0, ready 0, terminating 0 (elapsed 3s)
2026-01-02T15:04:05Z condition Failed=True (BackoffLimitExceeded): Job has reached the specified backoff limit
2026-01-02T15:04:05Z failed pod/j-x: container main exit code 3 (Error)
2026-01-02T15:04:05Z job ns/j failed after 3s: BackoffLimitExceeded: Job has reached the specified backoff limit
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
}
