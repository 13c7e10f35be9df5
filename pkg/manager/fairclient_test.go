package manager

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"jobkeeper.dev/jobkeeper/pkg/controller/job"
	"jobkeeper.dev/jobkeeper/pkg/fairqueue"
)

// TestFairQueueOptions: the Job controller's event writes have a
// background share, and throttled requests are let through in batches
// that the bucket holds.
func TestFairQueueOptions(t *testing.T) {
	opts := fairQueueOptions(clock.RealClock{}, nil, 100, 200)
	if len(opts.Background) != 1 || opts.Background[0] != job.EventFlow {
		t.Errorf("background flows %q, want the event sink's %q", opts.Background, job.EventFlow)
	}
	if opts.Window != fairqueue.MaxWindow {
		t.Errorf("window %v at QPS 100, burst 200, want %v", opts.Window, fairqueue.MaxWindow)
	}
	if opts := fairQueueOptions(clock.RealClock{}, nil, 100, 1); opts.Window != 0 {
		t.Errorf("window %v at burst 1, want none: the bucket holds no batch", opts.Window)
	}
}

func TestFairClientConfig(t *testing.T) {
	opts := NewOptions()
	opts.KubeAPIQPS, opts.KubeAPIBurst = 100, 200
	config := &rest.Config{Host: "https://127.0.0.1:6443", QPS: 100, Burst: 200}
	reg := prometheus.NewRegistry()
	fair, stop, err := fairClientConfig(config, opts, clock.RealClock{}, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if config.RateLimiter != nil {
		t.Errorf("the given config was changed")
	}
	l, ok := fair.RateLimiter.(*fairqueue.Limiter)
	if !ok {
		t.Fatalf("RateLimiter is %T, want a *fairqueue.Limiter", fair.RateLimiter)
	}
	if l.QPS() != 100 {
		t.Errorf("QPS %v, want --kube-api-qps", l.QPS())
	}
	if err := l.Wait(fairqueue.WithFlow(context.Background(), "ns/job")); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "job_controller_api_queue_wait_seconds"); n != 2 {
		t.Errorf("%d series of job_controller_api_queue_wait_seconds, want 2 (job and other)", n)
	}
}
