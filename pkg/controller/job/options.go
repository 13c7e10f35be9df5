package job

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// DefaultManagedBy is the spec.managedBy value claimed when Options.ManagedBy is empty.
const DefaultManagedBy = "jobkeeper.dev/job-controller"

// FieldManager is the field manager of every write the controller makes.
const FieldManager = "jobkeeper-job-controller"

// Options configures a Controller. Zero fields take the documented defaults,
// which are upstream kube-controller-manager's.
type Options struct {
	// ManagedBy is the spec.managedBy value of the Jobs to manage. Default DefaultManagedBy.
	ManagedBy string
	// ManageUnclaimedJobs also manages Jobs without managedBy or with
	// kubernetes.io/job-controller. Default false.
	ManageUnclaimedJobs bool
	// PodFailureBackoff is the base of the exponential pod re-creation delay. Default 10s.
	PodFailureBackoff time.Duration
	// MaxPodFailureBackoff caps the pod re-creation delay. Default 10m.
	MaxPodFailureBackoff time.Duration
	// SyncBatchPeriod delays syncs triggered by pod events and status-only Job
	// updates so that several events share one sync. Default 1s; negative means 0.
	SyncBatchPeriod time.Duration
	// MaxUncountedPods caps status.uncountedTerminatedPods per sync. Default 500.
	MaxUncountedPods int
	// MaxPodCreateDeletePerSync caps pod creations or deletions per sync. Default 500.
	MaxPodCreateDeletePerSync int
	// DisableReadYourWrites turns off the wait for the informers to observe
	// the controller's own writes before a Job is synced again (upstream's
	// StaleControllerConsistencyJob, on by default). Default false.
	DisableReadYourWrites bool
	// Clock is used for every time decision. Default the real clock.
	Clock clock.WithTicker
	// Metadata, if set, is a metadata-only client for the same apiserver,
	// which JobPodsOnly needs. Default none.
	Metadata metadata.Interface
	// ContentType is the encoding the client given to NewController was
	// configured with (its rest.Config.ContentType). The controller creates
	// and patches pods asking for their metadata only, in this encoding.
	// Default: client-go's, JSON.
	ContentType string
	// Registerer receives the controller's metrics. Default: a private registry.
	Registerer prometheus.Registerer
	// JobPodsOnly says that the pod informer given to NewController lists
	// and watches only the pods with batchv1.ControllerUidLabel. The
	// controller then watches the rest itself: the pods of Jobs with
	// manualSelector, through one narrow informer per such Job, and the
	// metadata of every other pod, trimmed, so that no pod holding the
	// tracking finalizer is missed (pod_sources.go). Needs Metadata.
	// Default false: the pod informer holds every pod, as upstream's.
	JobPodsOnly bool
	// Workloads turns on WorkloadWithJob (alpha in v1.36, workload.go):
	// the informers of Workloads and PodGroups, which the controller
	// indexes. Default nil: off, as the gate.
	Workloads *WorkloadInformers
	// PodTransform is the transform of the narrow informers JobPodsOnly
	// starts (the shared pod informer's own). Default none.
	PodTransform cache.TransformFunc
}

// withDefaults returns a copy of o with zero fields set to their defaults.
func (o Options) withDefaults() Options {
	if o.ManagedBy == "" {
		o.ManagedBy = DefaultManagedBy
	}
	if o.PodFailureBackoff <= 0 {
		o.PodFailureBackoff = 10 * time.Second
	}
	if o.MaxPodFailureBackoff <= 0 {
		o.MaxPodFailureBackoff = 10 * time.Minute
	}
	if o.SyncBatchPeriod == 0 {
		o.SyncBatchPeriod = time.Second
	} else if o.SyncBatchPeriod < 0 {
		o.SyncBatchPeriod = 0
	}
	if o.MaxUncountedPods <= 0 {
		o.MaxUncountedPods = 500
	}
	if o.MaxPodCreateDeletePerSync <= 0 {
		o.MaxPodCreateDeletePerSync = 500
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Registerer == nil {
		o.Registerer = prometheus.NewRegistry()
	}
	return o
}
