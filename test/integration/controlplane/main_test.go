// Package controlplane tests the embedded control plane itself: what users
// and the controllers rely on from it (garbage collection, pods in any
// namespace, version reporting, RBAC).
package controlplane

import (
	"testing"

	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
