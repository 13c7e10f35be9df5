package metrics

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// leaderStatusValue returns leader_election_master_status{name=name} as
// Registry exports it, and whether it is exported.
func leaderStatusValue(t *testing.T, name string) (float64, bool) {
	t.Helper()
	families, err := Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "leader_election_master_status" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "name" && l.GetValue() == name {
					return m.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

// TestLeaderElectionStatus runs a client-go leader elector on a fake
// clientset and checks that Registry exports its status: 0 as a candidate,
// 1 while leading.
func TestLeaderElectionStatus(t *testing.T) {
	const name = "status-test"
	client := fake.NewClientset()
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: "default", Name: name},
			Client:     client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: "me"},
		},
		LeaseDuration:   15 * time.Second,
		RenewDeadline:   10 * time.Second,
		RetryPeriod:     2 * time.Second,
		ReleaseOnCancel: true,
		Name:            name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) { <-ctx.Done() },
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := leaderStatusValue(t, name); !ok || v != 0 {
		t.Errorf("as a candidate: leader_election_master_status = %v (exported %v), want 0", v, ok)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		le.Run(ctx)
	}()
	// The first acquisition needs no retry: the Lease does not exist yet.
	for !le.IsLeader() {
		select {
		case <-done:
			t.Fatal("the elector stopped without leading")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if v, _ := leaderStatusValue(t, name); v != 1 {
		t.Errorf("while leading: leader_election_master_status = %v, want 1", v)
	}
	// client-go sets 0 again when a renewal fails, not when the context
	// ends: the manager exits then, taking the series with it.
	cancel()
	<-done
}
