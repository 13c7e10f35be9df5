package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/process"
)

func TestOnlyLoopbackNameservers(t *testing.T) {
	for conf, want := range map[string]bool{
		"nameserver 127.0.0.53\noptions edns0 trust-ad\nsearch lan\n": true,
		"nameserver 127.0.0.1\nnameserver ::1\n":                      true,
		"nameserver 127.0.0.53\nnameserver 10.0.2.3\n":                false,
		"nameserver 192.168.1.1\n":                                    false,
		"search lan\n":                                                false,
		"":                                                            false,
		"nameserver bogus\n":                                          false,
	} {
		if got := onlyLoopbackNameservers([]byte(conf)); got != want {
			t.Errorf("onlyLoopbackNameservers(%q) = %v, want %v", conf, got, want)
		}
	}
}

func TestPodNetworkLockIsOneUpsAtATime(t *testing.T) {
	saved := podNetworkLock
	t.Cleanup(func() { podNetworkLock = saved })
	podNetworkLock = filepath.Join(t.TempDir(), "podnet.lock")
	first, err := lockPodNetwork("/data/a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockPodNetwork("/data/b"); err == nil || !strings.Contains(err.Error(), "/data/a") || !strings.Contains(err.Error(), "--network=host") {
		t.Errorf("a second lock gave %v, want a refusal naming /data/a and --network=host", err)
	}
	_ = first.Close()
	second, err := lockPodNetwork("/data/b")
	if err != nil {
		t.Fatalf("the lock once released: %v", err)
	}
	_ = second.Close()

	// A network left running by its up (--keep-running-on-stop) is that
	// up's until it is started again or reset.
	kept := t.TempDir()
	if err := os.MkdirAll(networkDir(filepath.Join(kept, "node")), 0o700); err != nil {
		t.Fatal(err)
	}
	third, err := lockPodNetwork(kept)
	if err != nil {
		t.Fatal(err)
	}
	_ = third.Close()
	if _, err := lockPodNetwork("/data/b"); err == nil || !strings.Contains(err.Error(), "--keep-running-on-stop") || !strings.Contains(err.Error(), kept) {
		t.Errorf("another up over a kept network gave %v, want a refusal naming %s", err, kept)
	}
	again, err := lockPodNetwork(kept)
	if err != nil {
		t.Fatalf("the kept network's own up: %v", err)
	}
	_ = again.Close()
}

func TestPodNetworkFlags(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("as another user --network=pod is refused before anything else (e2e: TestUpPodNetworkRefusedAsUser)")
	}
	for _, tc := range []struct {
		name   string
		f      nodeAgentFlags
		reject string
	}{
		{"unknown mode", nodeAgentFlags{network: "bridge"}, `--network "bridge"`},
		{"simulated pods", nodeAgentFlags{network: networkPod, podCIDR: "10.244.0.0/24"}, "--runtime=process"},
		{"no isolation", nodeAgentFlags{network: networkPod, podCIDR: "10.244.0.0/24", opts: nodeAgentOpts(process.Name, process.IsolationOff)}, "--pod-isolation=auto"},
		{"bad CIDR", nodeAgentFlags{network: networkPod, podCIDR: "10.244.0.0", opts: nodeAgentOpts(process.Name, process.IsolationAuto)}, "--pod-cidr"},
		{"too small", nodeAgentFlags{network: networkPod, podCIDR: "10.244.0.0/31", opts: nodeAgentOpts(process.Name, process.IsolationAuto)}, "at least 4 addresses"},
		{"IPv6", nodeAgentFlags{network: networkPod, podCIDR: "fd00::/64", opts: nodeAgentOpts(process.Name, process.IsolationAuto)}, "IPv4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.f.validateNetwork()
			if err == nil || !strings.Contains(err.Error(), tc.reject) {
				t.Errorf("validateNetwork() = %v, want an error with %q", err, tc.reject)
			}
		})
	}
	ok := nodeAgentFlags{network: networkPod, podCIDR: "10.244.1.7/24", opts: nodeAgentOpts(process.Name, process.IsolationAuto)}
	if err := ok.validateNetwork(); err != nil {
		t.Fatal(err)
	} else if ok.cidr.String() != "10.244.1.0/24" {
		t.Errorf("the pod CIDR is %s, want it masked", ok.cidr)
	}
}

// nodeAgentOpts are node agent options with a runtime and an isolation.
func nodeAgentOpts(runtime, isolation string) nodeagent.Options {
	return nodeagent.Options{Runtime: runtime, Isolation: isolation}
}
