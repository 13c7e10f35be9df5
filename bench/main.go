// Command bench runs jobkeeper's controllers and upstream's
// (k8s.io/kubernetes/pkg/controller/job and pkg/controller/ttlafterfinished,
// the versions in go.mod) side by side on one embedded control plane
// (pkg/controlplane), and prints a comparison table. It regenerates
// docs/benchmarks.md and the raw results next to it (docs/benchmarks.json).
//
//	go run ./bench -suite default                # workloads 1-5, QPS 50/100 and 500/1000, 3 repeats
//	go run ./bench -suite long                   # adds one Job of 100,000 completions
//	go run ./bench -suite goals                  # issue 27's goals at their stated sizes, QPS 100/200
//	go run ./bench -workloads ttl -scale 0.1 -repeats 1 -qps 500/1000 -out /tmp/b.md
//
// Every controller under test runs in a child process, a lean binary the
// bench builds first (bench/cmd/jobkeeper-child: pkg/manager as
// jobkeeper-controller runs it; bench/cmd/upstream-child: only upstream's two
// controllers), so its CPU time and peak RSS are its own and compare what a
// user would deploy. The child talks to the apiserver through a counting reverse
// proxy in this process, so requests are counted identically for both
// implementations. The instant kubelet and the workload set-up use a direct
// client that is not counted. Within each repeat the two implementations
// alternate (A/B, then B/A), each in a fresh namespace, and the tables show
// the median of the repeats and the ratio jobkeeper/upstream.
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
)

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(2)
	}
	if err := runSuite(cfg); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

// suiteConfig is the parsed command line.
type suiteConfig struct {
	// args is the command line as given, for the results page.
	args []string
	// workloads are the workloads to run, in order.
	workloads []workload
	// repeats is the number of A/B pairs per workload and budget.
	repeats int
	// budgets are the client QPS/burst pairs.
	budgets []budget
	// workers is the sync workers per controller.
	workers int
	// scale multiplies the sizes of the workloads.
	scale float64
	// out and jsonPath are the results page and the raw results.
	out, jsonPath string
	// keep keeps the control plane's directory and the logs.
	keep bool
	// profiles, if set, is where each controller child writes its CPU profile.
	profiles string
	// childVmodule is passed to the controller children as -vmodule.
	childVmodule string
	// jobkeeperAs is how the jobkeeper child runs its manager: inprocess
	// (the bench's settings, HTTP endpoints off) or user (the flags a user
	// runs jobkeeper-controller with: userFlags).
	jobkeeperAs string
}

// budget is a client rate limit.
type budget struct {
	QPS   float64 `json:"qps"`
	Burst int     `json:"burst"`
}

func (b budget) String() string { return fmt.Sprintf("%g/%d", b.QPS, b.Burst) }

// parseBudgets parses "50/100,500/1000".
func parseBudgets(s string) ([]budget, error) {
	var out []budget
	for _, f := range strings.Split(s, ",") {
		q, b, ok := strings.Cut(strings.TrimSpace(f), "/")
		qps, err1 := strconv.ParseFloat(q, 64)
		burst, err2 := strconv.Atoi(b)
		if !ok || err1 != nil || err2 != nil || qps <= 0 || burst <= 0 {
			return nil, fmt.Errorf("-qps: %q is not QPS/burst (e.g. 50/100)", f)
		}
		out = append(out, budget{QPS: qps, Burst: burst})
	}
	return out, nil
}

// flagGiven says whether the command line set the flag name.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

func parseFlags(args []string) (*suiteConfig, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	suite := fs.String("suite", "default", "default (workloads "+strings.Join(suiteWorkloads("default"), ",")+"), long (adds "+strings.Join(suiteWorkloads("long")[len(suiteWorkloads("default")):], ",")+"), or goals (issue 27's goals: "+strings.Join(suiteWorkloads("goals"), ",")+" at the sizes they are stated for, -qps "+goalBudget+" unless given; -scale multiplies those sizes)")
	names := fs.String("workloads", "", "comma-separated workloads to run instead of the suite's: "+strings.Join(allWorkloadNames(), ","))
	repeats := fs.Int("repeats", 3, "A/B pairs per workload and QPS budget (the tables show the median)")
	qps := fs.String("qps", "50/100,500/1000", "comma-separated client QPS/burst budgets, the same for both implementations")
	workers := fs.Int("workers", 5, "sync workers per controller (--concurrent-job-syncs, --concurrent-ttl-syncs)")
	scale := fs.Float64("scale", 1, "multiply every workload's size (completions, Jobs, pods) by this, for quick runs")
	out := fs.String("out", "docs/benchmarks.md", "results page to write (empty: none)")
	jsonPath := fs.String("json", "", "raw results to write (default: -out with .json)")
	keep := fs.Bool("keep", false, "keep the control plane's data directory and the logs")
	profiles := fs.String("cpuprofile-dir", "", "write each controller child's CPU profile to this directory (for go tool pprof)")
	childVmodule := fs.String("child-vmodule", "", "klog -vmodule of the controller children, e.g. reflector=4 (their logs are kept with -keep)")
	jobkeeperAs := fs.String("jobkeeper-as", "inprocess", "how jobkeeper's manager runs: inprocess (the bench's settings, metrics and health endpoints off) or user (parsed from the flags a user runs jobkeeper-controller with, metrics and health endpoints on, --server-check)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	cfg := &suiteConfig{args: args, repeats: *repeats, workers: *workers, scale: *scale, out: *out, jsonPath: *jsonPath, keep: *keep, profiles: *profiles, childVmodule: *childVmodule, jobkeeperAs: *jobkeeperAs}
	if cfg.jobkeeperAs != "inprocess" && cfg.jobkeeperAs != "user" {
		return nil, fmt.Errorf("-jobkeeper-as: %q is neither inprocess nor user", cfg.jobkeeperAs)
	}
	if cfg.repeats < 1 || cfg.workers < 1 || cfg.scale <= 0 {
		return nil, fmt.Errorf("-repeats and -workers must be at least 1, -scale above 0")
	}
	list := suiteWorkloads(*suite)
	if list == nil {
		return nil, fmt.Errorf("-suite: unknown suite %q (default, long or goals)", *suite)
	}
	goals := *suite == "goals"
	if goals && !flagGiven(fs, "qps") {
		*qps = goalBudget
	}
	var err error
	if cfg.budgets, err = parseBudgets(*qps); err != nil {
		return nil, err
	}
	if *names != "" {
		list = strings.Split(*names, ",")
	}
	for _, n := range list {
		w, ok := findWorkload(strings.TrimSpace(n))
		if !ok {
			return nil, fmt.Errorf("-workloads: unknown workload %q (known: %s)", n, strings.Join(allWorkloadNames(), ","))
		}
		f := cfg.scale
		if goals {
			f *= goalScale(w.Name)
		}
		cfg.workloads = append(cfg.workloads, w.scaled(f))
	}
	if cfg.jsonPath == "" && cfg.out != "" {
		cfg.jsonPath = strings.TrimSuffix(cfg.out, ".md") + ".json"
	}
	return cfg, nil
}
