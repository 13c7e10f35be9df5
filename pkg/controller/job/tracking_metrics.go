package job

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"jobkeeper.dev/jobkeeper/pkg/controller/job/metrics"
)

// recordFinished records the terminal events and jobs_finished_total.
func (c *Controller) recordFinished(job *batchv1.Job, cond *batchv1.JobCondition) {
	mode := completionModeLabel(job)
	if cond.Type == batchv1.JobComplete {
		if job.Spec.Completions != nil && job.Status.Succeeded > *job.Spec.Completions {
			c.recorder.Event(job, corev1.EventTypeWarning, ReasonTooManySucceededPods, "Too many succeeded pods running after completion count reached")
		}
		c.recorder.Event(job, corev1.EventTypeNormal, ReasonCompleted, "Job completed")
		c.metrics.JobsFinished.WithLabelValues(mode, metrics.Succeeded, cond.Reason).Inc()
		return
	}
	c.recorder.Event(job, corev1.EventTypeWarning, cond.Reason, cond.Message)
	c.metrics.JobsFinished.WithLabelValues(mode, metrics.Failed, cond.Reason).Inc()
}

// recordPodsFinished feeds job_pods_finished_total (and, for Indexed Jobs,
// job_finished_indexes_total) with the counter changes since before.
func (c *Controller) recordPodsFinished(job *batchv1.Job, before batchv1.JobStatus) {
	mode := completionModeLabel(job)
	var succeeded int
	if isIndexed(job) {
		limit := int(*job.Spec.Completions)
		if job.Status.CompletedIndexes != before.CompletedIndexes {
			succeeded = parseIndexSet(job.Status.CompletedIndexes, limit).count() - parseIndexSet(before.CompletedIndexes, limit).count()
		}
		limitLabel := metrics.BackoffLimitGlobal
		if hasBackoffLimitPerIndex(job) {
			limitLabel = metrics.BackoffLimitPerIndex
			if failed := failedIndexCount(job.Status.FailedIndexes, limit) - failedIndexCount(before.FailedIndexes, limit); failed > 0 {
				c.metrics.FinishedIndexes.WithLabelValues(metrics.Failed, limitLabel).Add(float64(failed))
			}
		}
		c.metrics.FinishedIndexes.WithLabelValues(metrics.Succeeded, limitLabel).Add(float64(max(succeeded, 0)))
	} else {
		succeeded = int(job.Status.Succeeded - before.Succeeded)
	}
	if succeeded > 0 {
		c.metrics.PodsFinished.WithLabelValues(mode, metrics.Succeeded).Add(float64(succeeded))
	}
	if failed := job.Status.Failed - before.Failed; failed > 0 {
		c.metrics.PodsFinished.WithLabelValues(mode, metrics.Failed).Add(float64(failed))
	}
}
