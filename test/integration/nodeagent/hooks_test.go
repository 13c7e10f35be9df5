package nodeagent

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

// TestFailedPostStartExecHookKillsTheContainer runs a postStart exec hook
// inside a real process container: it exits 3, so the container is killed
// with the kubelet's events and, under restartPolicy Never, the pod fails.
func TestFailedPostStartExecHookKillsTheContainer(t *testing.T) {
	startSharedAgent(t)
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	// The container's main process is its PID namespace's PID 1, which
	// gets no SIGTERM it has no handler for: it handles it (a bare sleep
	// would be killed after the grace period, 137, as on a kubelet).
	pod := builder.MakePod("hook", ns).Command("sh", "-c", "trap 'exit 143' TERM; sleep 3600 & wait").Obj()
	pod.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{
		PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "echo in the container; exit 3"}}},
	}
	if _, err := c.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := waitPod(t, c, ns, "hook", "failed", phase(corev1.PodFailed))
	if term := got.Status.ContainerStatuses[0].State.Terminated; term == nil || term.ExitCode != 143 {
		t.Errorf("state = %+v, want terminated by SIGTERM (143)", got.Status.ContainerStatuses[0].State)
	}
	framework.WaitFor(t, "the hook's events", func(ctx context.Context) (bool, error) {
		evs, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		var seen []string
		for _, e := range evs.Items {
			seen = append(seen, e.Reason+": "+e.Message)
		}
		all := strings.Join(seen, "\n")
		return strings.Contains(all, "FailedPostStartHook: PostStartHook failed") && strings.Contains(all, "Killing: FailedPostStartHook"), nil
	})
}
