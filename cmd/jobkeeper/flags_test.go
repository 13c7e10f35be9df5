package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	featuregatetesting "k8s.io/component-base/featuregate/testing"

	"jobkeeper.dev/jobkeeper/internal/cli"
	"jobkeeper.dev/jobkeeper/pkg/manager"
)

// TestControllerFlags checks the flag names of DESIGN.md section 4, which
// users' manifests rely on, and that they reach the options.
func TestControllerFlags(t *testing.T) {
	cmd := cli.NewControllerCommand("controller")
	args := []string{
		"--kubeconfig=/tmp/kc", "--kube-api-qps=7", "--kube-api-burst=9", "--controllers=job",
		"--kube-api-content-type=application/json",
		"--managed-by=example.com/x", "--manage-unclaimed-jobs", "--concurrent-job-syncs=3",
		"--concurrent-ttl-syncs=4", "--pod-failure-backoff=2s", "--max-pod-failure-backoff=1m",
		"--sync-batch-period=250ms", "--max-uncounted-pods=10", "--max-pod-create-delete-per-sync=11",
		"--stale-controller-consistency=false",
		"--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=0", "--leader-elect=false",
	}
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	fs := cmd.Flags()
	want := map[string]string{
		"kube-api-qps": "7", "kube-api-burst": "9", "controllers": "[job]",
		"kube-api-content-type": "application/json", "managed-by": "example.com/x",
		"manage-unclaimed-jobs": "true", "concurrent-job-syncs": "3", "concurrent-ttl-syncs": "4",
		"pod-failure-backoff": "2s", "max-pod-failure-backoff": "1m0s", "sync-batch-period": "250ms",
		"max-uncounted-pods": "10", "max-pod-create-delete-per-sync": "11",
		"stale-controller-consistency": "false",
		"metrics-bind-address":         "127.0.0.1:0", "health-probe-bind-address": "0", "leader-elect": "false",
	}
	for name, v := range want {
		f := fs.Lookup(name)
		if f == nil {
			t.Errorf("flag --%s missing", name)
			continue
		}
		if f.Value.String() != v {
			t.Errorf("--%s = %s, want %s", name, f.Value.String(), v)
		}
	}
}

// TestControllerLeaderElectionNamespace checks where the Lease lives: in
// $POD_NAMESPACE when it is set (a pod), else kube-system, and always where
// --leader-elect-resource-namespace says when given.
func TestControllerLeaderElectionNamespace(t *testing.T) {
	cases := map[string]struct {
		podNamespace string
		args         []string
		want         string
	}{
		"outside a pod":      {want: "kube-system"},
		"in a pod":           {podNamespace: "jobkeeper", want: "jobkeeper"},
		"flag wins":          {podNamespace: "jobkeeper", args: []string{"--leader-elect-resource-namespace=ops"}, want: "ops"},
		"flag outside a pod": {args: []string{"--leader-elect-resource-namespace=ops"}, want: "ops"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Setenv("POD_NAMESPACE", tc.podNamespace)
			cmd := cli.NewControllerCommand("controller")
			if err := cmd.ParseFlags(tc.args); err != nil {
				t.Fatal(err)
			}
			if got := cmd.Flags().Lookup("leader-elect-resource-namespace").Value.String(); got != tc.want {
				t.Errorf("lease namespace = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestUpDefaults(t *testing.T) {
	cmd := newUpCommand()
	fs := cmd.Flags()
	for name, want := range map[string]string{
		"port": "6443", "manage-unclaimed-jobs": "true", "leader-elect": "false", "runtime": "process",
		"max-pods": "110", "kubeconfig-out": "", "kube-api-qps": "500", "kube-api-burst": "1000",
		"sync-frequency": "1m0s",
	} {
		if got := fs.Lookup(name).Value.String(); got != want {
			t.Errorf("up --%s default = %q, want %q", name, got, want)
		}
	}
	if d := fs.Lookup("data-dir").Value.String(); !strings.HasSuffix(d, ".jobkeeper") {
		t.Errorf("up --data-dir default = %q, want ~/.jobkeeper", d)
	}
}

func TestUpValidate(t *testing.T) {
	cases := map[string]struct {
		up      upOptions
		node    nodeAgentFlags
		mutate  func(*manager.Options)
		wantErr string
	}{
		"valid":              {up: upOptions{dataDir: "d", port: 6443}},
		"default kubeconfig": {up: upOptions{dataDir: "d"}},
		"no data dir":        {up: upOptions{}, wantErr: "--data-dir"},
		"negative port":      {up: upOptions{dataDir: "d", port: -1}, wantErr: "--port"},
		"port too large":     {up: upOptions{dataDir: "d", port: 65536}, wantErr: "--port"},
		"bad controller opt": {up: upOptions{dataDir: "d"}, mutate: func(o *manager.Options) { o.SyncBatchPeriod = -time.Second }, wantErr: "--sync-batch-period"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := manager.NewOptions()
			if tc.mutate != nil {
				tc.mutate(o)
			}
			up := tc.up
			err := up.validate(o)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if !filepath.IsAbs(up.dataDir) || up.kubeconfigOut != filepath.Join(up.dataDir, "kubeconfig") {
					t.Errorf("paths not completed: %+v", up)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("err = %v, want one naming %q", err, tc.wantErr)
			}
		})
	}
}

func TestNodeAgentFlagsValidate(t *testing.T) {
	cases := map[string]struct {
		args    []string
		gate    featuregate.Feature
		wantErr string
	}{
		"defaults":                      {},
		"simulated":                     {args: []string{"--runtime=simulated"}},
		"unknown runtime":               {args: []string{"--runtime=docker"}, wantErr: "--runtime"},
		"zero max pods":                 {args: []string{"--max-pods=0"}, wantErr: "--max-pods"},
		"zero sync period":              {args: []string{"--sync-frequency=0s"}, wantErr: "--sync-frequency"},
		"kubelet port high":             {args: []string{"--kubelet-port=70000"}, wantErr: "--kubelet-port"},
		"cgroups off":                   {args: []string{"--cgroups=off"}},
		"cgroups unknown":               {args: []string{"--cgroups=v3"}, wantErr: "--cgroups"},
		"extended resources":            {args: []string{"--extended-resource", "example.com/gpu=1", "--extended-resource", "example.com/fpga=2,vendor.io/x=0"}},
		"not an extended resource name": {args: []string{"--extended-resource", "gpu=1"}, wantErr: "--extended-resource gpu: not an extended resource name"},
		"a negative count":              {args: []string{"--extended-resource", "example.com/gpu=-1"}, wantErr: "--extended-resource example.com/gpu=-1"},
		// A gate that changes what a kubelet does for pods, turned on,
		// stops up before it starts, naming it; without the node agent
		// it is no concern of up's.
		"a gate the agent does not honour": {gate: "ContainerStopSignals", wantErr: "ContainerStopSignals (containers' lifecycle.stopSignal)"},
		"that gate without the agent":      {gate: "ContainerStopSignals", args: []string{"--node-agent=false"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if tc.gate != "" {
				featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, tc.gate, true)
			}
			f := &nodeAgentFlags{}
			fs := pflag.NewFlagSet("up", pflag.ContinueOnError)
			f.addFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := f.validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Errorf("unexpected error: %v", err)
				}
				if name == "extended resources" && len(f.opts.ExtendedResources) != 3 {
					t.Errorf("extended resources %v, want three", f.opts.ExtendedResources)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("err = %v, want one naming %q", err, tc.wantErr)
			}
		})
	}
}

func TestVersionCommand(t *testing.T) {
	var out bytes.Buffer
	root := newRootCommand()
	root.SetOut(&out)
	root.SetArgs([]string{"version"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "jobkeeper ") {
		t.Errorf("version output %q", out.String())
	}
}

func TestRejectsArguments(t *testing.T) {
	root := newRootCommand()
	root.SetArgs([]string{"controller", "extra"})
	root.SetOut(&bytes.Buffer{})
	root.SetErr(&bytes.Buffer{})
	if err := root.Execute(); err == nil {
		t.Errorf("controller with a positional argument: want an error")
	}
}

// TestUpHiddenFlags checks that the flags meaningless under `up` are still
// accepted but not listed by `up --help`.
func TestUpHiddenFlags(t *testing.T) {
	cmd := newUpCommand()
	args := []string{"--leader-elect=false", "--leader-elect-resource-namespace=x", "--leader-elect-resource-name=y",
		"--leader-elect-lease-duration=20s", "--leader-elect-renew-deadline=15s", "--leader-elect-retry-period=3s",
		"--manage-unclaimed-jobs=true"}
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatalf("hidden flags no longer accepted: %v", err)
	}
	var help bytes.Buffer
	cmd.SetOut(&help)
	if err := cmd.Help(); err != nil {
		t.Fatal(err)
	}
	for _, name := range hiddenUpFlags {
		if strings.Contains(help.String(), "--"+name+" ") {
			t.Errorf("up --help lists --%s", name)
		}
	}
	for _, want := range []string{"--data-dir", "--kubeconfig-out", "--port", "What up runs:", "What it refuses:", upRefuses[:20]} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("up --help does not mention %q", want)
		}
	}
}

// TestRootVersionFlag checks that `jobkeeper --version` prints what
// `jobkeeper version` prints.
func TestRootVersionFlag(t *testing.T) {
	run := func(args ...string) string {
		root := newRootCommand()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Fatalf("jobkeeper %v: %v", args, err)
		}
		return out.String()
	}
	flag, command := run("--version"), run("version")
	if flag != command || !strings.HasPrefix(flag, "jobkeeper ") {
		t.Errorf("--version printed %q, version printed %q", flag, command)
	}
}

// TestFeatureGatesRefused: --feature-gates is checked as kube-apiserver
// checks it, with its messages, on both commands. Each parse runs in a
// process of its own: the gate set is the process's, and a refused value
// stays in it.
func TestFeatureGatesRefused(t *testing.T) {
	if c := os.Getenv("JOBKEEPER_TEST_FEATURE_GATES"); c != "" {
		cmd, value, _ := strings.Cut(c, " ")
		root := newRootCommand()
		root.SetArgs([]string{cmd, "--feature-gates=" + value})
		root.SetOut(&bytes.Buffer{})
		root.SetErr(&bytes.Buffer{})
		fmt.Println(root.Execute())
		return
	}
	for _, tc := range []struct{ value, want string }{
		{"NoSuchGate=true", "unrecognized feature gate: NoSuchGate"},
		{"JobManagedBy=false", "cannot set feature gate JobManagedBy to false, feature is locked to true"},
		{"GangScheduling", "missing bool value for GangScheduling"},
		{"WorkloadWithJob=true", "WorkloadWithJob is enabled, but depends on features that are disabled: [GenericWorkload]"},
	} {
		for _, cmd := range []string{"controller", "up"} {
			child := exec.Command(os.Args[0], "-test.run=^TestFeatureGatesRefused$")
			child.Env = append(os.Environ(), "JOBKEEPER_TEST_FEATURE_GATES="+cmd+" "+tc.value)
			out, err := child.CombinedOutput()
			if err != nil || !strings.Contains(string(out), tc.want) {
				t.Errorf("%s --feature-gates=%s: %s (%v), want %q", cmd, tc.value, out, err, tc.want)
			}
		}
	}
}
