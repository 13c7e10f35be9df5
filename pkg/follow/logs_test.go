package follow

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"jobkeeper.dev/jobkeeper/test/builder"
)

// TestResumePoint replays a log stream cut after the second of three lines
// written in the same second, then reopened from that second.
func TestResumePoint(t *testing.T) {
	first := []string{
		"2026-01-02T15:04:04.5Z before",
		"2026-01-02T15:04:05.1Z a",
		"2026-01-02T15:04:05.1Z b",
	}
	second := []string{ // sinceTime=15:04:05 repeats what was copied
		"2026-01-02T15:04:05.1Z a",
		"2026-01-02T15:04:05.1Z b",
		"2026-01-02T15:04:05.1Z c",
		"2026-01-02T15:04:06Z d",
		"no timestamp",
	}
	third := []string{ // and again, after d
		"2026-01-02T15:04:06Z d",
		"2026-01-02T15:04:06Z e",
	}
	var r resumePoint
	var got []string
	for _, stream := range [][]string{first, second, third} {
		r.begin()
		for _, l := range stream {
			if text, ok := r.accept(l); ok {
				got = append(got, text)
			}
		}
	}
	want := []string{"before", "a", "b", "c", "d", "no timestamp", "e"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("lines (-want +got):\n%s", diff)
	}
}

func TestLineOf(t *testing.T) {
	job := builder.MakeJob("j", "ns").UID("u").Obj()
	indexed := builder.MakePod("j-3-abc", "ns").OwnedByJob(job).Index("3").Obj()
	plain := builder.MakePod("j-xyz", "ns").OwnedByJob(job).Obj()
	two := plain.DeepCopy()
	two.Spec.Containers = append(two.Spec.Containers, corev1.Container{Name: "side"})
	cases := map[string]struct {
		pod  *corev1.Pod
		want Line
	}{
		"indexed":        {pod: indexed, want: Line{Pod: "j-3-abc", Container: "main", Index: "3", Prefix: "[index 3]"}},
		"non-indexed":    {pod: plain, want: Line{Pod: "j-xyz", Container: "main", Prefix: "[pod/j-xyz]"}},
		"two containers": {pod: two, want: Line{Pod: "j-xyz", Container: "main", Prefix: "[pod/j-xyz/main]"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, lineOf(tc.pod, "main")); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestContainerStarted(t *testing.T) {
	p := builder.MakePod("p", "ns").Obj()
	if containerStarted(p, "main") {
		t.Error("a pod with no container status has started")
	}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{}}}}
	if containerStarted(p, "main") {
		t.Error("a waiting container has started")
	}
	p.Status.ContainerStatuses[0].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	if !containerStarted(p, "main") {
		t.Error("a running container has not started")
	}
}
