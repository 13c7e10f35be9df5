package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLean keeps the lean binary lean: none of the packages that only
// `jobkeeper up` needs may be linked into it.
func TestLean(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	forbidden := []string{
		"go.etcd.io/etcd/server/",
		"k8s.io/apiserver/pkg/server",
		"k8s.io/kubernetes/pkg/controlplane",
		"k8s.io/kubernetes/cmd/",
		"k8s.io/apiextensions-apiserver/pkg/apiserver",
		"jobkeeper.dev/jobkeeper/pkg/controlplane",
		"jobkeeper.dev/jobkeeper/pkg/nodeagent",
	}
	deps := strings.Fields(string(out))
	if len(deps) < 100 {
		t.Fatalf("go list -deps printed %d packages; want the whole graph", len(deps))
	}
	for _, d := range deps {
		for _, f := range forbidden {
			if strings.HasPrefix(d, f) {
				t.Errorf("the lean binary links %s", d)
			}
		}
	}
}
