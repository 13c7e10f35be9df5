package e2e

import (
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// TestControllerRefusesServerWithoutJobManagedBy runs the image's binary
// with the chart's arguments and RBAC for {job}, as the chart's
// ServiceAccount, against `jobkeeper up` behind a proxy that answers the
// start-up check's dry-run Job create as an apiserver with the JobManagedBy
// feature gate off does (spec.managedBy dropped). The controller must not
// start: it exits non-zero with one error naming the field, the gate and the
// fix, before serving anything. (TestChartRBACPerControllers checks that
// the same check passes on up's v1.36 apiserver.)
func TestControllerRefusesServerWithoutJobManagedBy(t *testing.T) {
	objs := chartRender(t, "job")
	args := chartControllerArgs(t, objs)
	up, c, kc := startUp(t, t.TempDir(), "--controllers=")
	defer up.stop(t)
	admin, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	applyRBACObjects(t, admin, objs)
	checkChartAccess(t, c, true, false, false)
	proxy := startFaultProxy(t, admin, proxyFaults{dropManagedBy: true})

	p := startChartReplica(t, args, tokenKubeconfig(t, c, proxy.url, proxy.caData))
	code, out := p.waitExit(t, 30*time.Second)
	if code == 0 {
		t.Fatalf("the controller exited 0; want a refusal\n%s", out)
	}
	for _, want := range []string{"drops spec.managedBy", "JobManagedBy", "--feature-gates=JobManagedBy=true", "--server-check=false"} {
		if !strings.Contains(out, want) {
			t.Errorf("the controller's output lacks %q:\n%s", want, out)
		}
	}
	for _, unwanted := range []string{"Serving metrics", "Starting controller", "Warning:"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("the controller's output has %q:\n%s", unwanted, out)
		}
	}
	if bad := proxy.refused(); len(bad) > 0 {
		t.Errorf("the apiserver refused requests of the controller:\n%s", joinLines(bad))
	}
}
