package e2e

import (
	"context"
	"regexp"
	"slices"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"jobkeeper.dev/jobkeeper/pkg/manager"
	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

// Timing of the HA test.
const (
	// haCompletions is the size of the Job the leader dies in the middle of.
	haCompletions = 1000
	// haKillAfter is how many pods must have succeeded before the kill.
	haKillAfter = 300
	// haJobTimeout bounds the whole Job, takeover included.
	haJobTimeout = 5 * time.Minute
)

// becameLeader matches the log line of the replica that won the Lease.
var becameLeader = regexp.MustCompile(`"Became leader, starting controllers" identity="([^"]+)"`)

// TestHALeaderKilledMidJob runs two replicas of the binary with the chart's
// arguments (leader election on, default lease timings) as the chart's
// ServiceAccount, SIGKILLs the leader in the middle of a 1,000-completion
// Job, and checks that the standby takes the Lease once the dead leader's
// lease has expired and finishes the Job with exact counts and no finalizer
// left. The takeover time is measured and logged, not asserted beyond the
// bound that client-go's leader election guarantees.
func TestHALeaderKilledMidJob(t *testing.T) {
	cp := inProcessControlPlane(t)
	args := installChart(t, cp)
	kubeconfig := serviceAccountKubeconfig(t, cp)
	c := adminClient(t, cp, "jobkeeper-e2e")
	ns := createTestNamespace(t, c, "ha")
	runTestKubelet(t, c, ns)
	opts := manager.NewOptions() // the chart keeps the default lease timings

	replicas := []*process{startChartReplica(t, args, kubeconfig), startChartReplica(t, args, kubeconfig)}
	health := map[*process]string{}
	for _, r := range replicas {
		health[r] = r.waitForOutput(t, healthAddr, 30*time.Second)[1]
	}
	leases := c.CoordinationV1().Leases(chartNamespace)
	var lease *coordinationv1.Lease
	var leader, standby *process
	framework.WaitFor(t, "a replica to hold the Lease", func(ctx context.Context) (bool, error) {
		l, err := leases.Get(ctx, chartLease, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		lease = l
		holder := ptrString(l.Spec.HolderIdentity)
		for i, r := range replicas {
			if m := becameLeader.FindStringSubmatch(r.output()); m != nil && m[1] == holder {
				leader, standby = r, replicas[1-i]
				return true, nil
			}
		}
		return false, nil
	})
	oldHolder := ptrString(lease.Spec.HolderIdentity)
	// Both replicas are ready: the standby is healthy and able to take over,
	// which is what the Deployment's readiness probe and the PDB rely on.
	for _, r := range replicas {
		waitHTTP(t, "http://"+health[r]+"/readyz", "ok")
		waitHTTP(t, "http://"+health[r]+"/healthz", "ok")
	}

	job := builder.MakeJob("big", ns).ManagedBy(manager.DefaultManagedBy).Parallelism(100).Completions(haCompletions).Obj()
	job, err := c.BatchV1().Jobs(ns).Create(context.Background(), job, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	framework.WaitForWithin(t, haJobTimeout, "the Job to be in the middle of its run", func(ctx context.Context) (bool, error) {
		j, err := c.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{})
		return err == nil && j.Status.Succeeded >= haKillAfter, err
	})

	killed := time.Now()
	if err := syscall.Kill(-leader.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-leader.exited
	j, err := c.BatchV1().Jobs(ns).Get(context.Background(), job.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	succeededAtKill := j.Status.Succeeded
	if succeededAtKill >= haCompletions {
		t.Fatalf("the Job finished (succeeded=%d) before the leader was killed; nothing was tested", succeededAtKill)
	}

	// The dead leader's last renewal: nothing renews the Lease after the kill.
	l, err := leases.Get(context.Background(), chartLease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lastRenew := l.Spec.RenewTime.Time
	var newLease *coordinationv1.Lease
	framework.WaitForWithin(t, 2*opts.LeaseDuration+opts.RenewDeadline, "the standby to take the Lease", func(ctx context.Context) (bool, error) {
		l, err := leases.Get(ctx, chartLease, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if h := ptrString(l.Spec.HolderIdentity); h != "" && h != oldHolder {
			newLease = l
			return true, nil
		}
		return false, nil
	})
	acquired := newLease.Spec.AcquireTime.Time
	// The Lease is written before the new leader logs that it won it.
	if id := standby.waitForOutput(t, becameLeader, 30*time.Second)[1]; id != ptrString(newLease.Spec.HolderIdentity) {
		t.Errorf("the new holder %q is not the standby replica (%q)", ptrString(newLease.Spec.HolderIdentity), id)
	}
	var progressed time.Time
	framework.WaitForWithin(t, haJobTimeout, "the new leader to make progress", func(ctx context.Context) (bool, error) {
		j, err := c.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{})
		if err == nil && j.Status.Succeeded > succeededAtKill {
			progressed = time.Now()
			return true, nil
		}
		return false, err
	})
	final := waitJobFinished(t, c, job, haJobTimeout, standby)

	takeover := acquired.Sub(killed)
	afterExpiry := acquired.Sub(lastRenew.Add(opts.LeaseDuration))
	t.Logf("takeover: leader SIGKILLed at succeeded=%d; standby acquired the Lease %s after the kill "+
		"(%s after the dead leader's lease expired; lease duration %s, retry period %s); first status progress %s after the kill",
		succeededAtKill, takeover.Round(time.Millisecond), afterExpiry.Round(time.Millisecond), opts.LeaseDuration, opts.RetryPeriod,
		progressed.Sub(killed).Round(time.Millisecond))
	// A standby only sees the last renewal when it next polls, and polls
	// every RetryPeriod with client-go's jitter factor 1.2: it acquires
	// within LeaseDuration after its observation plus one poll.
	if bound := opts.LeaseDuration + 2*time.Duration(2.2*float64(opts.RetryPeriod)); acquired.Sub(lastRenew) > bound {
		t.Errorf("the standby took the Lease %s after the last renewal, more than the lease duration plus two polls (%s)",
			acquired.Sub(lastRenew), bound)
	}

	if final.Status.Succeeded != haCompletions || final.Status.Failed != 0 || !hasCondition(batchv1.JobComplete)(final) {
		t.Errorf("Job status succeeded=%d failed=%d conditions=%v, want %d succeeded, 0 failed, Complete",
			final.Status.Succeeded, final.Status.Failed, conditionTypes(final), haCompletions)
	}
	if final.Status.UncountedTerminatedPods != nil &&
		(len(final.Status.UncountedTerminatedPods.Succeeded) > 0 || len(final.Status.UncountedTerminatedPods.Failed) > 0) {
		t.Errorf("uncountedTerminatedPods left: %+v", final.Status.UncountedTerminatedPods)
	}
	framework.WaitForWithin(t, framework.Timeout, "no pod of the Job to hold the tracking finalizer", func(ctx context.Context) (bool, error) {
		pods, err := framework.JobPods(ctx, c, final)
		if err != nil {
			return false, err
		}
		for _, p := range pods {
			if slices.Contains(p.Finalizers, batchv1.JobTrackingFinalizer) {
				return false, nil
			}
		}
		t.Logf("the Job used %d pods for %d completions", len(pods), haCompletions)
		return true, nil
	})
	standby.stop(t)
	for _, r := range replicas {
		if bad := forbiddenLines(r.output()); len(bad) > 0 {
			t.Errorf("a replica logged authorization failures:\n%s", joinLines(bad))
		}
	}
}

func ptrString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
