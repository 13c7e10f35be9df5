package ttlafterfinished

import (
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"jobkeeper.dev/jobkeeper/pkg/controller/ttlafterfinished/policy"
)

// verdict is the decision for one finished object that has a TTL.
type verdict = policy.Verdict

// secondsToDuration converts a TTL in seconds.
func secondsToDuration(s int32) time.Duration { return time.Duration(s) * time.Second }

// jobFinished reports whether a Job has a Complete=True or Failed=True
// condition.
func jobFinished(job *batchv1.Job) bool {
	_, _, ok := policy.JobFinishCondition(job)
	return ok
}

// jobOwnVerdict applies spec.ttlSecondsAfterFinished, as upstream does. It
// returns nil when the Job is being deleted, has no TTL or has not finished,
// and an error when the finishing condition has no lastTransitionTime.
func jobOwnVerdict(job *batchv1.Job) (*verdict, error) {
	if job.DeletionTimestamp != nil || job.Spec.TTLSecondsAfterFinished == nil {
		return nil, nil
	}
	f := policy.JobRule.Read(job)
	if !f.Finished {
		return nil, nil
	}
	if f.Err != nil {
		return nil, fmt.Errorf("unable to find the time when the Job %s/%s finished", job.Namespace, job.Name)
	}
	return &verdict{
		FinishedAt:  f.At,
		TTL:         secondsToDuration(*job.Spec.TTLSecondsAfterFinished),
		Failed:      f.Failed,
		Propagation: metav1.DeletePropagationForeground,
	}, nil
}
