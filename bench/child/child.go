// Package child is the measuring part of the benchmark's controller
// processes. Each implementation has its own lean main
// (bench/cmd/jobkeeper-child, bench/cmd/upstream-child) that links only its
// controllers and this package, so that CPU and peak RSS compare what a user
// would deploy: jobkeeper-controller against a binary holding upstream's two
// controllers.
package child

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

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// Report is what the controller process prints on stdout, one JSON
// object per line: {"synced":true} once its informers have synced, then the
// final figures after SIGTERM.
type Report struct {
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
	// GCCycles, GCCPUSeconds and AllocatedBytes are the run's garbage
	// collections, the runtime's estimate of the CPU they took
	// (/cpu/classes/gc/total:cpu-seconds), and the bytes it allocated on the
	// heap, read at SIGTERM: what splits a CPU difference into collecting and
	// the rest.
	GCCycles       uint64  `json:"gcCycles,omitempty"`
	GCCPUSeconds   float64 `json:"gcCPUSeconds,omitempty"`
	AllocatedBytes uint64  `json:"allocatedBytes,omitempty"`
	// GoroutinesCreated and Threads are the goroutines the process started
	// over the run and the OS threads it has at SIGTERM (the Go runtime
	// keeps the threads it made): hand-overs and blocking that a CPU
	// profile shows only as scheduler time.
	GoroutinesCreated uint64 `json:"goroutinesCreated,omitempty"`
	Threads           uint64 `json:"threads,omitempty"`
	// Final is set on the last line.
	Final bool `json:"final,omitempty"`
}

// Start starts one implementation's controllers against the apiserver of
// config, with workers sync workers per controller, and returns a function
// that reports whether their informers have synced and one that waits,
// once ctx is done, for them to stop.
type Start func(ctx context.Context, config *rest.Config, controllers []string, workers int) (synced func() bool, wait func(), err error)

// Main is a benchmark child's main: it parses the command line the bench
// passes, runs start's controllers until SIGTERM, and prints the Report
// lines on stdout. It exits the process on error.
func Main(name string, start Start) {
	if err := run(name, start, os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

func run(name string, start Start, args []string) error {
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the (counting) apiserver endpoint")
	qps := fs.Float64("qps", 50, "client QPS")
	burst := fs.Int("burst", 100, "client burst")
	workers := fs.Int("workers", 5, "sync workers per controller")
	controllers := fs.String("controllers", "job,ttl-after-finished", "controllers to run")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file, and a heap profile (live objects at SIGTERM, allocations over the run) to this file with .heap appended")
	klogFlags := flag.NewFlagSet("klog", flag.ExitOnError)
	klog.InitFlags(klogFlags)
	fs.Func("v", "klog verbosity", func(s string) error { return klogFlags.Set("v", s) })
	fs.Func("vmodule", "klog per-file verbosity (e.g. reflector=4)", func(s string) error { return klogFlags.Set("vmodule", s) })
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
	config.ContentType = contentTypeProtobuf
	config.AcceptContentTypes = contentTypeProtobuf + "," + contentTypeJSON

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
	synced, wait, err := start(ctx, config, strings.Split(*controllers, ","), *workers)
	if err != nil {
		return err
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
				if err := out.Encode(Report{Synced: true}); err != nil {
					return err
				}
			}
			continue
		case <-stop:
		}
		break
	}
	gc := []metrics.Sample{{Name: metricGCCycles}, {Name: metricGCCPU}, {Name: metricAllocated}, {Name: metricGoroutinesCreated}, {Name: metricThreads}}
	metrics.Read(gc)
	runtime.GC()
	report := Report{HeapLiveAtStop: readUint(metricHeapLive), Final: true,
		GCCycles: gc[0].Value.Uint64(), GCCPUSeconds: gc[1].Value.Float64(), AllocatedBytes: gc[2].Value.Uint64(),
		GoroutinesCreated: gc[3].Value.Uint64(), Threads: gc[4].Value.Uint64()}
	if *cpuprofile != "" {
		if err := writeHeapProfile(*cpuprofile + ".heap"); err != nil {
			return err
		}
	}
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
	contentTypeProtobuf = "application/vnd.kubernetes.protobuf"
	contentTypeJSON     = "application/json"

	metricHeapLive  = "/gc/heap/live:bytes"
	metricHeapInUse = "/memory/classes/heap/objects:bytes"
	metricGCCycles  = "/gc/cycles/total:gc-cycles"
	metricGCCPU     = "/cpu/classes/gc/total:cpu-seconds"
	metricAllocated = "/gc/heap/allocs:bytes"

	metricGoroutinesCreated = "/sched/goroutines-created:goroutines"
	metricThreads           = "/sched/threads/total:threads"
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

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("writing the heap profile: %w", err)
	}
	return f.Close()
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
