// Package fault runs jobkeeper's controllers as a separate process behind a
// fault-injecting proxy (test/fault) in front of the in-process control
// plane, kills them with SIGKILL at random moments, and checks after each
// scenario that the counts are exact, no index succeeded twice, no pod keeps
// the tracking finalizer, nothing was deleted early, and the controller
// still makes progress. See docs/reliability.md.
//
// The controller process is this test binary run again with
// JOBKEEPER_FAULT_CHILD set (see runChild), so kill -9 is a real kill of a
// real process with its own informers and client.
package fault

import (
	"os"
	"testing"

	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	framework.Main(m)
}
