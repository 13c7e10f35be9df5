package nodeagent

import (
	"context"
	"path/filepath"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

// TestContainerRestartPolicyDoesNotTriggerPodFailurePolicy is upstream's
// e2e spec "containers restarted by container restart policy should not
// trigger PodFailurePolicy" (test/e2e/apps/job.go) through jobkeeper's Job
// controller and the node agent: a Job pod with restartPolicy Never whose
// container has restartPolicy OnFailure fails once (exit code 1, which the
// Job's podFailurePolicy turns into FailJob) and is restarted in place, so
// the pod succeeds and the Job completes.
func TestContainerRestartPolicyDoesNotTriggerPodFailurePolicy(t *testing.T) {
	startSharedAgent(t)
	startJobControllers(t)
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	data := t.TempDir()
	j := childJob("restart-policy", ns, "fail-once").RestartPolicy(corev1.RestartPolicyNever).BackoffLimit(1).
		PodFailurePolicy(builder.ExitCodeRule(batchv1.PodFailurePolicyActionFailJob, "main", batchv1.PodFailurePolicyOnExitCodesOpIn, 1))
	spec := &j.Job.Spec.Template.Spec
	spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: data}}}}
	ctr := &spec.Containers[0]
	ctr.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyOnFailure)
	ctr.VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	ctr.Env = append(ctr.Env, corev1.EnvVar{Name: markerEnv, Value: filepath.Join("/data", "foo")})
	job := createJob(t, c, j.Obj())

	framework.WaitForJobCondition(t, c, job, batchv1.JobComplete)
	got, err := c.BatchV1().Jobs(ns).Get(context.Background(), job.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := got.Status
	if st.Active != 0 || ptr.Deref(st.Ready, -1) != 0 || ptr.Deref(st.Terminating, -1) != 0 || st.Succeeded != 1 || st.Failed != 0 {
		t.Errorf("job status active=%d ready=%v terminating=%v succeeded=%d failed=%d, want 0 0 0 1 0",
			st.Active, st.Ready, st.Terminating, st.Succeeded, st.Failed)
	}
	pods := jobPods(t, c, job)
	if len(pods) != 1 {
		t.Fatalf("job has %d pods, want 1", len(pods))
	}
	pod := pods[0]
	cs := pod.Status.ContainerStatuses[0]
	if pod.Status.Phase != corev1.PodSucceeded || cs.RestartCount != 1 {
		t.Errorf("pod phase %s, restartCount %d; want Succeeded after one restart", pod.Status.Phase, cs.RestartCount)
	}
	if last := cs.LastTerminationState.Terminated; last == nil || last.ExitCode != 1 {
		t.Errorf("lastState = %+v, want terminated with exit code 1", cs.LastTerminationState)
	}
	if logs := logsOf(t, c, ns, pod.Name, &corev1.PodLogOptions{}); logs != "succeeding\n" {
		t.Errorf("logs = %q, want %q", logs, "succeeding\n")
	}
	if logs := logsOf(t, c, ns, pod.Name, &corev1.PodLogOptions{Previous: true}); logs != "failing once\n" {
		t.Errorf("previous logs = %q, want %q", logs, "failing once\n")
	}
}
