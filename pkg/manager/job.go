package manager

import (
	"context"
	"fmt"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/kubernetes/pkg/features"

	"jobkeeper.dev/jobkeeper/pkg/controller/job"
)

func init() {
	initFuncs[JobController] = startJobController
}

// startJobController builds the Job controller from the shared informer
// factory and the parsed options.
func startJobController(ctx context.Context, cc ControllerContext) (RunFunc, error) {
	o := cc.Options
	batch := o.SyncBatchPeriod
	if batch == 0 {
		// --sync-batch-period=0 means no batching; the controller reads 0 as "default".
		batch = -1
	}
	var workloads *job.WorkloadInformers
	if utilfeature.DefaultFeatureGate.Enabled(features.WorkloadWithJob) {
		workloads = &job.WorkloadInformers{
			Workloads: cc.InformerFactory.Scheduling().V1alpha2().Workloads(),
			PodGroups: cc.InformerFactory.Scheduling().V1alpha2().PodGroups(),
		}
	}
	c, err := job.NewController(ctx,
		cc.JobPodFactory.Core().V1().Pods(),
		cc.InformerFactory.Batch().V1().Jobs(),
		cc.Client,
		job.Options{
			ManagedBy:                 o.ManagedBy,
			ManageUnclaimedJobs:       o.ManageUnclaimedJobs,
			PodFailureBackoff:         o.PodFailureBackoff,
			MaxPodFailureBackoff:      o.MaxPodFailureBackoff,
			SyncBatchPeriod:           batch,
			MaxUncountedPods:          o.MaxUncountedPods,
			MaxPodCreateDeletePerSync: o.MaxPodCreateDeletePerSync,
			DisableReadYourWrites:     !o.StaleControllerConsistency,
			Metadata:                  cc.Metadata,
			ContentType:               cc.RestConfig.ContentType,
			JobPodsOnly:               true,
			PodTransform:              CacheTransform,
			Workloads:                 workloads,
			Clock:                     cc.Clock,
			Registerer:                cc.Registerer,
		})
	if err != nil {
		return nil, fmt.Errorf("creating job controller: %w", err)
	}
	workers := o.ConcurrentJobSyncs
	return func(ctx context.Context) { c.Run(ctx, workers) }, nil
}
