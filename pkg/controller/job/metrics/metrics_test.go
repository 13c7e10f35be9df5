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

// fixedSource is a StaleFinalizerSource returning one reading.
type fixedSource struct{ r StaleFinalizers }

func (s *fixedSource) StaleFinalizers() StaleFinalizers { return s.r }

func TestStaleFinalizerCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	gather := func() map[string]float64 {
		t.Helper()
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, f := range families {
			got[f.GetName()] = f.GetMetric()[0].GetGauge().GetValue()
		}
		return got
	}
	if got := gather(); len(got) != 0 {
		t.Errorf("without a source the registry exports %v, want nothing", got)
	}
	first := &fixedSource{StaleFinalizers{Pods: 3, OldestSeconds: 125.5}}
	m.StaleFinalizers.SetSource(first)
	want := map[string]float64{
		"job_controller_stale_tracking_finalizer_pods":           3,
		"job_controller_stale_tracking_finalizer_oldest_seconds": 125.5,
	}
	if diff := cmp.Diff(want, gather()); diff != "" {
		t.Errorf("with a source (-want +got):\n%s", diff)
	}
	// A controller restarted in the same process registers again and takes
	// over the collector; the old one's ClearSource leaves the new source.
	again, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	second := &fixedSource{}
	again.StaleFinalizers.SetSource(second)
	m.StaleFinalizers.ClearSource(first)
	want = map[string]float64{
		"job_controller_stale_tracking_finalizer_pods":           0,
		"job_controller_stale_tracking_finalizer_oldest_seconds": 0,
	}
	if diff := cmp.Diff(want, gather()); diff != "" {
		t.Errorf("after a restart (-want +got):\n%s", diff)
	}
	again.StaleFinalizers.ClearSource(second)
	if got := gather(); len(got) != 0 {
		t.Errorf("after ClearSource the registry exports %v, want nothing", got)
	}
}
