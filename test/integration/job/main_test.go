// Package job tests the Job controller against a real control plane, the
// test playing the kubelet.
package job

import (
	"testing"

	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
