package follow_test

import (
	"context"
	"fmt"
	"os"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/follow"
)

// ExampleFollow follows a Job that has already completed, printing plain
// lines: Follow returns at once with the outcome, which gives the exit code.
func ExampleFollow() {
	start := metav1.NewTime(time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC))
	end := metav1.NewTime(start.Add(42 * time.Second))
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "demo", UID: "8d1e"},
		Spec:       batchv1.JobSpec{Completions: ptr.To[int32](1), Parallelism: ptr.To[int32](1)},
		Status: batchv1.JobStatus{
			StartTime: &start, CompletionTime: &end, Succeeded: 1,
			Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, Reason: "CompletionsReached", LastTransitionTime: end}},
		},
	}
	client := fake.NewClientset(job) // any clientset: a real cluster's works the same
	clock := clocktesting.NewFakeClock(end.Add(time.Minute))

	st, err := follow.Follow(context.Background(), client,
		follow.Options{Namespace: "demo", Name: "hello", Clock: clock}, follow.NewPlain(os.Stdout, clock))
	fmt.Println(st.Outcome, "exit", st.Outcome.ExitCode(), err)
	// Output:
	// 2026-01-02T15:05:47Z job demo/hello: NonIndexed, 1 completions, parallelism 1
	// 2026-01-02T15:05:47Z progress: succeeded 1/1, failed 0, active 0, ready 0, terminating 0 (elapsed 42s)
	// 2026-01-02T15:05:47Z condition Complete=True (CompletionsReached)
	// 2026-01-02T15:05:47Z job demo/hello complete: 1/1 succeeded in 42s
	// complete exit 0 <nil>
}

// ExampleDecodeJob shows what `run -f` refuses.
func ExampleDecodeJob() {
	_, err := follow.DecodeJob([]byte("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n"))
	fmt.Println(err)
	// Output:
	// the file holds apps/v1 Deployment: want a batch/v1 Job
}
