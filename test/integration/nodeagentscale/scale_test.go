// Package nodeagentscale measures the node agent's simulated runtime with the
// real Job controller: a big Job must finish with every pod "run" locally.
package nodeagentscale

import (
	"context"
	"net/http"
	_ "net/http/pprof"
	"os"
	"strconv"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"jobkeeper.dev/jobkeeper/pkg/manager"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/simulated"
	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }

// completions is 1,000 by default; JOBKEEPER_SCALE_COMPLETIONS overrides it
// (the check is 10,000).
func completions(t *testing.T) int32 {
	if v := os.Getenv("JOBKEEPER_SCALE_COMPLETIONS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatal(err)
		}
		return int32(n)
	}
	return 1000
}

func TestSimulatedBigJob(t *testing.T) {
	if testing.Short() {
		t.Skip("scale test")
	}
	n := completions(t)
	if addr := os.Getenv("JOBKEEPER_SCALE_PPROF"); addr != "" {
		go func() { _ = http.ListenAndServe(addr, nil) }()
	}
	// Logs go to klog (the framework's log file), not to the test's output.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	client, err := kubernetes.NewForConfig(framework.Config())
	if err != nil {
		t.Fatal(err)
	}
	agent, err := nodeagent.New(client, nodeagent.Options{NodeName: "scale-node", MaxPods: 1000, Runtime: simulated.Name, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	agentDone := make(chan error, 1)
	go func() { agentDone <- agent.Run(ctx) }()

	opts := manager.NewOptions()
	opts.ManageUnclaimedJobs = true
	opts.MetricsBindAddress, opts.HealthProbeBindAddress = "0", "0"
	opts.KubeAPIQPS, opts.KubeAPIBurst = 1000, 2000
	m, err := manager.New(framework.Config(), opts)
	if err != nil {
		t.Fatal(err)
	}
	managerDone := make(chan error, 1)
	go func() { managerDone <- m.Run(ctx) }()

	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	start := time.Now()
	job, err := c.BatchV1().Jobs(ns).Create(context.Background(),
		builder.MakeJob("big", ns).Completions(n).Parallelism(500).Obj(), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got *batchv1.Job
	deadline := time.Now().Add(15 * time.Minute)
	for {
		got, err = c.BatchV1().Jobs(ns).Get(context.Background(), job.Name, metav1.GetOptions{})
		if err == nil && got.Status.Succeeded == n {
			done := false
			for _, cond := range got.Status.Conditions {
				done = done || cond.Type == batchv1.JobComplete
			}
			if done {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("job did not complete; status %+v", got.Status)
		}
		time.Sleep(time.Second)
	}
	t.Logf("Job of %d completions, parallelism 500, simulated runtime: Complete in %s", n, time.Since(start).Round(time.Millisecond))
	cancel()
	<-agentDone
	<-managerDone
}
