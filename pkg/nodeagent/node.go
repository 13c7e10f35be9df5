package nodeagent

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/util/wait"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-helpers/nodedeclaredfeatures"
	"k8s.io/component-helpers/nodedeclaredfeatures/features/inplacepodresize"
	"k8s.io/component-helpers/nodedeclaredfeatures/features/restartallcontainers"
	// The kube features the declared features are discovered from.
	ndftypes "k8s.io/component-helpers/nodedeclaredfeatures/types"
	"k8s.io/klog/v2"
	_ "k8s.io/kubernetes/pkg/features"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/binder"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/internal/periodic"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/status"
)

// everything selects all objects.
var everything = labels.Everything()

// KubeletVersion is what the node reports as its kubelet version.
var KubeletVersion = "v1.36.3-jobkeeper"

// NodeStatusUpdatePeriod is how often the node status is rewritten.
var NodeStatusUpdatePeriod = time.Minute

// hostCapacity is the node's capacity: the host's CPUs and memory, the
// size of the filesystem holding dataDir (ephemeral-storage, as the
// kubelet reports its root directory's), maxPods pods and the extended
// resources the node advertises.
func hostCapacity(maxPods int, dataDir string, extended map[corev1.ResourceName]int64) corev1.ResourceList {
	c := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(int64(goruntime.NumCPU()), resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(hostMemory(), resource.BinarySI),
		corev1.ResourcePods:   *resource.NewQuantity(int64(maxPods), resource.DecimalSI),
	}
	if size := filesystemSize(dataDir); size > 0 {
		c[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(size, resource.BinarySI)
	}
	for name, n := range extended {
		c[name] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	return c
}

// filesystemSize is the size in bytes of the filesystem holding dir (or
// its nearest existing parent); 0 when unknown.
func filesystemSize(dir string) int64 {
	for {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err == nil {
			return int64(st.Blocks) * st.Bsize
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return 0
		}
		dir = parent
	}
}

// hostInfo is the node's system info, read from this host as the
// kubelet reads it (through cadvisor): the kernel's release, the OS
// image's name from os-release, the machine and boot ids; what cannot be
// read stays empty.
func hostInfo() corev1.NodeSystemInfo {
	info := corev1.NodeSystemInfo{
		KubeletVersion:          KubeletVersion,
		OperatingSystem:         goruntime.GOOS,
		Architecture:            goruntime.GOARCH,
		ContainerRuntimeVersion: "jobkeeper://" + KubeletVersion,
		OSImage:                 osImage(),
		MachineID:               firstLine("/etc/machine-id"),
		SystemUUID:              strings.ToLower(firstLine("/sys/class/dmi/id/product_uuid")),
		BootID:                  firstLine("/proc/sys/kernel/random/boot_id"),
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		info.KernelVersion = unix.ByteSliceToString(u.Release[:])
	}
	return info
}

// osImage is os-release's PRETTY_NAME, "Linux" when there is none.
func osImage() string {
	for _, f := range []string{"/etc/os-release", "/usr/lib/os-release"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "PRETTY_NAME="); ok {
				if u, err := strconv.Unquote(v); err == nil {
					return u
				}
				return strings.Trim(v, `"'`)
			}
		}
	}
	return "Linux"
}

// firstLine is a file's first line, "" when it cannot be read.
func firstLine(file string) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(line)
}

// hostMemory reads MemTotal from /proc/meminfo (0 when unknown).
func hostMemory() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, _ := strconv.ParseInt(fields[1], 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// nodeStatus is the status the agent reports.
// allocatableOf is capacity less reserved (never below zero), as the
// kubelet computes a node's allocatable.
func allocatableOf(capacity, reserved corev1.ResourceList) corev1.ResourceList {
	out := capacity.DeepCopy()
	for name, r := range reserved {
		q, ok := out[name]
		if !ok {
			continue
		}
		q.Sub(r)
		if q.Sign() < 0 {
			q = *resource.NewQuantity(0, q.Format)
		}
		out[name] = q
	}
	return out
}

func nodeStatus(name, ip string, capacity, allocatable corev1.ResourceList, info corev1.NodeSystemInfo, port int, now time.Time, old []corev1.NodeCondition) corev1.NodeStatus {
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		c := corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now)}
		for _, o := range old {
			if o.Type == t && o.Status == s {
				c.LastTransitionTime = o.LastTransitionTime
			}
		}
		return c
	}
	return corev1.NodeStatus{
		Capacity:    capacity,
		Allocatable: allocatable,
		Phase:       corev1.NodeRunning,
		Conditions: []corev1.NodeCondition{
			cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
			cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
			cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
			cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"),
		},
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: ip},
			{Type: corev1.NodeHostName, Address: name},
		},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(port)}},
		NodeInfo:        info,
		// As a v1.36 kubelet on a runtime that honours the policy.
		Features:         &corev1.NodeFeatures{SupplementalGroupsPolicy: ptr.To(true)},
		DeclaredFeatures: declaredFeatures(),
	}
}

// declaredFeatures are the node's declared features (NodeDeclaredFeatures,
// beta and on in v1.36), by which the apiserver and the scheduler tell
// what a node can do: the kubelet's discovery (component-helpers'
// nodedeclaredfeatures, with the process's feature gates) over the
// features the agent has: in-place resize of pod-level resources and of
// init containers, RestartAllContainers. Those it lacks (user namespaces
// with the host's network, websockets to the kubelet) are not declared, so
// pods that need them are refused at the apiserver or the scheduler, not
// run without them.
func declaredFeatures() []string {
	fw := nodedeclaredfeatures.New([]ndftypes.Feature{
		inplacepodresize.PodLevelResourcesResizeFeature,
		inplacepodresize.NonSidecarInitContainerResizeFeature,
		restartallcontainers.Feature,
	})
	return fw.DiscoverNodeFeatures(&nodedeclaredfeatures.NodeConfiguration{
		FeatureGates: defaultGates{},
		Version:      utilversion.MustParseSemantic(strings.TrimSuffix(KubeletVersion, "-jobkeeper")),
	})
}

// defaultGates are Kubernetes' default feature gates, as the discovery
// reads them.
type defaultGates struct{}

// Enabled implements nodedeclaredfeatures' FeatureGate.
func (defaultGates) Enabled(key string) bool {
	return utilfeature.DefaultFeatureGate.Enabled(featuregate.Feature(key))
}

// registerNode creates the Node, or takes over an existing one, and writes
// its status. It retries until it succeeds or ctx is done.
func (a *Agent) registerNode(ctx context.Context, port int) error {
	logger := klog.FromContext(ctx)
	return wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		if err := a.writeNode(ctx, port); err != nil {
			logger.Error(err, "Registering node")
			return false, nil
		}
		logger.Info("Node registered", "kubeletPort", port)
		return true, nil
	})
}

// writeNode creates or updates the Node and its status.
func (a *Agent) writeNode(ctx context.Context, port int) error {
	nodes := a.client.CoreV1().Nodes()
	node, err := nodes.Get(ctx, a.opts.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		node, err = nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: a.opts.NodeName, Labels: binder.NodeLabels(a.opts.NodeName)}}, metav1.CreateOptions{FieldManager: status.FieldManager})
	}
	if err != nil {
		return fmt.Errorf("getting or creating node: %w", err)
	}
	node = node.DeepCopy()
	node.Status = nodeStatus(a.opts.NodeName, a.opts.NodeIP, a.capacity, a.allocatable, a.nodeInfo, port, a.clock.Now(), node.Status.Conditions)
	node, err = nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{FieldManager: status.FieldManager})
	if err != nil {
		return fmt.Errorf("writing node status: %w", err)
	}
	// The apiserver's TaintNodesByCondition admission gives every new Node
	// the not-ready taint, and in a cluster the node lifecycle controller
	// lifts it once the node reports Ready. up runs no such controller (there
	// is one node, and this agent is its only judge of readiness), so the
	// agent lifts the taints that say "not ready" itself, now that it has
	// written Ready=True. Left in place, they told every tool that reads
	// taints that the node refuses pods, which it does not.
	if taints, changed := withoutReadinessTaints(node.Spec.Taints); changed {
		node = node.DeepCopy()
		node.Spec.Taints = taints
		if _, err := nodes.Update(ctx, node, metav1.UpdateOptions{FieldManager: status.FieldManager}); err != nil {
			return fmt.Errorf("removing the not-ready taints: %w", err)
		}
	}
	return nil
}

// withoutReadinessTaints returns taints without those that mark a node not
// ready or unreachable, and whether any were removed.
func withoutReadinessTaints(taints []corev1.Taint) ([]corev1.Taint, bool) {
	var kept []corev1.Taint
	for _, t := range taints {
		if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
			continue
		}
		kept = append(kept, t)
	}
	return kept, len(kept) != len(taints)
}

// heartbeat rewrites the node status periodically.
func (a *Agent) heartbeat(ctx context.Context, port int) {
	periodic.Every(ctx, a.clock, NodeStatusUpdatePeriod, func() {
		if err := a.writeNode(ctx, port); err != nil {
			klog.FromContext(ctx).Error(err, "Updating node status")
		}
	})
}
