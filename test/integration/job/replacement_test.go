package job

import (
	"context"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jobcontroller "jobkeeper.dev/jobkeeper/pkg/controller/job"
	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

// TestPodReplacementPolicy deletes a running pod that a test finalizer
// keeps terminating, and checks active/ready/failed/terminating at each
// step: while it is terminating, after the kubelet reports it Failed, and
// after it is gone.
//   - TerminatingOrFailed (the default without podFailurePolicy): the
//     deleted pod counts as failed and is replaced at once.
//   - Failed: it is neither counted nor replaced until it reaches phase
//     Failed.
//   - a podFailurePolicy (podReplacementPolicy defaulted to Failed): as
//     Failed, and the policy judges the pod once Failed (here, an Ignore
//     rule for DisruptionTarget: replaced but never counted).
func TestPodReplacementPolicy(t *testing.T) {
	type step struct {
		// terminating is the status while the deleted pod is held.
		terminating indexedStatus
		// failed is the status once the kubelet reported it Failed.
		failed indexedStatus
	}
	cases := map[string]struct {
		job     *builder.JobWrapper
		failure framework.PodFailure
		want    step
	}{
		"TerminatingOrFailed": {
			job: builder.MakeJob("rp-tof", "").PodReplacementPolicy(batchv1.TerminatingOrFailed),
			want: step{
				terminating: indexedStatus{Active: 2, Ready: 1, Terminating: 1, Failed: 1},
				failed:      indexedStatus{Active: 2, Ready: 1, Terminating: 0, Failed: 1},
			},
		},
		"Failed": {
			job: builder.MakeJob("rp-failed", "").PodReplacementPolicy(batchv1.Failed),
			want: step{
				terminating: indexedStatus{Active: 1, Ready: 1, Terminating: 1, Failed: 0},
				failed:      indexedStatus{Active: 2, Ready: 1, Terminating: 0, Failed: 1},
			},
		},
		"podFailurePolicy implies Failed": {
			job: builder.MakeJob("rp-pfp", "").PodFailurePolicy(builder.PodConditionRule(ignore, corev1.DisruptionTarget)),
			failure: framework.PodFailure{
				ExitCodes: map[string]int32{"main": 137}, Conditions: []corev1.PodConditionType{corev1.DisruptionTarget}},
			want: step{
				terminating: indexedStatus{Active: 1, Ready: 1, Terminating: 1, Failed: 0},
				failed:      indexedStatus{Active: 2, Ready: 1, Terminating: 0, Failed: 0},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			ns := framework.CreateNamespace(t)
			c := framework.Client(t)
			startController(t, testOptions())
			jw := tc.job
			jw.Job.Namespace = ns
			job := createJob(t, c, jw.ManagedBy(jobcontroller.DefaultManagedBy).Parallelism(2).Completions(2).BackoffLimit(1).Obj())
			if job.Spec.PodFailurePolicy != nil {
				if p := job.Spec.PodReplacementPolicy; p == nil || *p != batchv1.Failed {
					t.Fatalf("podReplacementPolicy defaulted to %v, want Failed", p)
				}
			}
			status := func(s indexedStatus) indexedStatus {
				s.FailedIndexes, s.Started = "<nil>", true
				return s
			}
			waitForIndexedStatus(t, c, job, status(indexedStatus{Active: 2}))
			framework.SetJobPodsPhase(ctx, t, c, job, corev1.PodRunning, 2)
			waitForIndexedStatus(t, c, job, status(indexedStatus{Active: 2, Ready: 2}))

			victim := activePods(t, c, job)[0]
			holdPod(t, c, &victim)
			if err := c.CoreV1().Pods(ns).Delete(ctx, victim.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatalf("deleting pod %s: %v", victim.Name, err)
			}
			waitForIndexedStatus(t, c, job, status(tc.want.terminating))
			// The pods agree with the status.
			framework.WaitForActivePods(t, c, job, int(tc.want.terminating.Active))

			// The kubelet stops the pod and reports it Failed.
			terminating, err := c.CoreV1().Pods(ns).Get(ctx, victim.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			framework.MustFailPod(t, c, terminating, tc.failure)
			waitForIndexedStatus(t, c, job, status(tc.want.failed))
			framework.WaitForActivePods(t, c, job, 2)
			// Counted (or ignored) once: no pod holds the finalizer but the
			// two active ones.
			framework.WaitFor(t, "only the active pods to hold the tracking finalizer", func(ctx context.Context) (bool, error) {
				n, err := podsWithFinalizer(ctx, c, ns)
				return err == nil && n == 2, err
			})

			releaseHeldPods(t, c, ns)
			framework.WaitFor(t, "the deleted pod to be gone", func(ctx context.Context) (bool, error) {
				_, err := c.CoreV1().Pods(ns).Get(ctx, victim.Name, metav1.GetOptions{})
				return err != nil, nil
			})
			waitForIndexedStatus(t, c, job, status(tc.want.failed))

			framework.SetJobPodsPhase(ctx, t, c, job, corev1.PodSucceeded, 2)
			done := tc.want.failed
			done.Active, done.Ready, done.Succeeded, done.Completed = 0, 0, 2, true
			done.Conditions = []string{"SuccessCriteriaMet=True/CompletionsReached: Reached expected number of succeeded pods",
				"Complete=True/CompletionsReached: Reached expected number of succeeded pods"}
			waitForIndexedStatus(t, c, job, status(done))
			waitNoFinalizerInNamespace(t, c, ns)
		})
	}
}
