package metrics

import (
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

func TestNamesAndReuse(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	// A second controller in the same process shares the collectors.
	again, err := New(reg)
	if err != nil {
		t.Fatalf("registering twice: %v", err)
	}
	m.Syncs.WithLabelValues("NonIndexed", Success, ActionPodsCreated).Inc()
	again.Syncs.WithLabelValues("NonIndexed", Success, ActionPodsCreated).Inc()
	m.SyncDuration.WithLabelValues("NonIndexed", Success, ActionPodsCreated).Observe(0.1)
	m.JobsFinished.WithLabelValues("Indexed", Succeeded, "CompletionsReached").Inc()
	m.JobsByExternalController.WithLabelValues("example.com/x").Inc()
	m.PodsFinished.WithLabelValues("NonIndexed", Failed).Inc()
	m.TerminatedPodsTrackingFinalizer.WithLabelValues(Add).Inc()
	m.FinishedIndexes.WithLabelValues(Succeeded, "global").Inc()
	m.PodsCreation.WithLabelValues(PodCreateNew, Succeeded).Inc()
	m.PodFailuresHandledByFailurePolicy.WithLabelValues(PodFailurePolicyIgnore).Inc()
	m.StaleSyncSkips.WithLabelValues("", "pods").Inc()

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
		if f.GetName() == "job_controller_job_syncs_total" {
			if v := f.GetMetric()[0].GetCounter().GetValue(); v != 2 {
				t.Errorf("job_syncs_total = %v, want 2 (shared by both instances)", v)
			}
		}
	}
	sort.Strings(names)
	want := []string{
		"job_controller_job_finished_indexes_total",
		"job_controller_job_pods_creation_total",
		"job_controller_job_pods_finished_total",
		"job_controller_job_sync_duration_seconds",
		"job_controller_job_syncs_total",
		"job_controller_jobs_by_external_controller_total",
		"job_controller_jobs_finished_total",
		"job_controller_pod_failures_handled_by_failure_policy_total",
		"job_controller_stale_sync_skips_total",
		"job_controller_terminated_pods_tracking_finalizer_total",
	}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("metric names (-want +got):\n%s", diff)
	}
}
