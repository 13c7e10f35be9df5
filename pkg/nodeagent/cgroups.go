package nodeagent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	v1qos "k8s.io/kubernetes/pkg/apis/core/v1/helper/qos"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/binder"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/cgroup"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/podconfig"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// Cgroup modes (Options.Cgroups, --cgroups).
const (
	// CgroupsAuto puts pods and containers in cgroups, with their limits,
	// where the agent can write cgroups (as root, or as a user in a
	// delegated cgroup: package cgroup's delegated.go).
	CgroupsAuto = "auto"
	// CgroupsOff never does: limits are not enforced (a NotEnforced
	// Warning event says so for each pod that has some).
	CgroupsOff = "off"
)

// CgroupRoot is the cgroup below which the agent whose data directory is
// dataDir puts its pods (package cgroup's doc): one of its own per data
// directory, so that several agents on one machine do not meet.
func CgroupRoot(dataDir string) (string, error) {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(abs))
	return cgroup.DefaultRoot(hex.EncodeToString(sum[:6]))
}

// newCgroups is the agent's cgroup manager, or nil and why there is none.
func newCgroups(ctx context.Context, opts Options) (*cgroup.Manager, string) {
	if opts.Cgroups == CgroupsOff {
		return nil, "cgroups are turned off (--cgroups=off)"
	}
	root, err := CgroupRoot(opts.DataDir)
	if err != nil {
		return nil, err.Error()
	}
	m, err := cgroup.New(ctx, root)
	if err != nil {
		return nil, err.Error()
	}
	m.SetPodPidsLimit(opts.PodMaxPids)
	// For `jobkeeper reset`, which may run in another cgroup than this
	// agent (DefaultRoot depends on it).
	err = os.MkdirAll(opts.DataDir, 0o750)
	if err == nil {
		err = os.WriteFile(filepath.Join(opts.DataDir, CgroupRootFile), []byte(m.Root()+"\n"), 0o600)
	}
	if err != nil {
		_ = m.RemoveAll()
		return nil, fmt.Sprintf("recording the cgroup root: %v", err)
	}
	return m, ""
}

// CgroupRootFile is the file of the agent's data directory that names the
// root of its cgroups (Manager.Root).
const CgroupRootFile = "cgroup-root"

// RecordedCgroupRoot is the root of the cgroups of the agent whose data
// directory is dataDir, as it recorded it; "" when it made none.
func RecordedCgroupRoot(dataDir string) string {
	b, err := os.ReadFile(filepath.Join(dataDir, CgroupRootFile))
	if err != nil {
		return ""
	}
	if root := strings.TrimSpace(string(b)); root != "/" {
		return root
	}
	return ""
}

// enforcesLimits reports whether containers get cgroups with their
// limits.
func (a *Agent) enforcesLimits() bool {
	cr, ok := a.runtime.(runtime.CgroupRuntime)
	if !ok {
		return false
	}
	yes, _ := cr.Cgroups()
	return yes && a.cgroups != nil
}

// cgroupFor makes (or updates) the pod's cgroup and tells the runtime to
// put the container's attempt in a cgroup of its own below it, with its
// limits. Without cgroups it does nothing.
func (a *Agent) cgroupFor(pod *corev1.Pod, c *corev1.Container, spec *runtime.Spec) error {
	if !a.enforcesLimits() {
		return nil
	}
	a.podCgroupsMu.Lock()
	pc := a.podCgroups[pod.UID]
	a.podCgroupsMu.Unlock()
	if pc.parent == "" {
		// Once per pod and run of the agent, as the kubelet ensures it
		// before the pod's first container (a resize writes it again:
		// resize.go); then the QoS cgroups' weights, once the pod's QoS
		// cgroup exists.
		name, err := a.cgroups.EnsurePod(pod)
		if err != nil {
			return &podconfig.CreateError{Msg: "creating the pod's cgroup: " + err.Error()}
		}
		if err := a.setQoSShare(pod); err != nil {
			return &podconfig.CreateError{Msg: "updating the QoS cgroups: " + err.Error()}
		}
		pc.parent = name.ToCgroupfs()
		a.podCgroupsMu.Lock()
		pc.burstableMilli = a.podCgroups[pod.UID].burstableMilli
		a.podCgroups[pod.UID] = pc
		a.podCgroupsMu.Unlock()
	}
	spec.CgroupParent = pc.parent
	spec.Resources = cgroup.ContainerResources(pod, c, a.cgroups.Unified())
	return nil
}

// removePodCgroup removes the cgroups of a pod whose containers have all
// ended.
func (a *Agent) removePodCgroup(ctx context.Context, uid types.UID) {
	if a.cgroups == nil {
		return
	}
	a.podCgroupsMu.Lock()
	delete(a.podCgroups, uid)
	a.podCgroupsMu.Unlock()
	if err := a.cgroups.RemovePod(string(uid)); err != nil {
		klog.FromContext(ctx).V(2).Info("Removing a pod's cgroup failed", "uid", uid, "err", err)
	}
	if err := a.writeQoSCgroups(); err != nil {
		klog.FromContext(ctx).Info("Updating the QoS cgroups failed", "err", err)
	}
}

// podCgroup is a pod whose cgroup this run of the agent has ensured.
type podCgroup struct {
	// parent is its cgroup, as a cgroupfs path.
	parent string
	// burstableMilli is its CPU request in millicores if it is
	// Burstable: what it adds to the Burstable cgroup's CPU weight.
	burstableMilli int64
}

// setQoSShare records what pod, as allocated, adds to its QoS class's
// cgroup and writes the QoS cgroups: the kubelet's QoS manager gives the
// Burstable cgroup the CPU weight of its pods' requests together (the
// BestEffort one has the least weight, Guaranteed pods are directly
// below kubepods with their own), so that under contention each class
// gets CPU in proportion to what its pods request.
func (a *Agent) setQoSShare(pod *corev1.Pod) error {
	var milli int64
	if v1qos.GetPodQOS(pod) == corev1.PodQOSBurstable {
		milli = binder.PodRequests(pod).CPUMilli
	}
	a.podCgroupsMu.Lock()
	pc := a.podCgroups[pod.UID]
	pc.burstableMilli = milli
	a.podCgroups[pod.UID] = pc
	a.podCgroupsMu.Unlock()
	return a.writeQoSCgroups()
}

// writeQoSCgroups writes the Burstable cgroup's CPU weight from the pods
// recorded (setQoSShare).
func (a *Agent) writeQoSCgroups() error {
	if a.cgroups == nil {
		return nil
	}
	// Held while writing: two writers never leave an older sum.
	a.podCgroupsMu.Lock()
	defer a.podCgroupsMu.Unlock()
	var milli int64
	for _, pc := range a.podCgroups {
		milli += pc.burstableMilli
	}
	return a.cgroups.SetBurstableCPU(milli)
}

// removeOrphanCgroups removes the cgroups of pods no longer in the API
// (deleted while the agent was not running).
func (a *Agent) removeOrphanCgroups(ctx context.Context, known map[string]bool) {
	if a.cgroups == nil {
		return
	}
	for _, uid := range a.cgroups.PodUIDs() {
		if !known[uid] {
			a.removePodCgroup(ctx, types.UID(uid))
		}
	}
}
