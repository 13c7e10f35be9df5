package process

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/cgroup"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/sandbox"
)

// cgroupFile is the file of a durable attempt's state directory that
// names its cgroup, for the run of the agent that adopts it.
const cgroupFile = "cgroup"

// Cgroups implements runtime.CgroupRuntime.
func (r *Runtime) Cgroups() (bool, string) {
	if r.opts.Cgroups == nil {
		return false, r.opts.CgroupsReason
	}
	return true, ""
}

// attemptCgroup is the cgroup of one attempt and the files its sandbox
// moves with (closed once the sandbox has its copies).
type attemptCgroup struct {
	c     *cgroup.Container
	files *sandbox.CgroupFiles
}

// newAttemptCgroup makes the cgroup of spec's attempt below its pod's; nil
// when the spec or the runtime has none.
func (r *Runtime) newAttemptCgroup(spec runtime.Spec) (*attemptCgroup, error) {
	if r.opts.Cgroups == nil || spec.CgroupParent == "" || spec.Resources == nil {
		return nil, nil
	}
	c, err := r.opts.Cgroups.CreateContainer(spec.CgroupParent, cgroup.ContainerLeaf(spec.ContainerName, spec.Attempt), spec.Resources)
	if err != nil {
		return nil, &runtime.StartError{Reason: ReasonCreateContainerError, Message: "creating the container's cgroup: " + err.Error()}
	}
	enter, leave, err := c.ProcsFiles()
	if err != nil {
		_ = c.Remove()
		return nil, &runtime.StartError{Reason: ReasonCreateContainerError, Message: "opening the container's cgroup: " + err.Error()}
	}
	return &attemptCgroup{c: c, files: &sandbox.CgroupFiles{Enter: enter, Leave: leave}}, nil
}

// sandboxFiles is what sandbox.StartOptions.Cgroup gets.
func (a *attemptCgroup) sandboxFiles() *sandbox.CgroupFiles {
	if a == nil {
		return nil
	}
	return a.files
}

// started closes the files once the sandbox has its copies (or failed).
func (a *attemptCgroup) started() {
	if a == nil || a.files == nil {
		return
	}
	for _, f := range append(a.files.Enter, a.files.Leave...) {
		_ = f.Close()
	}
	a.files = nil
}

// record names the cgroup in a durable attempt's state directory.
func (a *attemptCgroup) record(stateDir string) {
	if a == nil || stateDir == "" {
		return
	}
	_ = os.WriteFile(filepath.Join(stateDir, cgroupFile), []byte(a.c.Path()+"\n"), 0o600)
}

// adoptedCgroup is the cgroup a durable attempt's state directory names;
// nil when it names none or the runtime makes none.
func (r *Runtime) adoptedCgroup(stateDir string) *attemptCgroup {
	if r.opts.Cgroups == nil {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(stateDir, cgroupFile))
	if err != nil {
		return nil
	}
	return &attemptCgroup{c: r.opts.Cgroups.OpenContainer(strings.TrimSpace(string(b)))}
}

// ended completes the result of the attempt, whose processes are all
// gone, from its cgroup: OOMKilled when the OOM killer killed one of
// them, as containerd reports it, whatever the exit code.
func (a *attemptCgroup) ended(res runtime.Result) runtime.Result {
	if a == nil {
		return res
	}
	a.started()
	if n, err := a.c.OOMKills(); err == nil && n > 0 {
		res.Reason = runtime.ReasonOOMKilled
	}
	return res
}

// remove removes the cgroup of an attempt that ended (after its result
// is out: it is not on the way of the container's status).
func (a *attemptCgroup) remove() {
	if a == nil {
		return
	}
	if err := a.c.Remove(); err != nil {
		klog.Background().V(2).Info("Removing a container's cgroup failed", "cgroup", a.c.Path(), "err", err)
	}
}

// Resizable implements runtime.Resizer.
func (h *handle) Resizable() bool { return h.cg != nil }

// UpdateResources implements runtime.Resizer.
func (h *handle) UpdateResources(r *runtimeapi.LinuxContainerResources) error {
	if h.cg == nil {
		return errors.New("the container has no cgroup")
	}
	return h.cg.c.Update(r)
}

// MemoryUsage implements runtime.Resizer.
func (h *handle) MemoryUsage() (int64, error) {
	if h.cg == nil {
		return 0, errors.New("the container has no cgroup")
	}
	return h.cg.c.MemoryUsage()
}

// Stats implements runtime.StatsReporter.
func (h *handle) Stats() (runtime.ContainerStats, error) {
	if h.cg == nil {
		return runtime.ContainerStats{}, errors.New("the container has no cgroup")
	}
	cpu, err := h.cg.c.CPUUsage()
	if err != nil {
		return runtime.ContainerStats{}, err
	}
	usage, ws, err := h.cg.c.Memory()
	if err != nil {
		return runtime.ContainerStats{}, err
	}
	return runtime.ContainerStats{CPU: cpu, Memory: usage, WorkingSet: ws, StartedAt: h.started}, nil
}
