package nodeagent

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/lifecycle"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// pidNamespaceOf decides a container's PID namespace as the kubelet asks
// CRI for it: the host's for a hostPID pod, the pod's when it shares its
// process namespace (shareProcessNamespace), the target's for an ephemeral
// container with a targetContainerName, else one of its own. target finds the running
// attempt of a container of the pod (nil when none runs). An ephemeral
// container whose target does not run has to wait: an error.
func pidNamespaceOf(pod *corev1.Pod, c *container, target func(name string) runtime.Handle) (runtime.PIDNamespaceMode, runtime.Handle, error) {
	if pod.Spec.HostPID {
		return runtime.PIDNamespaceHost, nil, nil
	}
	if pod.Spec.ShareProcessNamespace != nil && *pod.Spec.ShareProcessNamespace {
		return runtime.PIDNamespacePod, nil, nil
	}
	if c.info.Kind != lifecycle.KindEphemeral {
		return runtime.PIDNamespaceContainer, nil, nil
	}
	name := ""
	for _, ec := range pod.Spec.EphemeralContainers {
		if ec.Name == c.spec.Name {
			name = ec.TargetContainerName
		}
	}
	if name == "" {
		return runtime.PIDNamespaceContainer, nil, nil
	}
	h := target(name)
	if h == nil {
		return "", nil, fmt.Errorf("the target container %q of ephemeral container %q is not running", name, c.spec.Name)
	}
	return runtime.PIDNamespaceTarget, h, nil
}

// runningHandle returns the running attempt of the pod's container name,
// nil when none runs (worker goroutine only).
func (w *worker) runningHandle(name string) runtime.Handle {
	for _, c := range w.all() {
		if c.spec.Name == name && c.handle != nil {
			return c.handle
		}
	}
	return nil
}

// ReasonPIDNamespaceNotShared is the Warning event of a container that
// should share a PID namespace (shareProcessNamespace, an ephemeral
// container's target) where the runtime cannot share one: it runs in the
// host's, where it sees the others' processes, and the host's.
const ReasonPIDNamespaceNotShared = "PIDNamespaceNotShared"

// pidNamespaceFor is pidNamespaceOf for this agent's runtime: nothing to
// choose without PID namespaces (every container is in the host's), and the
// host's, with a Warning event, for a container that should share one where
// the runtime cannot.
func (w *worker) pidNamespaceFor(pod *corev1.Pod, c *container) (runtime.PIDNamespaceMode, runtime.Handle, error) {
	pn, ok := w.agent.runtime.(runtime.PIDNamespacer)
	if !ok {
		return runtime.PIDNamespaceContainer, nil, nil
	}
	if yes, _ := pn.PIDNamespaces(); !yes {
		return runtime.PIDNamespaceContainer, nil, nil
	}
	mode, target, err := pidNamespaceOf(pod, c, w.runningHandle)
	if err != nil || mode == runtime.PIDNamespaceContainer || mode == runtime.PIDNamespaceHost {
		return mode, target, err
	}
	if yes, why := pn.SharedPIDNamespaces(); !yes {
		w.agent.containerEvent(pod, c.info, corev1.EventTypeWarning, ReasonPIDNamespaceNotShared,
			fmt.Sprintf("Container %s runs in the host's process namespace (it sees every process of the host, its pod's included): containers cannot share one here: %s", c.spec.Name, why))
		return runtime.PIDNamespaceHost, nil, nil
	}
	return mode, target, nil
}

// PIDNamespaces waits until Run has set up the runtime, then reports
// whether containers get PID namespaces and, when not, why (they see every
// process of the host).
func (a *Agent) PIDNamespaces(ctx context.Context) (bool, string, error) {
	return askRuntime(ctx, a, runtime.PIDNamespacer.PIDNamespaces)
}
