package ttlafterfinished

import (
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// verdict is the decision for one finished object that has a TTL: when it
// finished, when it expires and how to delete it.
type verdict struct {
	// finishedAt is when the object finished.
	finishedAt time.Time
	// ttl is the applicable time to live.
	ttl time.Duration
	// policy names the CleanupPolicy that selected the object; empty when the
	// object's own TTL applies.
	policy string
	// failed is true when the object failed rather than succeeded.
	failed bool
	// dryRun reports instead of deleting.
	dryRun bool
	// events records a TTLExpired event on the deletion (the policy's
	// deletionEvents; Options.DeletionEvents applies to every verdict).
	events bool
	// propagation is the delete's propagation policy.
	propagation metav1.DeletionPropagation
}

// expireAt is the instant the object may be deleted.
func (v *verdict) expireAt() time.Time { return v.finishedAt.Add(v.ttl) }

// remaining is how long until expiry, as seen at now; zero or negative means
// the TTL has expired.
func (v *verdict) remaining(now time.Time) time.Duration { return v.expireAt().Sub(now) }

// finishedInFuture reports clock skew: a finish time later than now.
func (v *verdict) finishedInFuture(now time.Time) bool { return v.finishedAt.After(now) }

// secondsToDuration converts a TTL in seconds.
func secondsToDuration(s int32) time.Duration { return time.Duration(s) * time.Second }

// jobFinished reports whether a Job has a Complete=True or Failed=True
// condition. Interim conditions (FailureTarget, SuccessCriteriaMet) do not
// count.
func jobFinished(job *batchv1.Job) bool {
	_, _, ok := jobFinishCondition(job)
	return ok
}

// jobFinishCondition returns the first Complete=True or Failed=True condition
// and whether the Job failed.
func jobFinishCondition(job *batchv1.Job) (c *batchv1.JobCondition, failed bool, ok bool) {
	for i := range job.Status.Conditions {
		c := &job.Status.Conditions[i]
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return c, false, true
		case batchv1.JobFailed:
			return c, true, true
		}
	}
	return nil, false, false
}

// jobOwnVerdict applies spec.ttlSecondsAfterFinished, as upstream does. It
// returns nil when the Job is being deleted, has no TTL or has not finished,
// and an error when the finishing condition has no lastTransitionTime.
func jobOwnVerdict(job *batchv1.Job) (*verdict, error) {
	if job.DeletionTimestamp != nil || job.Spec.TTLSecondsAfterFinished == nil {
		return nil, nil
	}
	c, failed, ok := jobFinishCondition(job)
	if !ok {
		return nil, nil
	}
	if c.LastTransitionTime.IsZero() {
		return nil, fmt.Errorf("unable to find the time when the Job %s/%s finished", job.Namespace, job.Name)
	}
	return &verdict{
		finishedAt:  c.LastTransitionTime.Time,
		ttl:         secondsToDuration(*job.Spec.TTLSecondsAfterFinished),
		failed:      failed,
		propagation: metav1.DeletePropagationForeground,
	}, nil
}
