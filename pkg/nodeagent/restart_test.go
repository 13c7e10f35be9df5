package nodeagent

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestShouldRestart(t *testing.T) {
	cases := map[string]struct {
		policy corev1.RestartPolicy
		isInit bool
		code   int32
		want   bool
	}{
		"always, success":      {policy: corev1.RestartPolicyAlways, code: 0, want: true},
		"always, failure":      {policy: corev1.RestartPolicyAlways, code: 1, want: true},
		"always, init success": {policy: corev1.RestartPolicyAlways, isInit: true, code: 0, want: false},
		"always, init failure": {policy: corev1.RestartPolicyAlways, isInit: true, code: 2, want: true},
		"on failure, success":  {policy: corev1.RestartPolicyOnFailure, code: 0, want: false},
		"on failure, failure":  {policy: corev1.RestartPolicyOnFailure, code: 137, want: true},
		"never, failure":       {policy: corev1.RestartPolicyNever, code: 1, want: false},
		"never, init failure":  {policy: corev1.RestartPolicyNever, isInit: true, code: 1, want: false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := shouldRestart(tc.policy, tc.isInit, tc.code); got != tc.want {
				t.Errorf("shouldRestart() = %v, want %v", got, tc.want)
			}
		})
	}
}
