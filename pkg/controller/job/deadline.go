package job

import (
	"time"

	batchv1 "k8s.io/api/batch/v1"
)

// deadlineRemaining returns how long the Job may still run before
// activeDeadlineSeconds, measured from status.startTime, is exceeded, and
// whether a deadline applies at all. Suspended Jobs and Jobs without a start
// time have no running deadline. A result <= 0 means the deadline passed.
func deadlineRemaining(job *batchv1.Job, now time.Time) (time.Duration, bool) {
	if job.Spec.ActiveDeadlineSeconds == nil || job.Status.StartTime == nil || isSuspended(job) {
		return 0, false
	}
	allowed := time.Duration(*job.Spec.ActiveDeadlineSeconds) * time.Second
	return allowed - now.Sub(job.Status.StartTime.Time), true
}
