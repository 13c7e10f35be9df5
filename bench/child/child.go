package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"jobkeeper.dev/jobkeeper/bench/harness"
	"jobkeeper.dev/jobkeeper/pkg/manager"
)

// childReport is what the controller process prints on stdout, one JSON
// object per line: {"synced":true} once its informers have synced, then the
// final figures after SIGTERM.
type childReport struct {
	// Synced is set on the line printed when the informers have synced.
	Synced bool `json:"synced,omitempty"`
	// PeakHeapLive is the highest live heap seen after a GC (runtime/metrics
	// /gc/heap/live:bytes), sampled every 50ms.
	PeakHeapLive uint64 `json:"peakHeapLive,omitempty"`
	// PeakHeapInUse is the highest heap in use (live and not yet swept objects).
	PeakHeapInUse uint64 `json:"peakHeapInUse,omitempty"`
	// HeapLiveAtStop is the live heap after a forced GC on SIGTERM, before the
	// controllers stop: the steady heap of what the controllers hold.
	HeapLiveAtStop uint64 `json:"heapLiveAtStop,omitempty"`
	// VmHWMKiB is the process's peak resident set (/proc/self/status). The
	// kernel's rusage of a child is no use here: Go starts children with
	// vfork semantics, and execve folds the parent's peak into the child's.
	VmHWMKiB uint64 `json:"vmHWMKiB,omitempty"`
	// Final is set on the last line.
	Final bool `json:"final,omitempty"`
}

// runController is the hidden "controller" mode: it runs one implementation's
// controllers until SIGTERM, so that the parent measures this process alone.
func runController(args []string) error {
	fs := flag.NewFlagSet("controller", flag.ExitOnError)
	impl := fs.String("impl", "", "jobkeeper or upstream")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the (counting) apiserver endpoint")
	qps := fs.Float64("qps", 50, "client QPS")
	burst := fs.Int("burst", 100, "client burst")
	workers := fs.Int("workers", 5, "sync workers per controller")
	controllers := fs.String("controllers", "job,ttl-after-finished", "controllers to run")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	klogFlags := flag.NewFlagSet("klog", flag.ExitOnError)
	klog.InitFlags(klogFlags)
	fs.Func("v", "klog verbosity", func(s string) error { return klogFlags.Set("v", s) })
	if err := fs.Parse(args); err != nil {
		return err
	}
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("loading %s: %w", *kubeconfig, err)
	}
	config.QPS, config.Burst = float32(*qps), *burst
	// Both sides speak protobuf to the built-in APIs: kube-controller-manager
	// by default (--kube-api-content-type), jobkeeper by default too.
	config.ContentType = manager.ContentTypeProtobuf
	config.AcceptContentTypes = manager.ContentTypeProtobuf + "," + manager.ContentTypeJSON
	names := strings.Split(*controllers, ",")

	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("starting the CPU profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	sampler := startHeapSampler()
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background()))
	defer cancel()
	var synced func() bool
	var wait func()
	switch *impl {
	case "jobkeeper":
		// As `jobkeeper controller` runs them, with the HTTP endpoints off.
		opts := manager.NewOptions()
		opts.KubeAPIQPS, opts.KubeAPIBurst = float32(*qps), *burst
		opts.Controllers = names
		opts.ConcurrentJobSyncs, opts.ConcurrentTTLSyncs = *workers, *workers
		opts.ManageUnclaimedJobs = true
		opts.MetricsBindAddress, opts.HealthProbeBindAddress = "0", "0"
		m, err := manager.New(config, opts)
		if err != nil {
			return err
		}
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		synced = m.Synced
		wait = func() {
			if err := <-done; err != nil {
				klog.Background().Error(err, "Manager stopped")
			}
		}
	case "upstream":
		u, err := harness.StartUpstream(ctx, config, names, *workers)
		if err != nil {
			return err
		}
		synced, wait = u.Synced, u.Wait
	default:
		return fmt.Errorf("unknown -impl %q (jobkeeper or upstream)", *impl)
	}

	out := json.NewEncoder(os.Stdout)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	tick := time.NewTicker(5 * time.Millisecond)
	for reported := false; ; {
		select {
		case <-tick.C:
			if !reported && synced() {
				reported = true
				tick.Stop()
				if err := out.Encode(childReport{Synced: true}); err != nil {
					return err
				}
			}
			continue
		case <-stop:
		}
		break
	}
	runtime.GC()
	report := childReport{HeapLiveAtStop: readUint(metricHeapLive), Final: true}
	cancel()
	stopped := make(chan struct{})
	go func() { wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		klog.Background().Info("Controllers did not stop within 30s, reporting anyway")
	}
	report.PeakHeapLive, report.PeakHeapInUse = sampler()
	report.VmHWMKiB = vmHWM()
	return out.Encode(report)
}

const (
	metricHeapLive  = "/gc/heap/live:bytes"
	metricHeapInUse = "/memory/classes/heap/objects:bytes"
)

// startHeapSampler samples the heap every 50ms and returns a function that
// stops sampling and returns the peaks of the live heap and the heap in use.
func startHeapSampler() func() (live, inUse uint64) {
	done := make(chan struct{})
	var peakLive, peakInUse uint64
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		samples := []metrics.Sample{{Name: metricHeapLive}, {Name: metricHeapInUse}}
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(samples)
			peakLive = max(peakLive, samples[0].Value.Uint64())
			peakInUse = max(peakInUse, samples[1].Value.Uint64())
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() (uint64, uint64) {
		close(done)
		<-finished
		return peakLive, peakInUse
	}
}

// vmHWM returns the peak resident set of this process in KiB (0 if unknown).
func vmHWM() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kib uint64
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kib)
			return kib
		}
	}
	return 0
}

func readUint(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
