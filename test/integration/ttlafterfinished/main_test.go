// Package ttlafterfinished tests the TTL-after-finished controller against a
// real control plane with the garbage collector, the test playing the Job
// controller and the kubelet.
package ttlafterfinished

import (
	"testing"

	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
