package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestAPIQueueWait(t *testing.T) {
	reg := prometheus.NewRegistry()
	observe, err := NewAPIQueueWait(reg)
	if err != nil {
		t.Fatal(err)
	}
	// A controller restarted in the same process keeps the histogram.
	again, err := NewAPIQueueWait(reg)
	if err != nil {
		t.Fatalf("registering twice: %v", err)
	}
	observe("ns/job", 20*time.Millisecond)
	again("ns/other-job", 3*time.Second)
	observe("", time.Millisecond)
	observe("events", time.Second) // the event sink's flow, not a Job key
	if n := testutil.CollectAndCount(reg, "job_controller_api_queue_wait_seconds"); n != 2 {
		t.Errorf("%d series, want 2 (flow job and other)", n)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			counts[m.GetLabel()[0].GetValue()] = m.GetHistogram().GetSampleCount()
		}
	}
	if counts[FlowJob] != 2 || counts[FlowOther] != 2 {
		t.Errorf("samples by flow %v, want 2 job and 2 other", counts)
	}
}
