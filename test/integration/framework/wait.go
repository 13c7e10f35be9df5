package framework

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// WaitFor polls cond every Interval until it returns true, and fails the
// test after Timeout with what and the last error. A condition error does not
// stop the wait (the apiserver may be briefly busy).
func WaitFor(t testing.TB, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	WaitForWithin(t, Timeout, what, cond)
}

// WaitForWithin is WaitFor with a timeout of its own, for waits whose length
// is set by what they wait for (a large Job, a Lease duration).
func WaitForWithin(t testing.TB, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	for {
		ok, err := cond(ctx)
		if err == nil && ok {
			return
		}
		last = err
		select {
		case <-ctx.Done():
			if last != nil {
				t.Fatalf("timed out after %s waiting for %s: last error: %v", sinceStart(start), what, last)
			}
			t.Fatalf("timed out after %s waiting for %s", sinceStart(start), what)
		case <-time.After(Interval):
		}
	}
}

// PodsStatus is the pod accounting part of a Job's status.
type PodsStatus struct {
	// Active, Ready, Succeeded, Failed and Terminating are the status counters.
	Active, Ready, Succeeded, Failed, Terminating int32
}

// jobPodsStatus extracts PodsStatus from a Job; nil ready/terminating are
// reported as -1 so that a controller that forgets to write them fails.
func jobPodsStatus(job *batchv1.Job) PodsStatus {
	return PodsStatus{
		Active:      job.Status.Active,
		Ready:       ptr.Deref(job.Status.Ready, -1),
		Succeeded:   job.Status.Succeeded,
		Failed:      job.Status.Failed,
		Terminating: ptr.Deref(job.Status.Terminating, -1),
	}
}

// WaitForJobPodsStatus waits until the Job's counters equal want exactly and
// returns the Job as last read.
func WaitForJobPodsStatus(t testing.TB, c kubernetes.Interface, job *batchv1.Job, want PodsStatus) *batchv1.Job {
	t.Helper()
	var got *batchv1.Job
	var diff string
	WaitFor(t, fmt.Sprintf("Job %s/%s pod counts %+v", job.Namespace, job.Name, want), func(ctx context.Context) (bool, error) {
		j, err := c.BatchV1().Jobs(job.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got = j
		diff = cmp.Diff(want, jobPodsStatus(j))
		if diff != "" {
			return false, fmt.Errorf("status (-want +got):\n%s", diff)
		}
		return true, nil
	})
	return got
}

// WaitForJobCondition waits until the Job has condition ctype with status True.
func WaitForJobCondition(t testing.TB, c kubernetes.Interface, job *batchv1.Job, ctype batchv1.JobConditionType) *batchv1.Job {
	t.Helper()
	var got *batchv1.Job
	WaitFor(t, fmt.Sprintf("Job %s/%s condition %s", job.Namespace, job.Name, ctype), func(ctx context.Context) (bool, error) {
		j, err := c.BatchV1().Jobs(job.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got = j
		for _, cond := range j.Status.Conditions {
			if cond.Type == ctype && cond.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	return got
}

// WaitForNoFinalizer waits until no pod of the Job holds the tracking finalizer.
func WaitForNoFinalizer(t testing.TB, c kubernetes.Interface, job *batchv1.Job) {
	t.Helper()
	WaitFor(t, fmt.Sprintf("pods of Job %s/%s to lose the tracking finalizer", job.Namespace, job.Name), func(ctx context.Context) (bool, error) {
		pods, err := JobPods(ctx, c, job)
		if err != nil {
			return false, err
		}
		for _, p := range pods {
			for _, f := range p.Finalizers {
				if f == batchv1.JobTrackingFinalizer {
					return false, fmt.Errorf("pod %s still has %s", p.Name, f)
				}
			}
		}
		return true, nil
	})
}

// UpdateJob applies mutate to the latest Job, retrying on conflicts, and
// returns the Job as updated.
func UpdateJob(t testing.TB, c kubernetes.Interface, job *batchv1.Job, mutate func(*batchv1.Job)) *batchv1.Job {
	t.Helper()
	var out *batchv1.Job
	WaitFor(t, "updating job "+job.Name, func(ctx context.Context) (bool, error) {
		j, err := c.BatchV1().Jobs(job.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		mutate(j)
		out, err = c.BatchV1().Jobs(job.Namespace).Update(ctx, j, metav1.UpdateOptions{})
		return err == nil, err
	})
	return out
}
