package cli

import (
	"strings"

	"github.com/spf13/pflag"

	"jobkeeper.dev/jobkeeper/pkg/manager"
)

// AddControllerFlags binds the controller options of DESIGN.md section 4.
// The flag names are a contract with users' manifests: do not rename them.
func AddControllerFlags(fs *pflag.FlagSet, o *manager.Options) {
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "QPS to use while talking with the kube-apiserver.")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "Burst to use while talking with the kube-apiserver.")
	fs.StringVar(&o.KubeAPIContentType, "kube-api-content-type", o.KubeAPIContentType, "Content type of requests sent to the kube-apiserver for built-in APIs ("+manager.ContentTypeProtobuf+" or "+manager.ContentTypeJSON+").")
	fs.StringSliceVar(&o.Controllers, "controllers", o.Controllers, "Comma-separated controllers to run: "+strings.Join([]string{manager.JobController, manager.TTLAfterFinishedController}, ", ")+".")
	fs.StringVar(&o.ManagedBy, "managed-by", o.ManagedBy, "spec.managedBy value of the Jobs this controller manages.")
	fs.BoolVar(&o.ManageUnclaimedJobs, "manage-unclaimed-jobs", o.ManageUnclaimedJobs, "Also manage Jobs with no spec.managedBy or with kubernetes.io/job-controller (only where kube-controller-manager's Job controller does not run).")
	fs.IntVar(&o.ConcurrentJobSyncs, "concurrent-job-syncs", o.ConcurrentJobSyncs, "Number of Jobs synced concurrently.")
	fs.IntVar(&o.ConcurrentTTLSyncs, "concurrent-ttl-syncs", o.ConcurrentTTLSyncs, "Number of TTL-after-finished workers.")
	fs.BoolVar(&o.TTLDeletionEvents, "ttl-deletion-events", o.TTLDeletionEvents, "Record a TTLExpired event on every object the TTL-after-finished controller deletes (one more API write per deletion; a TTLPolicy's spec.deletionEvents turns them on for its own deletions).")
	fs.BoolVar(&o.TTLDryRun, "ttl-dry-run", o.TTLDryRun, "Delete nothing by TTL or history limit: record a TTLExpiredDryRun event and count the object in the dry-run metrics instead (to try policies on a live cluster).")
	fs.DurationVar(&o.PodFailureBackoff, "pod-failure-backoff", o.PodFailureBackoff, "Base delay before re-creating a failed pod; doubles with each consecutive failure.")
	fs.DurationVar(&o.MaxPodFailureBackoff, "max-pod-failure-backoff", o.MaxPodFailureBackoff, "Maximum delay before re-creating a failed pod.")
	fs.DurationVar(&o.SyncBatchPeriod, "sync-batch-period", o.SyncBatchPeriod, "Period over which pod events and status-only Job updates are batched into one sync.")
	fs.BoolVar(&o.StaleControllerConsistency, "stale-controller-consistency", o.StaleControllerConsistency, "Before syncing a Job, wait until the informers have observed the controller's own last writes for it (upstream's StaleControllerConsistencyJob); --stale-controller-consistency=false turns it off.")
	fs.IntVar(&o.MaxUncountedPods, "max-uncounted-pods", o.MaxUncountedPods, "Maximum finished pods recorded in status.uncountedTerminatedPods per sync.")
	fs.IntVar(&o.MaxPodCreateDeletePerSync, "max-pod-create-delete-per-sync", o.MaxPodCreateDeletePerSync, "Maximum pod creations and deletions per Job sync.")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress, "Address of the /metrics endpoint (port 0 picks a free port; \"0\" disables it).")
	fs.BoolVar(&o.EnableProfiling, "profiling", o.EnableProfiling, "Serve /debug/pprof on the metrics address (which has no authentication: keep it private).")
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", o.HealthProbeBindAddress, "Address of the /healthz and /readyz endpoints (port 0 picks a free port; \"0\" disables them).")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "Hold a Lease before running the controllers, so several replicas can run with one active.")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-elect-resource-namespace", o.LeaderElectionNamespace, "Namespace of the leader election Lease (jobkeeper controller: $POD_NAMESPACE when set).")
	fs.StringVar(&o.LeaderElectionID, "leader-elect-resource-name", o.LeaderElectionID, "Name of the leader election Lease.")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", o.LeaseDuration, "How long a non-leader waits after the last renewal before taking the Lease.")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", o.RenewDeadline, "How long the leader keeps trying to renew before giving up.")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", o.RetryPeriod, "Interval between attempts to acquire or renew the Lease.")
	addFeatureGatesFlag(fs)
}
