package view

import (
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/moby/sys/mountinfo"
)

// opKind is one kind of step that builds the container's view.
type opKind int

const (
	// opTmpfs mounts a fresh tmpfs on target.
	opTmpfs opKind = iota
	// opOverlay mounts a copy-on-write overlay of the host directory
	// source on target; when the overlay is refused, source is bound
	// read-only instead.
	opOverlay
	// opRbind binds source and everything mounted below it on target.
	opRbind
	// opVolume binds a volume's source (with subPath, the path below it)
	// on target, each resolved by handle, target inside the view
	// (mountVolume), read-only when readOnly.
	opVolume
	// opSymlink creates target as a symbolic link to source.
	opSymlink
	// opMkdir creates the directory target.
	opMkdir
	// opImage mounts the overlay of an image's layers (lowers, top first)
	// on target, its upper and work directories under source; read-only
	// with readOnly (an image volume).
	opImage
	// opDev gives the container a private /dev (target) showing the
	// host's (source): an overlay of it where its device nodes can be
	// opened (devOverlay), else a tmpfs in which every entry is bound
	// (privateDev). Files the container's own mounts add there (a
	// termination message file) stay in the container.
	opDev
	// opMountPoint creates the mount point of a volume (target, inside the
	// view; a directory when source is one) or the working directory
	// (source empty), before the root is made read-only.
	opMountPoint
	// opReadOnly makes the mount on target read-only.
	opReadOnly
	// opShm mounts a private tmpfs on the container's /dev/shm (target,
	// resolved inside the view) when the view's /dev has that directory.
	opShm
	// opMinimalDev gives the container the /dev (target) of a container
	// runtime: a tmpfs holding the default devices only (null, zero,
	// full, random, urandom, tty, bound from the host's), a devpts of its
	// own with ptmx, a private shm tmpfs, and the fd, stdin, stdout and
	// stderr links.
	opMinimalDev
	// opProc mounts a procfs of the container's PID namespace on target:
	// mounted by a process of that namespace before the view replaces the
	// host's root, so that no procfs of the host's is ever beneath it.
	opProc
	// opMask hides target, when it exists: a directory under an empty
	// read-only tmpfs, anything else under the host's /dev/null.
	opMask
	// opReadOnlyPath makes target, when it exists, read-only: it is bound
	// on itself, then remounted read-only.
	opReadOnlyPath
	// opHide hides target, when it exists: a directory under an empty
	// tmpfs private to the attempt (mount points can be made in it), a
	// file under the host's /dev/null.
	opHide
	// opDetach removes from the view what is mounted on target, with
	// everything mounted below it, when target is a mount point: gone
	// from the container's mount table, not only covered.
	opDetach
)

// DefaultReadOnlyPaths are the paths of /proc a container that is not
// privileged sees read-only, as the kubelet asks its runtime.
var DefaultReadOnlyPaths = []string{
	"/proc/bus",
	"/proc/fs",
	"/proc/irq",
	"/proc/sys",
	"/proc/sysrq-trigger",
}

// defaultMaskedPaths are the paths of /proc and /sys hidden from a
// container that is not privileged, as the kubelet asks its runtime (it
// adds the CPUs' thermal_throttle directories: maskedPaths).
var defaultMaskedPaths = []string{
	"/proc/asound",
	"/proc/acpi",
	"/proc/interrupts",
	"/proc/kcore",
	"/proc/keys",
	"/proc/latency_stats",
	"/proc/timer_list",
	"/proc/timer_stats",
	"/proc/sched_debug",
	"/proc/scsi",
	"/sys/firmware",
	"/sys/devices/virtual/powercap",
}

// systemTrees returns the steps that give the view its /dev, /proc and
// /sys, then hide the masked paths (masked) and make DefaultReadOnlyPaths
// read-only. at maps a container path to the steps' target; view says the
// targets are resolved inside the view. A privileged container gets the
// host's devices, a writable /sys and nothing masked; one whose procMount
// is Unmasked, nothing masked nor read-only.
func systemTrees(cfg Spec, masked []string, at func(string) string, view bool) []op {
	var ops []op
	if cfg.Privileged {
		ops = append(ops, op{kind: opDev, source: "/dev", target: at("/dev"), view: view})
	} else {
		ops = append(ops, op{kind: opMinimalDev, target: at("/dev"), view: view})
	}
	ops = append(ops,
		op{kind: opProc, target: at("/proc"), view: view},
		op{kind: opRbind, source: "/sys", target: at("/sys"), readOnly: !cfg.Privileged, view: view})
	ops = append(ops, cgroupTree(cfg, at, view)...)
	if cfg.Privileged || cfg.UnmaskedProc {
		return ops
	}
	for _, p := range masked {
		ops = append(ops, op{kind: opMask, target: at(p), view: view})
	}
	for _, p := range DefaultReadOnlyPaths {
		ops = append(ops, op{kind: opReadOnlyPath, target: at(p), view: view})
	}
	return ops
}

// cgroupRoot is where cgroup hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// cgroupTree returns the steps that show the container its own cgroups
// at /sys/fs/cgroup, as runc does: on cgroup v2 its cgroup's directory
// over the hierarchy's mount point; on v1 a tmpfs at /sys/fs/cgroup
// holding only the hierarchies it is in, each its own cgroup's directory,
// with a link for each controller of a co-mounted hierarchy (cpu and
// cpuacct to cpu,cpuacct), read-only unless privileged. The host's other
// hierarchies (the hybrid unified one among them) are removed from the
// view, not only covered: a container that lists its cgroup2 mounts (as
// upstream's e2e specs tell v2 from v1) finds none on v1.
func cgroupTree(cfg Spec, at func(string) string, view bool) []op {
	if len(cfg.Cgroups) == 0 {
		return nil
	}
	// The host's hierarchies came with /sys: they go first.
	ops := []op{{kind: opDetach, target: at(cgroupRoot), view: view}}
	v1 := !(len(cfg.Cgroups) == 1 && filepath.Clean(cfg.Cgroups[0].Target) == cgroupRoot)
	if v1 {
		ops = append(ops, op{kind: opHide, target: at(cgroupRoot), view: view})
	}
	for _, b := range cfg.Cgroups {
		ops = append(ops, op{kind: opRbind, source: b.Source, target: at(b.Target), readOnly: !cfg.Privileged, view: view})
	}
	if !v1 {
		return ops
	}
	for _, b := range cfg.Cgroups {
		dir, name := filepath.Split(filepath.Clean(b.Target))
		if filepath.Clean(dir) != cgroupRoot || !strings.Contains(name, ",") {
			continue
		}
		for _, c := range strings.Split(name, ",") {
			ops = append(ops, op{kind: opSymlink, source: name, target: at(filepath.Join(cgroupRoot, c)), view: view})
		}
	}
	if !cfg.Privileged {
		ops = append(ops, op{kind: opReadOnly, target: at(cgroupRoot), view: view})
	}
	return ops
}

// rootEntry is one name in the host's root directory.
type rootEntry struct {
	// name is the entry's name.
	name string
	// dir and symlink give its type; neither means a file or other.
	dir, symlink bool
	// link is a symbolic link's target.
	link string
}

// op is one step of the view.
type op struct {
	// kind says what the step does.
	kind opKind
	// source is the host path (overlay lower, bind source), empty for tmpfs.
	source string
	// target is the absolute path the step mounts on; for opVolume it is
	// the path inside the container, resolved against the new root later.
	target string
	// subPath is the path below source a volume mount shows
	// (opVolume, opMountPoint), resolved inside source by handle.
	subPath string
	// readOnly makes a bind read-only.
	readOnly bool
	// recursiveRO makes an opVolume read-only with every mount below it
	// (with readOnly).
	recursiveRO bool
	// nodev mounts it nodev (opImage, opOverlay, opVolume of a container
	// that is not privileged): with CAP_MKNOD in the default set and no
	// device cgroup, a device node the container makes there could
	// otherwise be opened.
	nodev bool
	// mode is the permission of a tmpfs' root directory.
	mode string
	// lowers are the lower directories of opImage, top first.
	lowers []string
	// view says target is a path inside the container (opRbind in image
	// mode), resolved against the new root when the step is carried out
	// and created there when missing.
	view bool
}

// pseudoFS are filesystem types that are not overlaid: they are reached
// through the binds of /proc, /sys and /dev, or not at all.
var pseudoFS = map[string]bool{
	"proc": true, "sysfs": true, "devtmpfs": true, "devpts": true, "mqueue": true,
	"cgroup": true, "cgroup2": true, "securityfs": true, "debugfs": true, "tracefs": true,
	"pstore": true, "bpf": true, "fusectl": true, "configfs": true, "hugetlbfs": true,
	"autofs": true, "binfmt_misc": true, "nsfs": true, "rpc_pipefs": true,
	"efivarfs": true, "selinuxfs": true,
}

// hostTrees are the directories of the view that are not the host's
// root's: /dev, /proc and /sys (systemTrees).
var hostTrees = []string{"/dev", "/proc", "/sys"}

// readOnlyRoot returns the steps that make the root read-only once the
// view is built: the mount points of the volumes and the working
// directory, then each of roots read-only, before the volumes are mounted.
func readOnlyRoot(cfg Spec, roots []string) []op {
	var ops []op
	for _, m := range cfg.Mounts {
		ops = append(ops, op{kind: opMountPoint, source: m.Source, subPath: m.SubPath, target: filepath.Clean(m.Target)})
	}
	if cfg.WorkingDir != "" {
		ops = append(ops, op{kind: opMountPoint, target: filepath.Clean(cfg.WorkingDir)})
	}
	for _, r := range roots {
		ops = append(ops, op{kind: opReadOnly, target: r})
	}
	return ops
}

// rootDir is where the new root is assembled, under the scratch tmpfs.
func rootDir(scratch string) string { return filepath.Join(scratch, "root") }

// plan returns the steps that build the view of cfg in host mode (the host
// is the image) from the host's mounts
// and the entries of its root directory, in order: the scratch tmpfs, the
// new root (a directory on it), then for each entry of the host's root an
// overlay (directories), a link (symbolic links) or a read-only bind
// (files), an overlay of every other real filesystem (parents first), the
// container's /dev, /proc and /sys with their masked and read-only paths
// (systemTrees), the hidden directories (Config.Hide), with
// ReadOnlyRoot the steps that make the root read-only, then the volumes. /tmp is overlaid like any directory: the host's files
// are readable, writes stay private. It decides only; setUp carries the
// steps out.
//
// The root is assembled entry by entry rather than as one overlay of /: in
// a user namespace the kernel refuses to use / as a lower layer while
// filesystems are mounted below it.
func plan(host []*mountinfo.Info, entries []rootEntry, cfg Spec, masked []string) ([]op, error) {
	root := rootDir(cfg.Scratch)
	ops := []op{
		{kind: opTmpfs, target: cfg.Scratch, mode: "0700"},
		{kind: opMkdir, target: root},
	}
	volumes, err := imageVolumes(&cfg)
	if err != nil {
		return nil, err
	}
	ops = append(ops, volumes...)
	if cfg.ReadOnlyRoot {
		// The root becomes a mount of its own, so that it can be made
		// read-only at the end.
		ops = append(ops, op{kind: opRbind, source: root, target: root})
	}
	var overlays []string
	seen := map[string]bool{"/": true}
	for _, e := range entries {
		p := "/" + e.name
		switch {
		case e.symlink:
			ops = append(ops, op{kind: opSymlink, source: e.link, target: filepath.Join(root, p)})
		case skipped(p, cfg.Scratch):
			if e.dir {
				ops = append(ops, op{kind: opMkdir, target: filepath.Join(root, p)})
			}
		default:
			ops = append(ops, op{kind: opOverlay, source: p, target: filepath.Join(root, p), nodev: !cfg.Privileged})
			overlays = append(overlays, filepath.Join(root, p))
		}
		seen[p] = true
	}
	var points []string
	for _, m := range host {
		p := filepath.Clean(m.Mountpoint)
		if seen[p] || pseudoFS[m.FSType] || skipped(p, cfg.Scratch) {
			continue
		}
		seen[p] = true
		points = append(points, p)
	}
	// Parents before children: a child's mount point must be looked up in
	// the overlay of its parent.
	sort.SliceStable(points, func(i, j int) bool { return depth(points[i]) < depth(points[j]) })
	for _, p := range points {
		ops = append(ops, op{kind: opOverlay, source: p, target: filepath.Join(root, p), nodev: !cfg.Privileged})
		overlays = append(overlays, filepath.Join(root, p))
	}
	ops = append(ops, systemTrees(cfg, masked, func(p string) string { return filepath.Join(root, p) }, false)...)
	for _, h := range cfg.Hide {
		if h = filepath.Clean(h); filepath.IsAbs(h) && h != "/" {
			// Resolved inside the view: a link on the way (a /home
			// linking to /var/home) leads where the view shows it.
			ops = append(ops, op{kind: opHide, target: h, view: true})
		}
	}
	if cfg.ReadOnlyRoot {
		ops = append(ops, readOnlyRoot(cfg, append(overlays, root))...)
	}
	for _, m := range cfg.Mounts {
		ops = append(ops, op{kind: opVolume, source: m.Source, subPath: m.SubPath, target: filepath.Clean(m.Target), readOnly: m.ReadOnly, recursiveRO: m.ReadOnly && m.RecursiveReadOnly, nodev: !cfg.Privileged})
	}
	return ops, nil
}

// planImage returns the steps that build the view of cfg in image mode, in
// order: the scratch tmpfs, the new root (one overlay whose lower layers
// are the image's, its upper layer on the scratch tmpfs, so every attempt
// starts from the pristine image), the container's /dev, /proc and /sys
// with their masked and read-only paths (systemTrees; a privileged one's
// /dev with a /dev/shm of its own), with ReadOnlyRoot the steps that make
// the root read-only, then the volumes. /tmp and everything else are the
// image's. It decides only; setUp carries the steps out.
func planImage(cfg Spec, masked []string) ([]op, error) {
	root := rootDir(cfg.Scratch)
	ops := []op{
		{kind: opTmpfs, target: cfg.Scratch, mode: "0700"},
		{kind: opMkdir, target: root},
	}
	if strings.ContainsAny(cfg.Scratch, ",:\\") {
		return nil, fmt.Errorf("scratch directory %q cannot be named in overlay options (it holds ',', ':' or a backslash)", cfg.Scratch)
	}
	volumes, err := imageVolumes(&cfg)
	if err != nil {
		return nil, err
	}
	ops = append(ops, volumes...)
	lowers, empty, err := imageLowers(cfg.Rootfs.Layers, filepath.Join(cfg.Scratch, "empty"))
	if err != nil {
		return nil, err
	}
	ops = append(ops, empty...)
	ops = append(ops, op{kind: opImage, source: filepath.Join(cfg.Scratch, "image"), target: root, lowers: lowers, nodev: !cfg.Privileged})
	ops = append(ops, systemTrees(cfg, masked, func(p string) string { return p }, true)...)
	if cfg.Privileged {
		// The host's devices, but a /dev/shm of its own.
		ops = append(ops, op{kind: opShm, target: "/dev/shm"})
	}
	if cfg.ReadOnlyRoot {
		ops = append(ops, readOnlyRoot(cfg, []string{root})...)
	}
	for _, m := range cfg.Mounts {
		ops = append(ops, op{kind: opVolume, source: m.Source, subPath: m.SubPath, target: filepath.Clean(m.Target), readOnly: m.ReadOnly, recursiveRO: m.ReadOnly && m.RecursiveReadOnly, nodev: !cfg.Privileged})
	}
	return ops, nil
}

// imageLowers are an image's layers (bottom first) as overlay lower
// directories (top first), checked; an image without layers is the empty
// directory empty, made by the steps returned.
func imageLowers(layers []string, empty string) ([]string, []op, error) {
	lowers := make([]string, 0, len(layers))
	for i := len(layers) - 1; i >= 0; i-- {
		l := layers[i]
		if !filepath.IsAbs(l) {
			return nil, nil, fmt.Errorf("image layer %q is not an absolute path", l)
		}
		if strings.ContainsAny(l, ",:\\") {
			return nil, nil, fmt.Errorf("image layer %q cannot be named in overlay options (it holds ',', ':' or a backslash)", l)
		}
		lowers = append(lowers, filepath.Clean(l))
	}
	if len(lowers) > 0 {
		return lowers, nil, nil
	}
	return []string{empty}, []op{{kind: opMkdir, target: empty}}, nil
}

// imageVolumes returns the steps that assemble cfg's image volumes on the
// scratch tmpfs, each a read-only overlay of its image's layers (its upper
// and work directories beside it, never written), and points their mounts
// at them: the volume steps then bind them (with a subPath, the path below)
// as any volume.
func imageVolumes(cfg *Spec) ([]op, error) {
	var ops []op
	mounts := slices.Clone(cfg.Mounts)
	for i := range mounts {
		m := &mounts[i]
		if !m.Image {
			continue
		}
		if strings.ContainsAny(cfg.Scratch, ",:\\") {
			return nil, fmt.Errorf("scratch directory %q cannot be named in overlay options (it holds ',', ':' or a backslash)", cfg.Scratch)
		}
		dir := filepath.Join(cfg.Scratch, "imagevolumes", strconv.Itoa(i))
		lowers, empty, err := imageLowers(m.Layers, filepath.Join(dir, "empty"))
		if err != nil {
			return nil, fmt.Errorf("image volume at %s: %w", m.Target, err)
		}
		root := filepath.Join(dir, "root")
		ops = append(ops, empty...)
		ops = append(ops, op{kind: opMkdir, target: root},
			op{kind: opImage, source: dir, target: root, lowers: lowers, readOnly: true, nodev: true})
		m.Source, m.ReadOnly = root, true
	}
	cfg.Mounts = mounts
	return ops, nil
}

// skipped reports whether a host mount point is not overlaid: it is under
// a tree shared as is, or the scratch directory or below it.
func skipped(p, scratch string) bool {
	for _, t := range hostTrees {
		if Within(p, t) {
			return true
		}
	}
	return Within(p, scratch)
}

// within reports whether p is dir or below it.
func Within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// depth is the number of components of an absolute path.
func depth(p string) int {
	if p == "/" {
		return 0
	}
	return strings.Count(p, "/")
}
