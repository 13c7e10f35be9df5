package e2e

import (
	"strings"
	"testing"
	"time"
)

func TestVersion(t *testing.T) {
	p := start(t, "version")
	code, out := p.waitExit(t, 30*time.Second)
	if code != 0 || !strings.HasPrefix(out, "jobkeeper ") || !strings.Contains(out, "kubernetes v1.36.") {
		t.Errorf("version: exit %d, output %q", code, out)
	}
}
