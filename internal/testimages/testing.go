package testimages

import (
	"errors"
	"os"
	"testing"
)

// BusyboxRequiredEnv, when set (CI sets it), makes BusyboxOrSkip fail a test
// instead of skipping it when there is no static busybox.
const BusyboxRequiredEnv = "JOBKEEPER_TEST_BUSYBOX_REQUIRED"

// BusyboxOrSkip returns the path of the static busybox tests build images
// from (FindBusybox("")), or skips t saying how to install one: Debian's
// busybox-static. With $JOBKEEPER_TEST_BUSYBOX_REQUIRED set, as in CI, a
// missing busybox fails t instead.
func BusyboxOrSkip(t testing.TB) string {
	t.Helper()
	p, err := FindBusybox("")
	if errors.Is(err, ErrNoBusybox) && os.Getenv(BusyboxRequiredEnv) == "" {
		t.Skipf("skipped: %v (CI has it: .ci/run installs busybox-static)", err)
	}
	if err != nil {
		t.Fatalf("%v ($%s is set)", err, BusyboxRequiredEnv)
	}
	return p
}
