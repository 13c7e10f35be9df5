package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"jobkeeper.dev/jobkeeper/test/builder"
)

// TestUpOOMKilledJobs runs, on up as root (where pods get cgroups), two
// Jobs whose container touches 300 MB under a 32Mi memory limit: the
// kernel kills it and the node reports the container terminated
// OOMKilled with exit code 137, as a kubelet does. The Job with a
// podFailurePolicy rule on exit code 137 fails at once by that rule; the
// one without counts each failure against its backoffLimit. up's banner
// says that limits are enforced.
func TestUpOOMKilledJobs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("pods get cgroups only when up runs as root (docs/node-agent.md)")
	}
	ctx := context.Background()
	up, c, _ := startUp(t, t.TempDir())
	defer up.stop(t)
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return strings.Contains(up.output(), "Pods and containers get cgroups with their cpu and memory limits"), nil
	})
	if err != nil {
		t.Fatalf("up's banner does not say that limits are enforced:\n%s", up.output())
	}
	ns := "default"
	hog := func(name string) *builder.JobWrapper {
		w := builder.MakeJob(name, ns).Command("dd", "if=/dev/zero", "of=/dev/null", "bs=300M", "count=1")
		w.Job.Spec.Template.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi")}
		return w
	}
	byRule := hog("oom-by-rule").BackoffLimit(6).PodFailurePolicy(
		builder.ExitCodeRule(batchv1.PodFailurePolicyActionFailJob, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 137)).Obj()
	byBackoff := hog("oom-by-backoff").BackoffLimit(1).Obj()
	for _, j := range []*batchv1.Job{byRule, byBackoff} {
		if _, err := c.BatchV1().Jobs(ns).Create(ctx, j, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		job        *batchv1.Job
		reason     string
		failedPods int32
	}{
		{byRule, batchv1.JobReasonPodFailurePolicy, 1},
		{byBackoff, batchv1.JobReasonBackoffLimitExceeded, 2},
	} {
		t.Run(tc.job.Name, func(t *testing.T) {
			var got *batchv1.Job
			err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, nodeTimeout, true, func(ctx context.Context) (bool, error) {
				j, err := c.BatchV1().Jobs(ns).Get(ctx, tc.job.Name, metav1.GetOptions{})
				got = j
				return err == nil && hasCondition(batchv1.JobFailed)(j), nil
			})
			if err != nil {
				t.Fatalf("job %s never failed; its pods: %s", tc.job.Name, describePods(podsOf(t, c, tc.job)))
			}
			for _, cond := range got.Status.Conditions {
				if cond.Type == batchv1.JobFailed && cond.Reason != tc.reason {
					t.Errorf("Failed condition reason %q (%s), want %q", cond.Reason, cond.Message, tc.reason)
				}
			}
			if got.Status.Failed != tc.failedPods {
				t.Errorf("failed %d, want %d", got.Status.Failed, tc.failedPods)
			}
			for _, p := range podsOf(t, c, tc.job) {
				if len(p.Status.ContainerStatuses) != 1 {
					t.Errorf("pod %s: container statuses %+v", p.Name, p.Status.ContainerStatuses)
					continue
				}
				term := p.Status.ContainerStatuses[0].State.Terminated
				if term == nil || term.Reason != "OOMKilled" || term.ExitCode != 137 {
					t.Errorf("pod %s: container terminated %+v, want OOMKilled with exit code 137", p.Name, term)
				}
			}
		})
	}
}
