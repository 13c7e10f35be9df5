package cgroup

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	libcontainercgroups "github.com/opencontainers/cgroups"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm"
)

// joined are the v1 controllers whose hierarchies a container's processes
// are put in: those the limits are written to, and cpuacct for its usage.
var joined = []string{"memory", "cpu", "cpuacct", "pids"}

// Manager creates and removes the cgroups of one agent's pods and
// containers.
type Manager struct {
	// root is the cgroup the agent's kubepods is created in.
	root Name
	// unified is true on cgroup v2.
	unified bool
	// cgroups is the kubelet's cgroup manager (cgroupfs driver).
	cgroups cm.CgroupManager
	// hierarchies are the mount points a container's processes join, and
	// selfDirs, for each, the directory of this process's own cgroup
	// there (where a sandbox goes back to after a fork).
	hierarchies, selfDirs []string
	// mounts are the mount points of every hierarchy, where the kubelet's
	// manager creates a pod's cgroups.
	mounts []string
	// above are the directories above root this manager made or shares
	// with another of this process (above.go), removed with the root.
	above []string
	// logger logs the cgroup manager's own messages.
	logger klog.Logger

	// podPids is the most processes a pod's cgroup may hold; 0: no
	// limit.
	podPids int64
	// mu guards parents.
	mu sync.Mutex
	// parents are the QoS cgroups created so far.
	parents map[string]bool
	// burstableShares is the CPU weight last written to the Burstable
	// cgroup (SetBurstableCPU); 0: none yet.
	burstableShares uint64
}

// DefaultRoot is the root of an agent named instance (Manager's doc).
func DefaultRoot(instance string) (string, error) {
	base := "jobkeeper-" + instance
	unified := libcontainercgroups.IsCgroup2UnifiedMode()
	if unified && os.Geteuid() == 0 {
		return "/" + base, nil
	}
	own, err := libcontainercgroups.ParseCgroupFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	if unified {
		// A user's: beside the agent's own, in the cgroup delegated to it
		// (delegated.go). A delegated agent already moved to its leaf
		// finds its root beside it again.
		dir := own[""]
		if path.Base(dir) == base+agentLeafSuffix {
			dir = path.Dir(dir)
		}
		return path.Join(dir, base), nil
	}
	mem, ok := own["memory"]
	if !ok {
		return "", errors.New("this process is in no memory cgroup (cgroup v1 without the memory controller)")
	}
	return path.Join(mem, base), nil
}

// New probes the machine's cgroups and creates root/kubepods and its QoS
// cgroups. It fails, saying why, where the agent cannot write cgroups (not
// root, no memory or cpu controller, a read-only cgroupfs).
func New(ctx context.Context, root string) (*Manager, error) {
	cs, err := cm.GetCgroupSubsystems()
	if err != nil {
		return nil, fmt.Errorf("finding the cgroup controllers: %w", err)
	}
	for _, c := range []string{"memory", "cpu"} {
		if _, ok := cs.MountPoints[c]; !ok {
			return nil, fmt.Errorf("the %s cgroup controller is not available", c)
		}
	}
	m := &Manager{
		root:    cm.ParseCgroupfsToCgroupName(root),
		unified: libcontainercgroups.IsCgroup2UnifiedMode(),
		logger:  klog.FromContext(ctx),
		parents: map[string]bool{},
	}
	rootless := os.Geteuid() != 0
	if rootless {
		if err := prepareDelegated(m.unified, root); err != nil {
			return nil, fmt.Errorf("the agent does not run as root and has no delegated cgroup: %w", err)
		}
	}
	m.cgroups = cm.NewCgroupManager(m.logger, cs, "cgroupfs")
	m.mounts = mountPoints(cs)
	own, err := libcontainercgroups.ParseCgroupFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("reading this process's cgroups: %w", err)
	}
	seen := map[string]bool{}
	controllers := joined
	if m.unified {
		controllers = []string{"memory"}
	}
	for _, c := range controllers {
		mp, ok := cs.MountPoints[c]
		if !ok || seen[mp] {
			continue
		}
		key := c
		if m.unified {
			key = ""
		}
		selfPath, ok := own[key]
		if !ok {
			continue
		}
		seen[mp] = true
		m.hierarchies = append(m.hierarchies, mp)
		m.selfDirs = append(m.selfDirs, filepath.Join(mp, selfPath))
	}
	m.above = claimAbove(m.mounts, m.Root(), ownByMount(cs, own, m.unified))
	if err := m.ensureParent(cm.NewCgroupName(m.root, podsName), nil); err != nil {
		_ = removeRoot(m.mounts, m.Root())
		_ = releaseAbove(m.above)
		if rootless {
			return nil, fmt.Errorf("the agent does not run as root and has no delegated cgroup (%w): %s", err, delegationAdvice(m.unified))
		}
		return nil, err
	}
	return m, nil
}

// Unified reports whether the machine has cgroup v2.
func (m *Manager) Unified() bool { return m.unified }

// Root is the cgroup the agent's pods are below, as a cgroupfs path.
func (m *Manager) Root() string { return m.root.ToCgroupfs() }

// ensureParent creates a cgroup that only holds others, once.
func (m *Manager) ensureParent(name Name, rc *cm.ResourceConfig) error {
	key := name.ToCgroupfs()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.parents[key] {
		return nil
	}
	if err := m.create(name, rc); err != nil {
		return err
	}
	m.parents[key] = true
	return nil
}

// create creates (or finds) a cgroup and writes rc into it, failing when
// a value cannot be written (the kubelet's Create only logs that).
func (m *Manager) create(name Name, rc *cm.ResourceConfig) error {
	cfg := &cm.CgroupConfig{Name: name, ResourceParameters: rc}
	if err := m.cgroups.Create(m.logger, cfg); err != nil {
		return fmt.Errorf("creating cgroup %s: %w", name.ToCgroupfs(), err)
	}
	if rc != nil {
		if err := m.cgroups.Update(m.logger, cfg); err != nil {
			return fmt.Errorf("setting the limits of cgroup %s: %w", name.ToCgroupfs(), err)
		}
	}
	return nil
}

// EnsurePod creates the pod's cgroup (and its QoS parent) with the pod's
// limits, or writes them again into the existing one; it returns its name.
func (m *Manager) EnsurePod(pod *corev1.Pod) (Name, error) {
	name := PodName(m.root, pod)
	parent := name[:len(name)-1]
	var qos *cm.ResourceConfig
	if parent[len(parent)-1] == "besteffort" {
		// As the kubelet's QoS manager: BestEffort pods share the
		// smallest CPU weight.
		shares := uint64(cm.MinShares)
		qos = &cm.ResourceConfig{CPUShares: &shares}
	}
	if err := m.ensureParent(cm.NewCgroupName(m.root, podsName), nil); err != nil {
		return nil, err
	}
	if err := m.ensureParent(parent, qos); err != nil {
		return nil, err
	}
	rc := PodResources(pod)
	if m.podPids > 0 {
		rc.PidsLimit = &m.podPids
	}
	return name, m.create(name, rc)
}

// SetBurstableCPU gives the Burstable QoS cgroup the CPU weight of milli
// millicores, what its pods request together, as the kubelet's QoS
// manager does; unchanged, nothing is written. It never makes the cgroup:
// until a Burstable pod's cgroup made it (EnsurePod), or once RemoveAll
// removed it, there is nothing to write.
func (m *Manager) SetBurstableCPU(milli int64) error {
	shares := cm.MilliCPUToShares(milli)
	name := cm.NewCgroupName(m.root, podsName, "burstable")
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.parents[name.ToCgroupfs()] || m.burstableShares == shares {
		return nil
	}
	cfg := &cm.CgroupConfig{Name: name, ResourceParameters: &cm.ResourceConfig{CPUShares: &shares}}
	if err := m.cgroups.Update(m.logger, cfg); err != nil {
		return fmt.Errorf("setting the CPU weight of %s: %w", name.ToCgroupfs(), err)
	}
	m.burstableShares = shares
	return nil
}

// SetPodPidsLimit limits the processes of each pod's cgroup to n, as the
// kubelet's --pod-max-pids; n <= 0: no limit.
func (m *Manager) SetPodPidsLimit(n int64) { m.podPids = max(n, 0) }

// RemovePod removes the cgroups of the pod of uid, whatever its QoS class
// was, with every container cgroup below them. A cgroup that still holds
// processes is not removed (an error says so).
func (m *Manager) RemovePod(uid string) error {
	var errs []error
	for _, name := range podNames(m.root, uid) {
		if !m.cgroups.Exists(name) {
			continue
		}
		if err := m.cgroups.Destroy(m.logger, &cm.CgroupConfig{Name: name}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// RemoveAll removes the root with every cgroup below it, in every
// hierarchy. A cgroup that still holds processes is not removed (an error
// says so).
func (m *Manager) RemoveAll() error {
	m.mu.Lock()
	m.parents, m.burstableShares = map[string]bool{}, 0
	above := m.above
	m.above = nil
	m.mu.Unlock()
	if err := removeRoot(m.mounts, m.Root()); err != nil {
		m.mu.Lock()
		m.above = append(m.above, above...)
		m.mu.Unlock()
		return err
	}
	return releaseAbove(above)
}

// Remove removes what an agent left below root (a crashed one, for
// `jobkeeper reset`), in every hierarchy; nothing to remove is no error.
func Remove(root string) error {
	cs, err := cm.GetCgroupSubsystems()
	if err != nil {
		return nil
	}
	err = removeRoot(mountPoints(cs), root)
	if libcontainercgroups.IsCgroup2UnifiedMode() {
		// A delegated agent's leaf, empty once it is gone.
		if rerr := os.Remove(filepath.Join("/sys/fs/cgroup", root+agentLeafSuffix)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
	}
	return err
}

// removeRoot removes root with every cgroup below it from each mount.
func removeRoot(mounts []string, root string) error {
	var errs []error
	for _, mp := range mounts {
		if err := libcontainercgroups.RemovePath(filepath.Join(mp, root)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ownByMount is this process's cgroup (own, from /proc/self/cgroup) in
// the hierarchy of each mount point.
func ownByMount(cs *cm.CgroupSubsystems, own map[string]string, unified bool) map[string]string {
	byMount := map[string]string{}
	for c, mp := range cs.MountPoints {
		key := c
		if unified {
			key = ""
		}
		if p, ok := own[key]; ok {
			byMount[mp] = p
		}
	}
	if p, ok := own[""]; ok && !unified {
		byMount["/sys/fs/cgroup/unified"] = p
	}
	return byMount
}

// mountPoints are the mount points of every hierarchy, where the kubelet's
// manager creates a cgroup.
func mountPoints(cs *cm.CgroupSubsystems) []string {
	var mounts []string
	for _, mp := range cs.MountPoints {
		if !slices.Contains(mounts, mp) {
			mounts = append(mounts, mp)
		}
	}
	if !libcontainercgroups.IsCgroup2UnifiedMode() && libcontainercgroups.IsCgroup2HybridMode() {
		// The v1 manager also makes them in the hybrid hierarchy.
		mounts = append(mounts, "/sys/fs/cgroup/unified")
	}
	sort.Strings(mounts)
	return mounts
}

// PodUIDs lists the pods that have a cgroup, for removing those of pods
// gone while the agent was not running.
func (m *Manager) PodUIDs() []string {
	var uids []string
	for _, q := range []corev1.PodQOSClass{corev1.PodQOSGuaranteed, corev1.PodQOSBurstable, corev1.PodQOSBestEffort} {
		dir := filepath.Join(m.hierarchies[0], qosParent(m.root, q).ToCgroupfs())
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if uid, ok := strings.CutPrefix(e.Name(), "pod"); ok && e.IsDir() {
				uids = append(uids, uid)
			}
		}
	}
	sort.Strings(uids)
	return uids
}

// Container is the cgroup of one container attempt.
type Container struct {
	m    *Manager
	name Name
}

// CreateContainer creates the cgroup leaf below parent (a pod's cgroup,
// as a cgroupfs path) with a container's resources.
func (m *Manager) CreateContainer(parent, leaf string, r *runtimeapi.LinuxContainerResources) (*Container, error) {
	name := cm.NewCgroupName(cm.ParseCgroupfsToCgroupName(parent), leaf)
	if err := m.create(name, resourceConfig(r, m.unified)); err != nil {
		return nil, err
	}
	return &Container{m: m, name: name}, nil
}

// OpenContainer is the container cgroup at path (Container.Path), made by
// an earlier run of the agent, for one that takes the attempt over.
func (m *Manager) OpenContainer(path string) *Container {
	return &Container{m: m, name: cm.ParseCgroupfsToCgroupName(path)}
}

// Path is the container's cgroup, as a cgroupfs path.
func (c *Container) Path() string { return c.name.ToCgroupfs() }

// ProcsFiles opens, for each hierarchy the container's processes join,
// the cgroup.procs file of the container's cgroup (enter) and of this
// process's own (leave), for writing: a sandbox moves itself with them
// around a fork (the package's doc). The caller closes them.
func (c *Container) ProcsFiles() (enter, leave []*os.File, err error) {
	closeAll := func() {
		for _, f := range append(enter, leave...) {
			_ = f.Close()
		}
	}
	for i, mp := range c.m.hierarchies {
		in, err := os.OpenFile(filepath.Join(mp, c.name.ToCgroupfs(), "cgroup.procs"), os.O_WRONLY, 0)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		enter = append(enter, in)
		out, err := os.OpenFile(filepath.Join(c.m.selfDirs[i], "cgroup.procs"), os.O_WRONLY, 0)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		leave = append(leave, out)
	}
	return enter, leave, nil
}

// Dir is a directory of the container's cgroup: its host path (Source)
// and the mount point of its hierarchy (Target).
type Dir struct {
	Source, Target string
}

// Dirs are the container's cgroup directories in the hierarchies its
// processes join, for a view that shows the container its own cgroup at
// /sys/fs/cgroup.
func (c *Container) Dirs() []Dir {
	out := make([]Dir, 0, len(c.m.hierarchies))
	for _, mp := range c.m.hierarchies {
		out = append(out, Dir{Source: filepath.Join(mp, c.name.ToCgroupfs()), Target: mp})
	}
	return out
}

// OOMKills is how many of the container's processes the kernel's OOM
// killer has killed.
func (c *Container) OOMKills() (uint64, error) {
	file, key := "memory.oom_control", "oom_kill"
	if c.m.unified {
		file = "memory.events"
	}
	mp, ok := c.m.memoryHierarchy()
	if !ok {
		return 0, errors.New("no memory hierarchy")
	}
	return readKey(filepath.Join(mp, c.name.ToCgroupfs(), file), key)
}

// CPUUsage is the CPU time the container's processes have used.
func (c *Container) CPUUsage() (time.Duration, error) {
	if c.m.unified {
		mp, _ := c.m.memoryHierarchy()
		us, err := readKey(filepath.Join(mp, c.name.ToCgroupfs(), "cpu.stat"), "usage_usec")
		return time.Duration(us) * time.Microsecond, err
	}
	mp, ok := c.m.cpuacct()
	if !ok {
		return 0, errors.New("no cpuacct hierarchy")
	}
	b, err := os.ReadFile(filepath.Join(mp, c.name.ToCgroupfs(), "cpuacct.usage"))
	if err != nil {
		return 0, err
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return time.Duration(ns), err
}

// cpuacct is the mount point of v1's cpuacct controller among those the
// container's processes join.
func (m *Manager) cpuacct() (string, bool) {
	for _, mp := range m.hierarchies {
		if _, err := os.Stat(filepath.Join(mp, "cpuacct.usage")); err == nil {
			return mp, true
		}
	}
	return "", false
}

// memoryHierarchy is the mount point of the memory controller.
func (m *Manager) memoryHierarchy() (string, bool) {
	if len(m.hierarchies) == 0 {
		return "", false
	}
	// joined lists memory first, and v2 has one hierarchy.
	return m.hierarchies[0], true
}

// Remove removes the container's cgroup; it fails while processes are in
// it.
func (c *Container) Remove() error {
	if !c.m.cgroups.Exists(c.name) {
		return nil
	}
	return c.m.cgroups.Destroy(c.m.logger, &cm.CgroupConfig{Name: c.name})
}

// readKey reads the value of key in a flat keyed cgroup file ("key value"
// lines).
func readKey(file, key string) (uint64, error) {
	f, err := os.Open(file)
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), " ")
		if ok && k == key {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	if err := s.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s has no %s", file, key)
}

// unlimited is what a cgroup takes for "no limit" (v1's -1; the kubelet's
// manager writes it as v2's "max").
const unlimited = int64(-1)

// Update writes a running container's new resources into its cgroup, as a
// CRI runtime's UpdateContainerResources does for an in-place resize: a
// limit the resources no longer have is lifted.
func (c *Container) Update(r *runtimeapi.LinuxContainerResources) error {
	rc := resourceConfig(r, c.m.unified)
	lift := unlimited
	if rc.CPUQuota == nil {
		rc.CPUQuota = &lift
	}
	if rc.Memory == nil {
		rc.Memory = &lift
	}
	return c.m.cgroups.Update(c.m.logger, &cm.CgroupConfig{Name: c.name, ResourceParameters: rc})
}

// MemoryUsage is the memory the container's processes use now.
func (c *Container) MemoryUsage() (int64, error) {
	return c.m.cgroups.MemoryUsage(c.name)
}

// PodConfig is what the kubelet writes into the cgroup of pod (whose spec
// carries what the pod is allocated), a lifted limit written as such, for
// an in-place resize.
func (m *Manager) PodConfig(pod *corev1.Pod) *cm.ResourceConfig {
	rc := PodResources(pod)
	if rc.CPUQuota == nil {
		lift := unlimited
		rc.CPUQuota = &lift
	}
	if rc.Memory == nil {
		lift := unlimited
		rc.Memory = &lift
	}
	return rc
}

// SetPodConfig writes the set fields of rc into the pod's cgroup.
func (m *Manager) SetPodConfig(pod *corev1.Pod, rc *cm.ResourceConfig) error {
	return m.cgroups.SetCgroupConfig(m.logger, PodName(m.root, pod), rc)
}

// PodMemoryUsage is the memory the pod's processes use now.
func (m *Manager) PodMemoryUsage(pod *corev1.Pod) (int64, error) {
	return m.cgroups.MemoryUsage(PodName(m.root, pod))
}

// Memory is what the container's processes use now, and their working
// set as the kubelet (cAdvisor) counts it: that less the inactive file
// cache, never below zero.
func (c *Container) Memory() (usage, workingSet uint64, err error) {
	mp, ok := c.m.memoryHierarchy()
	if !ok {
		return 0, 0, errors.New("no memory hierarchy")
	}
	dir := filepath.Join(mp, c.name.ToCgroupfs())
	usageFile, inactiveKey := "memory.usage_in_bytes", "total_inactive_file"
	if c.m.unified {
		usageFile, inactiveKey = "memory.current", "inactive_file"
	}
	b, err := os.ReadFile(filepath.Join(dir, usageFile))
	if err != nil {
		return 0, 0, err
	}
	if usage, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err != nil {
		return 0, 0, err
	}
	inactive, err := readKey(filepath.Join(dir, "memory.stat"), inactiveKey)
	if err != nil {
		return 0, 0, err
	}
	if inactive < usage {
		workingSet = usage - inactive
	}
	return usage, workingSet, nil
}
