package metrics

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Subsystem is the Prometheus subsystem of every Job controller metric.
const Subsystem = "job_controller"

// Values of the "action" label of the sync metrics.
const (
	// ActionReconciling is a sync that ended before deciding on pods.
	ActionReconciling = "reconciling"
	// ActionTracking is a sync that neither created nor deleted pods.
	ActionTracking = "tracking"
	// ActionPodsCreated is a sync that created pods.
	ActionPodsCreated = "pods_created"
	// ActionPodsDeleted is a sync that deleted pods.
	ActionPodsDeleted = "pods_deleted"
)

// Values of the "result" and "status" labels.
const (
	// Success labels a sync that returned no error.
	Success = "success"
	// Error labels a sync that returned an error.
	Error = "error"
	// Succeeded labels succeeded pods, Jobs or creations.
	Succeeded = "succeeded"
	// Failed labels failed pods, Jobs or creations.
	Failed = "failed"
)

// Values of the "backoffLimit" label of FinishedIndexes.
const (
	// BackoffLimitPerIndex labels indexes of Jobs with backoffLimitPerIndex.
	BackoffLimitPerIndex = "perIndex"
	// BackoffLimitGlobal labels indexes of Jobs with only the global backoffLimit.
	BackoffLimitGlobal = "global"
)

// Values of the "event" label of TerminatedPodsTrackingFinalizer.
const (
	// Add counts a terminated pod that started holding the finalizer.
	Add = "add"
	// Delete counts a terminated pod that stopped holding the finalizer.
	Delete = "delete"
)

// Values of the "action" label of PodFailuresHandledByFailurePolicy: the
// podFailurePolicy rule actions.
const (
	// PodFailurePolicyFailJob counts failures that matched a FailJob rule.
	PodFailurePolicyFailJob = "FailJob"
	// PodFailurePolicyFailIndex counts failures that matched a FailIndex rule.
	PodFailurePolicyFailIndex = "FailIndex"
	// PodFailurePolicyIgnore counts failures that matched an Ignore rule.
	PodFailurePolicyIgnore = "Ignore"
	// PodFailurePolicyCount counts failures that matched a Count rule.
	PodFailurePolicyCount = "Count"
)

// Values of the "reason" label of PodsCreation.
const (
	// PodCreateNew is a pod created for a Job with no failures or terminations yet.
	PodCreateNew = "new"
	// PodRecreateTerminatingOrFailed replaces a terminating or failed pod.
	PodRecreateTerminatingOrFailed = "recreate_terminating_or_failed"
	// PodRecreateFailed replaces a failed pod (podReplacementPolicy Failed).
	PodRecreateFailed = "recreate_failed"
)

// Metrics holds the collectors of one Job controller.
type Metrics struct {
	// SyncDuration observes the time of each sync, by completion_mode, result and action.
	SyncDuration *prometheus.HistogramVec
	// Syncs counts syncs, by completion_mode, result and action.
	Syncs *prometheus.CounterVec
	// JobsFinished counts finished Jobs, by completion_mode, result and reason.
	JobsFinished *prometheus.CounterVec
	// JobsByExternalController counts Jobs seen with a foreign managedBy, by controller_name.
	JobsByExternalController *prometheus.CounterVec
	// PodsFinished counts finished pods fully tracked in the Job status, by completion_mode and result.
	PodsFinished *prometheus.CounterVec
	// TerminatedPodsTrackingFinalizer counts terminated pods gaining or losing the tracking finalizer, by event.
	TerminatedPodsTrackingFinalizer *prometheus.CounterVec
	// FinishedIndexes counts finished indexes of Indexed Jobs, by status and backoffLimit.
	FinishedIndexes *prometheus.CounterVec
	// PodsCreation counts pod creations, by reason and status.
	PodsCreation *prometheus.CounterVec
	// PodFailuresHandledByFailurePolicy counts failed pods that matched a podFailurePolicy rule, by action.
	PodFailuresHandledByFailurePolicy *prometheus.CounterVec
	// StaleSyncSkips counts syncs skipped because an informer had not yet
	// observed the controller's own last write, by group and resource.
	StaleSyncSkips *prometheus.CounterVec
	// StaleFinalizers exports the stale tracking finalizer gauges
	// (job_controller_stale_tracking_finalizer_pods and _oldest_seconds)
	// from the source a running controller sets.
	StaleFinalizers *StaleFinalizerCollector
}

// New builds the collectors and registers them on reg. If reg already holds
// collectors with the same descriptors (a controller restarted in the same
// process), the registered ones are reused so counts keep accumulating.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		SyncDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: Subsystem, Name: "job_sync_duration_seconds",
			Help:    "The time it took to sync a job",
			Buckets: prometheus.ExponentialBuckets(0.004, 2, 15),
		}, []string{"completion_mode", "result", "action"}),
		Syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: Subsystem, Name: "job_syncs_total",
			Help: "The number of job syncs",
		}, []string{"completion_mode", "result", "action"}),
		JobsFinished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: Subsystem, Name: "jobs_finished_total",
			Help: "The number of finished jobs",
		}, []string{"completion_mode", "result", "reason"}),
		JobsByExternalController: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: Subsystem, Name: "jobs_by_external_controller_total",
			Help: "The number of Jobs managed by an external controller",
		}, []string{"controller_name"}),
		PodsFinished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: Subsystem, Name: "job_pods_finished_total",
			Help: "The number of finished Pods that are fully tracked",
		}, []string{"completion_mode", "result"}),
		TerminatedPodsTrackingFinalizer: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: Subsystem, Name: "terminated_pods_tracking_finalizer_total",
			Help: "The number of terminated pods (phase=Failed|Succeeded) that have the finalizer batch.kubernetes.io/job-tracking. The event label can be \"add\" or \"delete\".",
		}, []string{"event"}),
		FinishedIndexes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: Subsystem, Name: "job_finished_indexes_total",
			Help: "The number of finished indexes. Possible values for the status label are: \"succeeded\", \"failed\". Possible values for the backoffLimit label are: \"perIndex\" and \"global\"",
		}, []string{"status", "backoffLimit"}),
		PodsCreation: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: Subsystem, Name: "job_pods_creation_total",
			Help: "The number of Pods created by the Job controller labelled with a reason for the Pod creation. Possible values of the \"reason\" label are: \"new\", \"recreate_terminating_or_failed\", \"recreate_failed\". Possible values of the \"status\" label are: \"succeeded\", \"failed\".",
		}, []string{"reason", "status"}),
		PodFailuresHandledByFailurePolicy: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: Subsystem, Name: "pod_failures_handled_by_failure_policy_total",
			Help: "The number of failed Pods handled by failure policy with respect to the failure policy action applied based on the matched rule. Possible values of the action label correspond to the possible values for the failure policy rule action, which are: \"FailJob\", \"Ignore\" and \"Count\".",
		}, []string{"action"}),
		StaleSyncSkips: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: Subsystem, Name: "stale_sync_skips_total",
			Help: "Total number of Job syncs skipped due to a stale watch cache.",
		}, []string{"group", "resource"}),
		StaleFinalizers: NewStaleFinalizerCollector(),
	}
	var err error
	m.SyncDuration, err = register(reg, m.SyncDuration)
	if err != nil {
		return nil, err
	}
	if m.StaleFinalizers, err = register(reg, m.StaleFinalizers); err != nil {
		return nil, err
	}
	counters := []**prometheus.CounterVec{&m.Syncs, &m.JobsFinished, &m.JobsByExternalController,
		&m.PodsFinished, &m.TerminatedPodsTrackingFinalizer, &m.FinishedIndexes, &m.PodsCreation,
		&m.PodFailuresHandledByFailurePolicy, &m.StaleSyncSkips}
	for _, c := range counters {
		if *c, err = register(reg, *c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// register registers c on reg, returning the already registered collector
// of the same kind if there is one.
func register[T prometheus.Collector](reg prometheus.Registerer, c T) (T, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(T); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}
