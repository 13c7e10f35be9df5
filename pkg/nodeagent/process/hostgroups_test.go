package process

import (
	"context"
	"slices"
	"strings"
	"testing"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// TestHostModeSupplementalGroups: in host mode a User with the agent's
// user and group and supplemental groups gives the processes those groups.
func TestHostModeSupplementalGroups(t *testing.T) {
	if !isRoot() {
		t.Skip("only root can give processes other groups")
	}
	rt := newRuntime(t, nil)
	uid, gid := int64(0), int64(0)
	spec := shellSpec(t, "id -G")
	spec.User = &runtime.User{RunAsUser: &uid, RunAsGroup: &gid, SupplementalGroups: []int64{3000, 3001}}
	h, err := rt.Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if res := wait(t, h); res.ExitCode != 0 {
		t.Fatalf("result %+v", res)
	}
	groups := strings.Fields(readLog(t, spec.LogPath))
	if !slices.Contains(groups, "3000") || !slices.Contains(groups, "3001") || groups[0] != "0" {
		t.Errorf("id -G says %q, want group 0 with 3000 and 3001", groups)
	}
}
