package process

import (
	"context"
	"strings"
	"testing"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/sandbox"
)

// TestNonRootContainerUser: for an agent that is not root, a container
// asking for uid 1000 runs as uid 1000 when the user has subordinate ids
// (and newuidmap/newgidmap); without them it fails to start, saying what
// to configure. As root it always runs.
func TestNonRootContainerUser(t *testing.T) {
	rt := newRuntime(t, nil)
	if !rt.isolated {
		t.Skip("no private view here: " + rt.isolationReason)
	}
	uid, gid := int64(1000), int64(1000)
	spec := shellSpec(t, "id -u; id -g")
	spec.User = &runtime.User{RunAsUser: &uid, RunAsGroup: &gid}
	spec.WorkingDir = "/" // the test's directory is its own user's
	h, err := rt.Start(context.Background(), spec)
	_, detectErr := sandbox.DetectSubIDs()
	canMap := isRoot() || detectErr == nil
	if !canMap {
		msg := ""
		if err != nil {
			msg = err.Error()
		} else {
			msg = wait(t, h).Message
		}
		if !strings.Contains(msg, "/etc/subuid") {
			t.Fatalf("without subordinate ids (%v): start error %q, want one saying to configure /etc/subuid", detectErr, msg)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if res := wait(t, h); res.ExitCode != 0 {
		t.Fatalf("result %+v: %s", res, readLog(t, spec.LogPath))
	}
	if got := strings.Fields(readLog(t, spec.LogPath)); len(got) != 2 || got[0] != "1000" || got[1] != "1000" {
		t.Errorf("id -u, id -g say %q, want 1000 and 1000", got)
	}
}
