package manager

import (
	"fmt"
	"strings"
	"time"
)

// Controller names accepted by Options.Controllers.
const (
	// JobController is the name of the Job controller.
	JobController = "job"
	// TTLAfterFinishedController is the name of the TTL-after-finished controller.
	TTLAfterFinishedController = "ttl-after-finished"
)

// Encodings accepted by Options.KubeAPIContentType.
const (
	// ContentTypeProtobuf is the Kubernetes protobuf encoding: several times
	// cheaper to decode than JSON, which matters for pod watches.
	ContentTypeProtobuf = "application/vnd.kubernetes.protobuf"
	// ContentTypeJSON is plain JSON.
	ContentTypeJSON = "application/json"
)

// DefaultManagedBy is the spec.managedBy value that jobkeeper claims by default.
const DefaultManagedBy = "jobkeeper.dev/job-controller"

// Options holds every tunable of the controllers. The zero value is not
// useful: start from NewOptions, which fills in the documented defaults
// (the same as kube-controller-manager's where upstream has one).
type Options struct {
	// KubeAPIQPS is the client-side rate limit towards the apiserver. Default 50.
	KubeAPIQPS float32
	// KubeAPIBurst is the client-side burst towards the apiserver. Default 100.
	KubeAPIBurst int
	// KubeAPIContentType is the encoding of requests and responses of the
	// built-in APIs: ContentTypeProtobuf (the default, as in
	// kube-controller-manager) or ContentTypeJSON. Custom resources always
	// use JSON.
	KubeAPIContentType string
	// Controllers lists the controllers to run. Default: all of them.
	Controllers []string
	// ManagedBy is the spec.managedBy value of the Jobs this instance manages.
	ManagedBy string
	// ManageUnclaimedJobs also manages Jobs with no managedBy or with
	// kubernetes.io/job-controller. Default false (true in `jobkeeper up`).
	ManageUnclaimedJobs bool
	// ConcurrentJobSyncs is the number of Job sync workers. Default 5.
	ConcurrentJobSyncs int
	// ConcurrentTTLSyncs is the number of TTL workers. Default 5.
	ConcurrentTTLSyncs int
	// TTLDeletionEvents records a TTLExpired event on every object the TTL
	// controller deletes. Default false, as upstream: an event doubles the
	// API writes of a deletion. Policies can turn them on for their own
	// deletions (spec.deletionEvents).
	TTLDeletionEvents bool
	// TTLDryRun makes every deletion of the TTL-after-finished controller
	// (own TTLs, policies and history limits) a report: a TTLExpiredDryRun
	// event and the dry-run metrics, nothing deleted.
	TTLDryRun bool
	// PodFailureBackoff is the base delay before re-creating a failed pod. Default 10s.
	PodFailureBackoff time.Duration
	// MaxPodFailureBackoff caps the pod re-creation delay. Default 10m.
	MaxPodFailureBackoff time.Duration
	// SyncBatchPeriod batches pod events and status-only Job updates. Default 1s.
	SyncBatchPeriod time.Duration
	// MaxUncountedPods caps status.uncountedTerminatedPods per sync. Default 500.
	MaxUncountedPods int
	// MaxPodCreateDeletePerSync caps pod creations and deletions per sync. Default 500.
	MaxPodCreateDeletePerSync int
	// StaleControllerConsistency makes the Job controller wait, before
	// syncing a Job, until its informers have observed its own last writes
	// for that Job (upstream's StaleControllerConsistencyJob). Default true.
	StaleControllerConsistency bool
	// EnableProfiling serves Go's /debug/pprof handlers on the metrics
	// address. Default false: that address has no authentication, unlike
	// kube-controller-manager's secure port where --profiling is on.
	EnableProfiling bool
	// MetricsBindAddress serves /metrics; "0" disables, port 0 picks a free port. Default ":8080".
	MetricsBindAddress string
	// HealthProbeBindAddress serves /healthz and /readyz; "0" disables. Default ":8081".
	HealthProbeBindAddress string
	// LeaderElect runs leader election on a Lease before starting the controllers.
	LeaderElect bool
	// LeaderElectionNamespace is the namespace of the leader election Lease.
	LeaderElectionNamespace string
	// LeaderElectionID is the name of the leader election Lease.
	LeaderElectionID string
	// LeaseDuration, RenewDeadline and RetryPeriod tune leader election.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// ServerCheck makes Run check, before anything else and only when the
	// Job controller is selected, that the apiserver is MinServerVersion or
	// later and keeps the Job fields the controller relies on (a dry-run
	// create of a Job in LeaderElectionNamespace), and fail saying what is
	// missing. Default false; `jobkeeper controller` turns it on
	// (--server-check). `jobkeeper up` embeds a v1.36 apiserver and needs
	// no check.
	ServerCheck bool
}

// NewOptions returns Options with the documented defaults.
func NewOptions() *Options {
	return &Options{
		KubeAPIQPS:                 50,
		KubeAPIBurst:               100,
		KubeAPIContentType:         ContentTypeProtobuf,
		Controllers:                []string{JobController, TTLAfterFinishedController},
		ManagedBy:                  DefaultManagedBy,
		ConcurrentJobSyncs:         5,
		ConcurrentTTLSyncs:         5,
		PodFailureBackoff:          10 * time.Second,
		MaxPodFailureBackoff:       10 * time.Minute,
		SyncBatchPeriod:            time.Second,
		MaxUncountedPods:           500,
		StaleControllerConsistency: true,
		MaxPodCreateDeletePerSync:  500,
		MetricsBindAddress:         ":8080",
		HealthProbeBindAddress:     ":8081",
		LeaderElectionNamespace:    "kube-system",
		LeaderElectionID:           "jobkeeper",
		LeaseDuration:              15 * time.Second,
		RenewDeadline:              10 * time.Second,
		RetryPeriod:                2 * time.Second,
	}
}

// Validate reports the first invalid option, naming its flag.
func (o *Options) Validate() error {
	var errs []string
	if o.KubeAPIQPS <= 0 {
		errs = append(errs, "--kube-api-qps must be greater than 0")
	}
	if o.KubeAPIBurst <= 0 {
		errs = append(errs, "--kube-api-burst must be greater than 0")
	}
	if o.KubeAPIContentType != ContentTypeProtobuf && o.KubeAPIContentType != ContentTypeJSON {
		errs = append(errs, fmt.Sprintf("--kube-api-content-type: unknown content type %q (known: %s, %s)", o.KubeAPIContentType, ContentTypeProtobuf, ContentTypeJSON))
	}
	for _, c := range o.Controllers {
		if c != JobController && c != TTLAfterFinishedController {
			errs = append(errs, fmt.Sprintf("--controllers: unknown controller %q (known: %s, %s)", c, JobController, TTLAfterFinishedController))
		}
	}
	if o.ManagedBy == "" {
		errs = append(errs, "--managed-by must not be empty")
	}
	if o.ConcurrentJobSyncs < 1 {
		errs = append(errs, "--concurrent-job-syncs must be at least 1")
	}
	if o.ConcurrentTTLSyncs < 1 {
		errs = append(errs, "--concurrent-ttl-syncs must be at least 1")
	}
	if o.PodFailureBackoff <= 0 {
		errs = append(errs, "--pod-failure-backoff must be greater than 0")
	}
	if o.MaxPodFailureBackoff < o.PodFailureBackoff {
		errs = append(errs, "--max-pod-failure-backoff must not be less than --pod-failure-backoff")
	}
	if o.SyncBatchPeriod < 0 {
		errs = append(errs, "--sync-batch-period must not be negative")
	}
	if o.MaxUncountedPods < 1 {
		errs = append(errs, "--max-uncounted-pods must be at least 1")
	}
	if o.MaxPodCreateDeletePerSync < 1 {
		errs = append(errs, "--max-pod-create-delete-per-sync must be at least 1")
	}
	if o.LeaderElect && (o.LeaseDuration <= o.RenewDeadline || o.RenewDeadline <= o.RetryPeriod) {
		errs = append(errs, "leader election: lease duration must exceed renew deadline, which must exceed retry period")
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// Enabled reports whether the named controller is selected.
func (o *Options) Enabled(name string) bool {
	for _, c := range o.Controllers {
		if c == name {
			return true
		}
	}
	return false
}
