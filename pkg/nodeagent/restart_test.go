package nodeagent

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestShouldRestart(t *testing.T) {
	cases := map[string]struct {
		policy corev1.RestartPolicy
		kind   containerKind
		code   int32
		want   bool
	}{
		"always, success":          {policy: corev1.RestartPolicyAlways, kind: kindMain, code: 0, want: true},
		"always, failure":          {policy: corev1.RestartPolicyAlways, kind: kindMain, code: 1, want: true},
		"always, init success":     {policy: corev1.RestartPolicyAlways, kind: kindInit, code: 0, want: false},
		"always, init failure":     {policy: corev1.RestartPolicyAlways, kind: kindInit, code: 2, want: true},
		"on failure, success":      {policy: corev1.RestartPolicyOnFailure, kind: kindMain, code: 0, want: false},
		"on failure, failure":      {policy: corev1.RestartPolicyOnFailure, kind: kindMain, code: 137, want: true},
		"never, failure":           {policy: corev1.RestartPolicyNever, kind: kindMain, code: 1, want: false},
		"never, init failure":      {policy: corev1.RestartPolicyNever, kind: kindInit, code: 1, want: false},
		"never, sidecar success":   {policy: corev1.RestartPolicyNever, kind: kindSidecar, code: 0, want: true},
		"never, sidecar failure":   {policy: corev1.RestartPolicyNever, kind: kindSidecar, code: 1, want: true},
		"on failure, sidecar exit": {policy: corev1.RestartPolicyOnFailure, kind: kindSidecar, code: 0, want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := shouldRestart(tc.policy, tc.kind, tc.code); got != tc.want {
				t.Errorf("shouldRestart() = %v, want %v", got, tc.want)
			}
		})
	}
}
