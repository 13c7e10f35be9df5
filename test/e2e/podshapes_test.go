package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"jobkeeper.dev/jobkeeper/test/builder"
)

// TestUpRunsJobsWithNativeSidecars runs a NonIndexed and an Indexed Job
// whose pods have a native sidecar (an init container with restartPolicy
// Always) that never exits on its own: the sidecar must start before the
// main container, be stopped once the main container has exited, and the
// pods must succeed so that the Jobs complete.
func TestUpRunsJobsWithNativeSidecars(t *testing.T) {
	ctx := context.Background()
	up, c, _ := startUp(t, t.TempDir())
	defer up.stop(t)
	ns := "default"
	// The sidecar is its namespace's PID 1, which gets no SIGTERM it has no
	// handler for: it traps it, or its stop would take the grace period.
	sidecarCmd := []string{"sh", "-c", "trap 'exit 0' TERM; echo sidecar index=$JOB_COMPLETION_INDEX; while true; do sleep 1; done"}
	jobs := map[string]*batchv1.Job{
		"nonindexed": builder.MakeJob("with-sidecar", ns).Completions(2).Parallelism(2).
			Sidecar("proxy", sidecarCmd...).Command("sh", "-c", "sleep 1; echo main done").Obj(),
		"indexed": builder.MakeJob("indexed-with-sidecar", ns).Indexed().Completions(2).Parallelism(2).
			Sidecar("proxy", sidecarCmd...).Command("sh", "-c", "sleep 1; echo main $JOB_COMPLETION_INDEX").Obj(),
	}
	for name, job := range jobs {
		created, err := c.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		jobs[name] = created
	}
	for name, job := range jobs {
		t.Run(name, func(t *testing.T) {
			var got *batchv1.Job
			err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, nodeTimeout, true, func(ctx context.Context) (bool, error) {
				j, err := c.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{})
				got = j
				return err == nil && hasCondition(batchv1.JobComplete)(j), nil
			})
			if err != nil {
				t.Fatalf("job %s never completed; its pods: %s", job.Name, describePods(podsOf(t, c, job)))
			}
			if got.Status.Succeeded != 2 || got.Status.Failed != 0 {
				t.Errorf("succeeded %d, failed %d; want 2 and 0", got.Status.Succeeded, got.Status.Failed)
			}
			for _, p := range podsOf(t, c, job) {
				if p.Status.Phase != corev1.PodSucceeded {
					t.Errorf("pod %s: phase %s, want Succeeded", p.Name, p.Status.Phase)
				}
				if len(p.Status.InitContainerStatuses) != 1 || p.Status.InitContainerStatuses[0].State.Terminated == nil {
					t.Errorf("pod %s: sidecar status %+v, want terminated", p.Name, p.Status.InitContainerStatuses)
				}
				logs, err := c.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: "proxy"}).DoRaw(ctx)
				if err != nil {
					t.Fatalf("sidecar logs of %s: %v", p.Name, err)
				}
				// JOB_COMPLETION_INDEX is set in init containers too.
				if want := "sidecar index=" + p.Annotations[batchv1.JobCompletionIndexAnnotation] + "\n"; string(logs) != want {
					t.Errorf("pod %s: sidecar logs %q, want %q", p.Name, logs, want)
				}
			}
		})
	}
}

// TestUpRunsArgsOnlyPod runs what `kubectl run x --image=busybox -- sleep 1`
// creates: a container with args and no command. The image's entrypoint is
// unknown to the process runtime, so args run as the command.
func TestUpRunsArgsOnlyPod(t *testing.T) {
	ctx := context.Background()
	up, c, _ := startUp(t, t.TempDir())
	defer up.stop(t)
	pod := builder.MakePod("x", "default").Args("sleep", "1").Obj()
	if _, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, nodeTimeout, true, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed, nil
	})
	if err != nil {
		t.Fatalf("pod never finished; last status %+v", last.Status)
	}
	if last.Status.Phase != corev1.PodSucceeded {
		var states []string
		for _, s := range last.Status.ContainerStatuses {
			if term := s.State.Terminated; term != nil {
				states = append(states, term.Reason+": "+term.Message)
			}
		}
		t.Fatalf("pod phase %s, want Succeeded (%s)", last.Status.Phase, strings.Join(states, "; "))
	}
}

// describePods summarises pods for a failure message: phase, then each
// container's state reason.
func describePods(pods []corev1.Pod) string {
	var out []string
	for _, p := range pods {
		var cs []string
		for _, s := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			switch {
			case s.State.Running != nil:
				cs = append(cs, s.Name+"=Running")
			case s.State.Waiting != nil:
				cs = append(cs, s.Name+"=Waiting/"+s.State.Waiting.Reason)
			case s.State.Terminated != nil:
				cs = append(cs, s.Name+"=Terminated/"+s.State.Terminated.Reason)
			}
		}
		out = append(out, fmt.Sprintf("%s %s [%s]", p.Name, p.Status.Phase, strings.Join(cs, " ")))
	}
	return strings.Join(out, "; ")
}
