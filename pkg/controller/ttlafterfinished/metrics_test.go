package ttlafterfinished

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestMetrics(t *testing.T) {
	at := metav1.NewTime(t0)
	j := job("a", "1").TTLSecondsAfterFinished(10).Condition(batchv1.JobComplete, "", at).Obj()
	f := newFixture(t, t0.Add(13*time.Second), []runtime.Object{j}, nil)
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	f.c.metrics = m
	f.cache(t, j)
	if err := f.c.syncJob(f.ctx, "ns/j"); err != nil {
		t.Fatal(err)
	}
	// Expired at t0+10s, deleted at t0+13s: one sample of 3s, in the 3.2s bucket.
	want := `
# HELP ttl_after_finished_controller_deleted_objects_total Objects deleted after their TTL expired (mode=delete), or reported by a dry-run policy (mode=dry-run).
# TYPE ttl_after_finished_controller_deleted_objects_total counter
ttl_after_finished_controller_deleted_objects_total{group="batch",kind="Job",mode="delete"} 1
# HELP ttl_after_finished_controller_job_deletion_duration_seconds The time it took to delete the job since it became eligible for deletion
# TYPE ttl_after_finished_controller_job_deletion_duration_seconds histogram
ttl_after_finished_controller_job_deletion_duration_seconds_bucket{le="0.1"} 0
ttl_after_finished_controller_job_deletion_duration_seconds_bucket{le="0.2"} 0
ttl_after_finished_controller_job_deletion_duration_seconds_bucket{le="0.4"} 0
ttl_after_finished_controller_job_deletion_duration_seconds_bucket{le="0.8"} 0
ttl_after_finished_controller_job_deletion_duration_seconds_bucket{le="1.6"} 0
ttl_after_finished_controller_job_deletion_duration_seconds_bucket{le="3.2"} 1
ttl_after_finished_controller_job_deletion_duration_seconds_bucket{le="6.4"} 1
ttl_after_finished_controller_job_deletion_duration_seconds_bucket{le="12.8"} 1
ttl_after_finished_controller_job_deletion_duration_seconds_bucket{le="25.6"} 1
ttl_after_finished_controller_job_deletion_duration_seconds_bucket{le="51.2"} 1
ttl_after_finished_controller_job_deletion_duration_seconds_bucket{le="102.4"} 1
ttl_after_finished_controller_job_deletion_duration_seconds_bucket{le="204.8"} 1
ttl_after_finished_controller_job_deletion_duration_seconds_bucket{le="409.6"} 1
ttl_after_finished_controller_job_deletion_duration_seconds_bucket{le="819.2"} 1
ttl_after_finished_controller_job_deletion_duration_seconds_bucket{le="+Inf"} 1
ttl_after_finished_controller_job_deletion_duration_seconds_sum 3
ttl_after_finished_controller_job_deletion_duration_seconds_count 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"ttl_after_finished_controller_deleted_objects_total",
		"ttl_after_finished_controller_job_deletion_duration_seconds"); err != nil {
		t.Error(err)
	}
}
