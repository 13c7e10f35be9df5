package job

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	dto "github.com/prometheus/client_model/go"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/test/builder"
)

func TestMatchPodFailurePolicy(t *testing.T) {
	const (
		failJob   = batchv1.PodFailurePolicyActionFailJob
		failIndex = batchv1.PodFailurePolicyActionFailIndex
		ignore    = batchv1.PodFailurePolicyActionIgnore
		count     = batchv1.PodFailurePolicyActionCount
		in        = batchv1.PodFailurePolicyOnExitCodesOpIn
		notIn     = batchv1.PodFailurePolicyOnExitCodesOpNotIn
	)
	exitRule, condRule := builder.ExitCodeRule, builder.PodConditionRule
	policy := func(rules ...batchv1.PodFailurePolicyRule) *batchv1.PodFailurePolicy {
		return &batchv1.PodFailurePolicy{Rules: rules}
	}
	failed := func() *builder.PodWrapper { return builder.MakePod("p", "ns").Phase(corev1.PodFailed) }
	exited := func(code int32) *corev1.Pod { return failed().ContainerExited("main", code).Obj() }
	withCond := func(t corev1.PodConditionType, s corev1.ConditionStatus) *corev1.Pod {
		return failed().Condition(t, s).ContainerExited("main", 137).Obj()
	}
	disruption := corev1.DisruptionTarget

	cases := map[string]struct {
		policy *batchv1.PodFailurePolicy
		pod    *corev1.Pod

		wantMsg         *string
		wantCountFailed bool
		wantAction      *batchv1.PodFailurePolicyAction
	}{
		"nil policy": {
			pod:             exited(1),
			wantCountFailed: true,
		},
		"no rules": {
			policy:          policy(),
			pod:             exited(1),
			wantCountFailed: true,
		},
		"In matches FailJob with message": {
			policy:          policy(exitRule(failJob, "", in, 1, 2, 3)),
			pod:             exited(2),
			wantMsg:         ptr.To("Container main for pod ns/p failed with exit code 2 matching FailJob rule at index 0"),
			wantCountFailed: true,
			wantAction:      ptr.To(failJob),
		},
		"In does not match another code": {
			policy:          policy(exitRule(failJob, "", in, 1, 2, 3)),
			pod:             exited(4),
			wantCountFailed: true,
		},
		"NotIn matches a code outside the values": {
			policy:          policy(exitRule(failJob, "", notIn, 1, 2)),
			pod:             exited(42),
			wantMsg:         ptr.To("Container main for pod ns/p failed with exit code 42 matching FailJob rule at index 0"),
			wantCountFailed: true,
			wantAction:      ptr.To(failJob),
		},
		"NotIn does not match a listed code": {
			policy:          policy(exitRule(failJob, "", notIn, 1, 2)),
			pod:             exited(2),
			wantCountFailed: true,
		},
		"exit code 0 never matches NotIn": {
			policy:          policy(exitRule(failJob, "", notIn, 1)),
			pod:             failed().ContainerExited("main", 0).Obj(),
			wantCountFailed: true,
		},
		"exit code 0 never matches In": {
			policy:          policy(exitRule(failJob, "", in, 0, 1)),
			pod:             failed().ContainerExited("main", 0).Obj(),
			wantCountFailed: true,
		},
		"second container matches after a successful first": {
			policy:          policy(exitRule(failJob, "", in, 5)),
			pod:             failed().ContainerExited("a", 0).ContainerExited("b", 5).Obj(),
			wantMsg:         ptr.To("Container b for pod ns/p failed with exit code 5 matching FailJob rule at index 0"),
			wantCountFailed: true,
			wantAction:      ptr.To(failJob),
		},
		"running container has no exit code": {
			policy:          policy(exitRule(failJob, "", notIn, 1)),
			pod:             failed().ContainerRunning("main").Obj(),
			wantCountFailed: true,
		},
		"no container statuses at all": {
			policy:          policy(exitRule(failJob, "", notIn, 1)),
			pod:             failed().Obj(),
			wantCountFailed: true,
		},
		"init container matches": {
			policy:          policy(exitRule(failJob, "", in, 3)),
			pod:             failed().InitContainerExited("setup", 3).Obj(),
			wantMsg:         ptr.To("Container setup for pod ns/p failed with exit code 3 matching FailJob rule at index 0"),
			wantCountFailed: true,
			wantAction:      ptr.To(failJob),
		},
		"regular containers are looked at before init containers": {
			policy:          policy(exitRule(failJob, "", in, 3, 4)),
			pod:             failed().InitContainerExited("setup", 3).ContainerExited("main", 4).Obj(),
			wantMsg:         ptr.To("Container main for pod ns/p failed with exit code 4 matching FailJob rule at index 0"),
			wantCountFailed: true,
			wantAction:      ptr.To(failJob),
		},
		"containerName restricts the match": {
			policy:          policy(exitRule(failJob, "main", in, 7)),
			pod:             failed().ContainerExited("sidecar", 7).ContainerExited("main", 1).Obj(),
			wantCountFailed: true,
		},
		"containerName matches its container": {
			policy:          policy(exitRule(failJob, "main", in, 7)),
			pod:             failed().ContainerExited("sidecar", 1).ContainerExited("main", 7).Obj(),
			wantMsg:         ptr.To("Container main for pod ns/p failed with exit code 7 matching FailJob rule at index 0"),
			wantCountFailed: true,
			wantAction:      ptr.To(failJob),
		},
		"containerName applies to init containers": {
			policy:          policy(exitRule(failJob, "setup", in, 7)),
			pod:             failed().InitContainerExited("setup", 7).ContainerExited("main", 7).Obj(),
			wantMsg:         ptr.To("Container setup for pod ns/p failed with exit code 7 matching FailJob rule at index 0"),
			wantCountFailed: true,
			wantAction:      ptr.To(failJob),
		},
		"Ignore is not counted": {
			policy:     policy(exitRule(ignore, "", in, 1)),
			pod:        exited(1),
			wantAction: ptr.To(ignore),
		},
		"Count is counted": {
			policy:          policy(exitRule(count, "", in, 1)),
			pod:             exited(1),
			wantCountFailed: true,
			wantAction:      ptr.To(count),
		},
		"FailIndex is counted": {
			policy:          policy(exitRule(failIndex, "", in, 1)),
			pod:             exited(1),
			wantCountFailed: true,
			wantAction:      ptr.To(failIndex),
		},
		"first matching rule wins": {
			policy:     policy(exitRule(count, "", in, 9), exitRule(ignore, "", in, 1), exitRule(failJob, "", in, 1)),
			pod:        exited(1),
			wantAction: ptr.To(ignore),
		},
		"index in the message is the matching rule's": {
			policy:          policy(exitRule(ignore, "", in, 9), condRule(ignore, disruption), exitRule(failJob, "", notIn, 0)),
			pod:             exited(1),
			wantMsg:         ptr.To("Container main for pod ns/p failed with exit code 1 matching FailJob rule at index 2"),
			wantCountFailed: true,
			wantAction:      ptr.To(failJob),
		},
		"pod condition matches FailJob with message": {
			policy:          policy(condRule(failJob, disruption)),
			pod:             withCond(disruption, corev1.ConditionTrue),
			wantMsg:         ptr.To("Pod ns/p has condition DisruptionTarget matching FailJob rule at index 0"),
			wantCountFailed: true,
			wantAction:      ptr.To(failJob),
		},
		"pod condition Ignore": {
			policy:     policy(condRule(ignore, disruption), exitRule(failJob, "", in, 137)),
			pod:        withCond(disruption, corev1.ConditionTrue),
			wantAction: ptr.To(ignore),
		},
		"pod condition with another status does not match": {
			policy:          policy(condRule(ignore, disruption)),
			pod:             withCond(disruption, corev1.ConditionFalse),
			wantCountFailed: true,
		},
		"pod condition pattern with status False": {
			policy: policy(batchv1.PodFailurePolicyRule{
				Action:          ignore,
				OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.PodReady, Status: corev1.ConditionFalse}},
			}),
			pod:        withCond(corev1.PodReady, corev1.ConditionFalse),
			wantAction: ptr.To(ignore),
		},
		"any of several patterns": {
			policy: policy(batchv1.PodFailurePolicyRule{
				Action: failJob,
				OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{
					{Type: "Custom", Status: corev1.ConditionTrue},
					{Type: corev1.PodReady, Status: corev1.ConditionFalse},
				},
			}),
			pod:             withCond(corev1.PodReady, corev1.ConditionFalse),
			wantMsg:         ptr.To("Pod ns/p has condition Ready matching FailJob rule at index 0"),
			wantCountFailed: true,
			wantAction:      ptr.To(failJob),
		},
		"missing pod condition falls through to the next rule": {
			policy:          policy(condRule(ignore, disruption), exitRule(count, "", in, 137)),
			pod:             exited(137),
			wantCountFailed: true,
			wantAction:      ptr.To(count),
		},
		"rule without requirement is skipped": {
			policy:          policy(batchv1.PodFailurePolicyRule{Action: ignore}, exitRule(count, "", in, 1)),
			pod:             exited(1),
			wantCountFailed: true,
			wantAction:      ptr.To(count),
		},
		"unknown action is skipped": {
			policy:          policy(exitRule("Retry", "", in, 1), exitRule(ignore, "", in, 1)),
			pod:             exited(1),
			wantAction:      ptr.To(ignore),
			wantCountFailed: false,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			msg, countFailed, action := matchPodFailurePolicy(tc.policy, tc.pod)
			if diff := cmp.Diff(tc.wantMsg, msg); diff != "" {
				t.Errorf("message (-want +got):\n%s", diff)
			}
			if countFailed != tc.wantCountFailed {
				t.Errorf("countFailed = %v, want %v", countFailed, tc.wantCountFailed)
			}
			if diff := cmp.Diff(tc.wantAction, action); diff != "" {
				t.Errorf("action (-want +got):\n%s", diff)
			}
		})
	}
}

// policyActions reads pod_failures_handled_by_failure_policy_total for
// every action, leaving out zeros.
func policyActions(t *testing.T, h *harness) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, a := range []string{"FailJob", "FailIndex", "Ignore", "Count"} {
		var m dto.Metric
		if err := h.c.metrics.PodFailuresHandledByFailurePolicy.WithLabelValues(a).Write(&m); err != nil {
			t.Fatal(err)
		}
		if v := m.GetCounter().GetValue(); v != 0 {
			out[a] = v
		}
	}
	return out
}

// conditionMessages returns "Type: message" for each condition of the Job.
func conditionMessages(job *batchv1.Job) []string {
	var out []string
	for _, c := range job.Status.Conditions {
		out = append(out, string(c.Type)+": "+c.Message)
	}
	return out
}

// TestSyncPodFailurePolicy runs one sync of a Job with a podFailurePolicy
// and checks the status, the pods, the writes, the events and the metric.
func TestSyncPodFailurePolicy(t *testing.T) {
	const uid = "job-uid"
	const (
		failJob = batchv1.PodFailurePolicyActionFailJob
		ignore  = batchv1.PodFailurePolicyActionIgnore
		count   = batchv1.PodFailurePolicyActionCount
		in      = batchv1.PodFailurePolicyOnExitCodesOpIn
	)
	started := metav1.NewTime(t0.Add(-time.Minute))
	running := func(active int32) batchv1.JobStatus {
		return batchv1.JobStatus{StartTime: &started, Active: active, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0)}
	}
	// The policy used by most cases: exit code 42 fails the Job, a
	// disruption is ignored, exit code 3 is counted.
	base := func() *builder.JobWrapper {
		return builder.MakeJob("j", ns).Selector(uid).ManagedBy(DefaultManagedBy).BackoffLimit(0).PodFailurePolicy(
			builder.ExitCodeRule(failJob, "", in, 42),
			builder.PodConditionRule(ignore, corev1.DisruptionTarget),
			builder.ExitCodeRule(count, "", in, 3),
		)
	}
	pod := func(name string, job *batchv1.Job) *builder.PodWrapper {
		return builder.MakePod(name, ns).UID(name).OwnedByJob(job).Finalizer(batchv1.JobTrackingFinalizer).NodeName("n")
	}
	failedWith := func(name string, job *batchv1.Job, code int32) *builder.PodWrapper {
		return pod(name, job).Phase(corev1.PodFailed).ContainerExited("main", code)
	}
	deleting := metav1.NewTime(t0.Add(-time.Second))

	cases := map[string]struct {
		// setup
		job  *batchv1.Job
		pods func(job *batchv1.Job) []*corev1.Pod
		// want
		want           statusCounts
		wantMessages   []string
		wantPods       int
		wantFinalizers int
		wantWrites     map[string]int
		wantEvents     []string
		wantActions    map[string]float64
	}{
		"FailJob match sets FailureTarget and deletes running pods": {
			job: base().Parallelism(2).Completions(2).Status(running(2)).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{failedWith("a", job, 42).Obj(), pod("b", job).Phase(corev1.PodRunning).Obj()}
			},
			// b is deleted and counted as failed (both moved into the counter
			// in this sync's second status write), but still terminating:
			// the Job is not Failed yet.
			want:         statusCounts{Terminating: 1, Failed: 2, Started: true, Conditions: []string{"FailureTarget=True/PodFailurePolicy"}},
			wantMessages: []string{"FailureTarget: Container main for pod ns/a failed with exit code 42 matching FailJob rule at index 0"},
			wantPods:     1,
			wantWrites:   map[string]int{"update jobs/status": 2, "patch pods": 2, "delete pods": 1},
			wantEvents:   []string{"SuccessfulDelete"},
			wantActions:  map[string]float64{"FailJob": 1},
		},
		"FailJob match with nothing running fails the Job at once": {
			job: base().Parallelism(1).Completions(1).Status(running(1)).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{failedWith("a", job, 42).Obj()}
			},
			want: statusCounts{Failed: 1, Started: true, Conditions: []string{"FailureTarget=True/PodFailurePolicy", "Failed=True/PodFailurePolicy"}},
			wantMessages: []string{
				"FailureTarget: Container main for pod ns/a failed with exit code 42 matching FailJob rule at index 0",
				"Failed: Container main for pod ns/a failed with exit code 42 matching FailJob rule at index 0",
			},
			wantPods:    1,
			wantWrites:  map[string]int{"update jobs/status": 2, "patch pods": 1},
			wantEvents:  []string{"PodFailurePolicy"},
			wantActions: map[string]float64{"FailJob": 1},
		},
		"FailJob wins over backoffLimit": {
			job: base().Parallelism(2).Completions(2).Status(running(2)).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{failedWith("a", job, 1).Obj(), failedWith("b", job, 42).Obj()}
			},
			want: statusCounts{Failed: 2, Started: true, Conditions: []string{"FailureTarget=True/PodFailurePolicy", "Failed=True/PodFailurePolicy"}},
			wantMessages: []string{
				"FailureTarget: Container main for pod ns/b failed with exit code 42 matching FailJob rule at index 0",
				"Failed: Container main for pod ns/b failed with exit code 42 matching FailJob rule at index 0",
			},
			wantPods:    2,
			wantWrites:  map[string]int{"update jobs/status": 2, "patch pods": 2},
			wantEvents:  []string{"PodFailurePolicy"},
			wantActions: map[string]float64{"FailJob": 1},
		},
		"pod condition FailJob message": {
			job: builder.MakeJob("j", ns).Selector(uid).ManagedBy(DefaultManagedBy).PodFailurePolicy(
				builder.PodConditionRule(failJob, corev1.DisruptionTarget)).Status(running(1)).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{failedWith("a", job, 137).Condition(corev1.DisruptionTarget, corev1.ConditionTrue).Obj()}
			},
			want: statusCounts{Failed: 1, Started: true, Conditions: []string{"FailureTarget=True/PodFailurePolicy", "Failed=True/PodFailurePolicy"}},
			wantMessages: []string{
				"FailureTarget: Pod ns/a has condition DisruptionTarget matching FailJob rule at index 0",
				"Failed: Pod ns/a has condition DisruptionTarget matching FailJob rule at index 0",
			},
			wantPods:    1,
			wantWrites:  map[string]int{"update jobs/status": 2, "patch pods": 1},
			wantEvents:  []string{"PodFailurePolicy"},
			wantActions: map[string]float64{"FailJob": 1},
		},
		"Ignore: not counted, finalizer removed, pod replaced": {
			job: base().Parallelism(1).Completions(1).Status(running(1)).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{failedWith("a", job, 137).Condition(corev1.DisruptionTarget, corev1.ConditionTrue).Obj()}
			},
			// Active stays 1 (the replacement) and nothing is counted: like
			// upstream, no status write is needed.
			want:           statusCounts{Active: 1, Started: true},
			wantPods:       2,
			wantFinalizers: 1,
			wantWrites:     map[string]int{"create pods": 1, "patch pods": 1},
			wantEvents:     []string{"SuccessfulCreate"},
			wantActions:    map[string]float64{"Ignore": 1},
		},
		"Count: counted against backoffLimit": {
			job: base().Parallelism(1).Completions(1).Status(running(1)).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{failedWith("a", job, 3).Obj()}
			},
			want:         statusCounts{Failed: 1, Started: true, Conditions: []string{"FailureTarget=True/BackoffLimitExceeded", "Failed=True/BackoffLimitExceeded"}},
			wantMessages: []string{"FailureTarget: Job has reached the specified backoff limit", "Failed: Job has reached the specified backoff limit"},
			wantPods:     1,
			wantWrites:   map[string]int{"update jobs/status": 2, "patch pods": 1},
			wantEvents:   []string{"BackoffLimitExceeded"},
			wantActions:  map[string]float64{"Count": 1},
		},
		"no rule matched: an ordinary failure, not in the metric": {
			job: base().Parallelism(1).Completions(1).Status(running(1)).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{failedWith("a", job, 1).Obj()}
			},
			want:         statusCounts{Failed: 1, Started: true, Conditions: []string{"FailureTarget=True/BackoffLimitExceeded", "Failed=True/BackoffLimitExceeded"}},
			wantMessages: []string{"FailureTarget: Job has reached the specified backoff limit", "Failed: Job has reached the specified backoff limit"},
			wantPods:     1,
			wantWrites:   map[string]int{"update jobs/status": 2, "patch pods": 1},
			wantEvents:   []string{"BackoffLimitExceeded"},
		},
		"ignored pods do not reach backoffLimit while others do": {
			job: base().BackoffLimit(1).Parallelism(3).Completions(3).Status(running(3)).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{
					failedWith("a", job, 137).Condition(corev1.DisruptionTarget, corev1.ConditionTrue).Obj(),
					failedWith("b", job, 137).Condition(corev1.DisruptionTarget, corev1.ConditionTrue).Obj(),
					failedWith("c", job, 3).Obj(),
				}
			},
			want:           statusCounts{Active: 3, Failed: 1, Started: true},
			wantPods:       6,
			wantFinalizers: 3,
			wantWrites:     map[string]int{"update jobs/status": 2, "patch pods": 3, "create pods": 3},
			wantEvents:     []string{"SuccessfulCreate", "SuccessfulCreate", "SuccessfulCreate"},
			wantActions:    map[string]float64{"Ignore": 2, "Count": 1},
		},
		"terminating pod is neither matched, counted nor replaced": {
			job: base().Parallelism(1).Completions(1).Status(running(1)).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				// Its container already exited with 42, but the pod is not
				// Failed yet: the policy only judges failed pods.
				return []*corev1.Pod{pod("a", job).Phase(corev1.PodRunning).ContainerExited("main", 42).DeletionTimestamp(deleting).Obj()}
			},
			want:           statusCounts{Terminating: 1, Started: true},
			wantPods:       1,
			wantFinalizers: 1,
			wantWrites:     map[string]int{"update jobs/status": 1},
		},
		"deleted pod that reached Failed is matched": {
			job: base().Parallelism(1).Completions(1).Status(batchv1.JobStatus{StartTime: &started, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](1)}).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{failedWith("a", job, 137).Condition(corev1.DisruptionTarget, corev1.ConditionTrue).DeletionTimestamp(deleting).Obj()}
			},
			want:        statusCounts{Started: true},
			wantPods:    1,
			wantWrites:  map[string]int{"update jobs/status": 1, "patch pods": 1},
			wantActions: map[string]float64{"Ignore": 1},
		},
		"running pods of a failing Job are matched too": {
			// Upstream matches every pod it accounts as failed once the Job
			// is failing, so a disrupted pod still running is ignored.
			job: base().Parallelism(2).Completions(2).Status(running(2)).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{
					failedWith("a", job, 42).Obj(),
					pod("b", job).Phase(corev1.PodRunning).Condition(corev1.DisruptionTarget, corev1.ConditionTrue).Obj(),
				}
			},
			want:         statusCounts{Terminating: 1, Failed: 1, Started: true, Conditions: []string{"FailureTarget=True/PodFailurePolicy"}},
			wantMessages: []string{"FailureTarget: Container main for pod ns/a failed with exit code 42 matching FailJob rule at index 0"},
			wantPods:     1,
			wantWrites:   map[string]int{"update jobs/status": 2, "patch pods": 2, "delete pods": 1},
			wantEvents:   []string{"SuccessfulDelete"},
			wantActions:  map[string]float64{"FailJob": 1, "Ignore": 1},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var pods []*corev1.Pod
			if tc.pods != nil {
				pods = tc.pods(tc.job)
			}
			h, got, gotPods := syncFresh(t, Options{}, tc.job, pods...)
			if diff := cmp.Diff(tc.want, countsOf(got), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantMessages, conditionMessages(got), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("condition messages (-want +got):\n%s", diff)
			}
			h.checkSyncEffects(t, gotPods, tc.wantPods, tc.wantFinalizers, tc.wantWrites, tc.wantEvents)
			if diff := cmp.Diff(tc.wantActions, policyActions(t, h), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("pod_failures_handled_by_failure_policy_total (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSyncFailJobWaitsForTerminatingPods follows a FailJob match over three
// syncs: FailureTarget and the counters first (the running pod deleted and
// counted in the same sync), no change next while that pod is still
// terminating, and Failed with the rule's message only once it is gone.
func TestSyncFailJobWaitsForTerminatingPods(t *testing.T) {
	started := metav1.NewTime(t0.Add(-time.Minute))
	job := builder.MakeJob("j", ns).Selector("u").ManagedBy(DefaultManagedBy).Parallelism(2).Completions(2).
		PodFailurePolicy(builder.ExitCodeRule(batchv1.PodFailurePolicyActionFailJob, "main", batchv1.PodFailurePolicyOnExitCodesOpIn, 42)).
		Status(batchv1.JobStatus{StartTime: &started, Active: 2, Ready: ptr.To[int32](1), Terminating: ptr.To[int32](0)}).Obj()
	pod := func(name string) *builder.PodWrapper {
		return builder.MakePod(name, ns).UID(name).OwnedByJob(job).Finalizer(batchv1.JobTrackingFinalizer).NodeName("n")
	}
	a := pod("a").Phase(corev1.PodFailed).ContainerExited("main", 42).Obj()
	b := pod("b").Phase(corev1.PodRunning).Ready().Obj()
	h := newHarness(t, Options{}, job, a, b)
	const msg = "Container main for pod ns/a failed with exit code 42 matching FailJob rule at index 0"

	got, _ := h.sync(t, job)
	if diff := cmp.Diff(statusCounts{Terminating: 1, Failed: 2, Started: true, Conditions: []string{"FailureTarget=True/PodFailurePolicy"}}, countsOf(got), cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("first sync (-want +got):\n%s", diff)
	}
	// The informers now show both finalizers gone and b being deleted.
	released := func(p *corev1.Pod) *corev1.Pod {
		p = p.DeepCopy()
		p.Finalizers = nil
		return p
	}
	bDeleting := released(b)
	bDeleting.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
	for _, p := range []*corev1.Pod{released(a), bDeleting} {
		if err := h.c.podIndexer.Update(p); err != nil {
			t.Fatal(err)
		}
		h.c.finalizers.observed(jobKey(job), p.UID)
	}
	if err := refreshJob(h, got); err != nil {
		t.Fatal(err)
	}
	h.clock.Step(time.Second)
	got, _ = h.sync(t, got)
	if diff := cmp.Diff(statusCounts{Failed: 2, Terminating: 1, Started: true, Conditions: []string{"FailureTarget=True/PodFailurePolicy"}}, countsOf(got), cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("second sync, b terminating (-want +got):\n%s", diff)
	}
	if len(h.drainEvents()) != 1 {
		t.Errorf("want only the deletion event so far")
	}

	bFailed := bDeleting.DeepCopy()
	bFailed.Status.Phase = corev1.PodFailed
	if err := h.c.podIndexer.Update(bFailed); err != nil {
		t.Fatal(err)
	}
	if err := refreshJob(h, got); err != nil {
		t.Fatal(err)
	}
	got, _ = h.sync(t, got)
	if diff := cmp.Diff(statusCounts{Failed: 2, Started: true, Conditions: []string{"FailureTarget=True/PodFailurePolicy", "Failed=True/PodFailurePolicy"}}, countsOf(got), cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("third sync, b failed (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"FailureTarget: " + msg, "Failed: " + msg}, conditionMessages(got)); diff != "" {
		t.Errorf("condition messages (-want +got):\n%s", diff)
	}
	if got.Status.CompletionTime != nil {
		t.Errorf("a failed Job has completionTime %v", got.Status.CompletionTime)
	}
	if diff := cmp.Diff([]string{"PodFailurePolicy"}, h.drainEvents()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]float64{"FailJob": 1}, policyActions(t, h)); diff != "" {
		t.Errorf("pod_failures_handled_by_failure_policy_total (-want +got):\n%s", diff)
	}
}

// TestSyncIgnoredFailureBackoff: a failure matching Ignore is not counted,
// but, as upstream, it delays the replacement by the failure backoff.
func TestSyncIgnoredFailureBackoff(t *testing.T) {
	started := metav1.NewTime(t0.Add(-time.Minute))
	job := builder.MakeJob("j", ns).Selector("u").ManagedBy(DefaultManagedBy).BackoffLimit(0).
		PodFailurePolicy(builder.PodConditionRule(batchv1.PodFailurePolicyActionIgnore, corev1.DisruptionTarget)).
		Status(batchv1.JobStatus{StartTime: &started, Active: 1, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0)}).Obj()
	failed := builder.MakePod("a", ns).UID("a").OwnedByJob(job).Finalizer(batchv1.JobTrackingFinalizer).
		Terminated(137, metav1.NewTime(t0)).Condition(corev1.DisruptionTarget, corev1.ConditionTrue).Obj()
	h := newHarness(t, Options{PodFailureBackoff: 10 * time.Second}, job, failed)
	got, pods := h.sync(t, job)
	if diff := cmp.Diff(statusCounts{Started: true}, countsOf(got), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("after the ignored failure (-want +got):\n%s", diff)
	}
	if len(pods) != 1 || finalizersLeft(pods) != 0 {
		t.Fatalf("after the ignored failure: %d pods, %d finalizers, want 1 pod without finalizer", len(pods), finalizersLeft(pods))
	}
	released := failed.DeepCopy()
	released.Finalizers = nil
	if err := h.c.podIndexer.Update(released); err != nil {
		t.Fatal(err)
	}
	h.c.finalizers.observed(jobKey(job), released.UID)
	if err := refreshJob(h, got); err != nil {
		t.Fatal(err)
	}
	h.clock.Step(11 * time.Second)
	got, pods = h.sync(t, got)
	if diff := cmp.Diff(statusCounts{Active: 1, Started: true}, countsOf(got), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("after the backoff (-want +got):\n%s", diff)
	}
	if len(pods) != 2 {
		t.Errorf("after the backoff: %d pods, want 2 (one replacement)", len(pods))
	}
}
