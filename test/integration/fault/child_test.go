package fault

import (
	"context"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	upstreamctl "jobkeeper.dev/jobkeeper/bench/upstream"
	"jobkeeper.dev/jobkeeper/pkg/manager"
	"jobkeeper.dev/jobkeeper/test/fault"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

// Environment of the controller child process.
const (
	// childEnv set to the kubeconfig path makes the test binary run the
	// controllers instead of tests.
	childEnv = "JOBKEEPER_FAULT_CHILD"
	// childControllersEnv lists the controllers the child runs.
	childControllersEnv = "JOBKEEPER_FAULT_CONTROLLERS"
	// childVerbosityEnv, if set, is the child's log verbosity (klog -v).
	childVerbosityEnv = "JOBKEEPER_FAULT_V"
	// upstreamEnv, set to 1, runs kube-controller-manager's controllers
	// (k8s.io/kubernetes v1.36, as in the benchmark) instead of jobkeeper's,
	// for a side-by-side reading of the same scenarios.
	upstreamEnv = "JOBKEEPER_FAULT_UPSTREAM"
)

// upstream reports whether this run tests upstream's controllers.
func upstream() bool { return os.Getenv(upstreamEnv) == "1" }

// runChild runs the controllers against the kubeconfig in childEnv until
// killed or signalled. Its options are upstream's defaults except for
// faster batching and backoff, so scenarios stay short.
func runChild() int {
	if v := os.Getenv(childVerbosityEnv); v != "" {
		var fs flag.FlagSet
		klog.InitFlags(&fs)
		fs.Set("v", v)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv(childEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if upstream() {
		cfg.QPS, cfg.Burst = 500, 1000
		if _, err := upstreamctl.Start(ctx, cfg, strings.Split(os.Getenv(childControllersEnv), ","), 5); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			return 2
		}
		<-ctx.Done()
		return 0
	}
	opts := manager.NewOptions()
	opts.Controllers = strings.Split(os.Getenv(childControllersEnv), ",")
	opts.KubeAPIQPS, opts.KubeAPIBurst = 500, 1000
	opts.SyncBatchPeriod = 100 * time.Millisecond
	opts.PodFailureBackoff = 100 * time.Millisecond
	opts.MaxPodFailureBackoff = time.Second
	opts.MetricsBindAddress, opts.HealthProbeBindAddress = "0", "0"
	m, err := manager.New(cfg, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	if err := m.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

// rig is a proxy with faults in front of the control plane and the
// controller process behind it.
type rig struct {
	t           testing.TB
	proxy       *fault.Proxy
	kubeconfig  string
	controllers string
	logDir      string
	// mu guards child and kills.
	mu    sync.Mutex
	child *exec.Cmd
	kills int
}

// newRig starts the proxy and a controller process running controllers
// ("job", "ttl-after-finished" or both, comma-separated).
func newRig(t testing.TB, seed int64, controllers string) *rig {
	t.Helper()
	p, err := fault.New(framework.Config(), seed)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	r := &rig{t: t, proxy: p, kubeconfig: filepath.Join(dir, "kubeconfig"), controllers: controllers, logDir: dir}
	if err := p.WriteKubeconfig(r.kubeconfig); err != nil {
		t.Fatal(err)
	}
	r.start()
	t.Cleanup(func() {
		r.stop()
		p.Close()
		if t.Failed() {
			keep := filepath.Join(os.TempDir(), "jobkeeper-fault-logs", strings.ReplaceAll(t.Name(), "/", "_")+".log")
			if b, err := os.ReadFile(filepath.Join(dir, "controller.log")); err == nil && os.MkdirAll(filepath.Dir(keep), 0o755) == nil && os.WriteFile(keep, b, 0o644) == nil {
				t.Logf("controller log kept in %s", keep)
			}
		}
	})
	return r
}

// start launches a controller process.
func (r *rig) start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	log, err := os.OpenFile(filepath.Join(r.logDir, "controller.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		r.t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+r.kubeconfig, childControllersEnv+"="+r.controllers)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	go func() {
		cmd.Wait()
		log.Close()
	}()
	r.child = cmd
}

// kill sends SIGKILL to the controller process and starts a new one after
// a short pause, as a restarting Deployment would.
func (r *rig) kill(rng *rand.Rand) {
	r.mu.Lock()
	if r.child != nil {
		r.child.Process.Kill()
		r.kills++
	}
	r.mu.Unlock()
	time.Sleep(time.Duration(50+rng.Intn(300)) * time.Millisecond)
	r.start()
}

// stop kills the controller process for good.
func (r *rig) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.child != nil {
		r.child.Process.Kill()
		r.child = nil
	}
}

// killed returns how many times the controller was killed.
func (r *rig) killed() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.kills
}

// chaos kills the controller every min..max until ctx is done, at most n
// times (n <= 0: never).
func (r *rig) chaos(ctx context.Context, rng *rand.Rand, n int, minEvery, maxEvery time.Duration) {
	for i := 0; i < n; i++ {
		d := minEvery + time.Duration(rng.Int63n(int64(maxEvery-minEvery)+1))
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
		r.kill(rng)
	}
}
