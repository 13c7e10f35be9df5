package job

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
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
