package nodeagent

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	pathrs "github.com/cyphar/filepath-securejoin/pathrs-lite"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubernetes/pkg/kubelet/qos"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/images"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/lifecycle"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/podconfig"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// containerSpec resolves what the runtime needs for an attempt of c.
func (a *Agent) containerSpec(ctx context.Context, pod *corev1.Pod, c *container, img *images.Image) (runtime.Spec, error) {
	spec := runtime.Spec{
		PodNamespace:  pod.Namespace,
		PodName:       pod.Name,
		PodUID:        string(pod.UID),
		ContainerName: c.spec.Name,
		Annotations:   pod.Annotations,
		Stdin:         c.spec.Stdin,
		StdinOnce:     c.spec.StdinOnce,
		TTY:           c.spec.TTY,
	}
	services, err := a.servicesEnv(pod)
	if err != nil {
		return spec, err
	}
	env, err := podconfig.ResolveEnv(ctx, pod, c.spec, a.allocatable, services, envSources{a})
	if err != nil {
		return spec, err
	}
	// As the kubelet asks its runtime, from the pod's QoS class and the
	// container's memory request against the node's memory.
	memory := a.capacity[corev1.ResourceMemory]
	spec.OOMScoreAdj = ptr.To(qos.GetContainerOOMScoreAdjust(pod, c.spec, memory.Value()))
	if sc := c.spec.SecurityContext; sc != nil {
		// As the kubelet: no_new_privs when privilege escalation is
		// disallowed; a read-only root only where there is a private view
		// (decideFeatures refuses it elsewhere); privileged, capabilities
		// and procMount for the runtime to apply.
		spec.NoNewPrivileges = sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation
		spec.Privileged = sc.Privileged != nil && *sc.Privileged
		if caps := sc.Capabilities; caps != nil {
			spec.CapabilitiesAdd, spec.CapabilitiesDrop = capabilityNames(caps.Add), capabilityNames(caps.Drop)
		}
		spec.UnmaskedProc = sc.ProcMount != nil && *sc.ProcMount == corev1.UnmaskedProcMount
		spec.ReadOnlyRoot = sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem && a.isolated()
	}
	if spec.Seccomp, err = a.seccompProfile(pod, c.spec); err != nil {
		return spec, err
	}
	hostname, err := podconfig.PodUTSName(pod)
	if err != nil {
		return spec, err
	}
	spec.Hostname = hostname
	if spec.UserNamespace, err = a.podUserNamespace(pod); err != nil {
		return spec, err
	}
	if img != nil {
		return a.imageContainerSpec(ctx, pod, c, img, spec, env, hostname)
	}
	if _, host := a.runtime.(runtime.HostDirs); host {
		uid, gid := a.hostModeIDs()
		if err := podconfig.CheckHostModeUser(pod, c.spec, uid, gid); err != nil {
			return spec, err
		}
		spec.User = podconfig.HostModeUser(pod, uid, gid, a.euid == 0)
	}
	dir := a.containerDir(pod.UID, c.spec.Name)
	defaults := &podconfig.EnvList{}
	defaults.Set("HOSTNAME", hostname)
	defaults.Set("HOME", dir)
	defaults.Set("PATH", os.Getenv("PATH"))
	for _, v := range env.Vars {
		defaults.Set(v.Name, v.Value)
	}
	spec.Env = defaults.Pairs()
	// Without a command the image's entrypoint would run with args; the
	// image is unknown here, so args run as the command.
	for _, s := range append(append([]string(nil), c.spec.Command...), c.spec.Args...) {
		spec.Command = append(spec.Command, podconfig.Expand(s, defaults.Get))
	}
	spec.WorkingDir = dir
	if c.spec.WorkingDir != "" && a.isolated() {
		// Created inside the container's view when missing, as container
		// runtimes do.
		spec.WorkingDir = c.spec.WorkingDir
	} else if _, host := a.runtime.(runtime.HostDirs); c.spec.WorkingDir != "" && host {
		st, err := os.Stat(c.spec.WorkingDir)
		if err != nil || !st.IsDir() {
			return spec, fmt.Errorf("workingDir %q is not a directory on this host", c.spec.WorkingDir)
		}
		spec.WorkingDir = c.spec.WorkingDir
	}
	mounts, err := a.volumes.Mounts(ctx, pod, c.spec, defaults.Get)
	if err != nil {
		return spec, err
	}
	mounts = withImageLayers(mounts, c.volumeLayers)
	resolv, err := a.hostModeResolvConf(pod, mounts)
	if err != nil {
		return spec, err
	}
	if resolv != nil {
		mounts = append(mounts, *resolv)
	}
	if a.isolated() {
		// The view hides the data directory: the container's own
		// directory (its HOME and default working directory) is bound.
		mounts = append(mounts, runtime.Mount{Source: dir, Target: dir})
	}
	spec.Mounts = mounts
	return spec, nil
}

// capabilityNames are a securityContext's capability names as strings.
func capabilityNames(caps []corev1.Capability) []string {
	out := make([]string, len(caps))
	for i, c := range caps {
		out[i] = string(c)
	}
	return out
}

// imageContainerSpec completes spec for a container run from img: its argv,
// environment, working directory and user by Kubernetes' rules over the
// image's config, its root filesystem, and its volumes plus the files the
// kubelet manages (/etc/hosts, /etc/hostname, /etc/resolv.conf).
func (a *Agent) imageContainerSpec(ctx context.Context, pod *corev1.Pod, c *container, img *images.Image, spec runtime.Spec, env *podconfig.EnvList, hostname string) (runtime.Spec, error) {
	defs := defaultsOf(img)
	set := []string{"HOSTNAME=" + hostname}
	set = append(set, env.Pairs()...)
	spec.Env = podconfig.ImageEnv(defs, set)
	var command, args []string
	for _, s := range c.spec.Command {
		command = append(command, podconfig.Expand(s, env.Get))
	}
	for _, s := range c.spec.Args {
		args = append(args, podconfig.Expand(s, env.Get))
	}
	spec.Command = podconfig.ProcessArgs(command, args, defs)
	if len(spec.Command) == 0 {
		return spec, &podconfig.CreateError{Msg: fmt.Sprintf("no command specified: image %q has neither ENTRYPOINT nor CMD and container %s sets no command", c.spec.Image, c.spec.Name)}
	}
	spec.WorkingDir = podconfig.ImageWorkingDir(c.spec, defs)
	user, err := podconfig.ContainerUser(pod, c.spec, defs.User)
	if err != nil {
		return spec, err
	}
	spec.User = user
	spec.Rootfs = &runtime.Rootfs{Layers: img.Layers}
	mounts, err := a.volumes.Mounts(ctx, pod, c.spec, env.Get)
	if err != nil {
		return spec, err
	}
	mounts = withImageLayers(mounts, c.volumeLayers)
	files, err := a.podEtcFiles(pod, hostname)
	if err != nil {
		return spec, err
	}
	spec.Mounts = podconfig.ByDepth(append(mounts, podconfig.ManagedFiles(files, mounts)...))
	return spec, nil
}

// podEtcFiles writes the pod's /etc/hosts, /etc/hostname and
// /etc/resolv.conf into its directory and returns them. The hosts file is
// the kubelet's (localhost, the pod's IP and hostname, hostAliases; for a
// hostNetwork pod the node's own hosts file and hostAliases); resolv.conf
// is composed from this host's by the pod's dnsPolicy and dnsConfig
// (podDNS), as pods here share its network.
func (a *Agent) podEtcFiles(pod *corev1.Pod, hostname string) ([]podconfig.EtcFile, error) {
	dir := filepath.Join(a.podDir(pod.UID), "etc")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the pod's managed files: %w", err)
	}
	ip := podconfig.NodeIP
	if a.ownNetwork(pod) && pod.Status.PodIP != "" {
		ip = pod.Status.PodIP
	}
	hosts := podconfig.HostsFile(pod, podconfig.PodHostname(pod), ip)
	if pod.Spec.HostNetwork {
		node, err := os.ReadFile(podconfig.NodeHostsFile)
		if err != nil {
			return nil, fmt.Errorf("reading the node's hosts file for a hostNetwork pod: %w", err)
		}
		hosts = podconfig.HostNetworkHostsFile(pod, node)
	}
	files := []struct {
		name, target string
		data         []byte
	}{
		{"hosts", "/etc/hosts", hosts},
		{"hostname", "/etc/hostname", []byte(hostname + "\n")},
		{"resolv.conf", "/etc/resolv.conf", a.podResolvConf(pod)},
	}
	out := make([]podconfig.EtcFile, 0, len(files))
	for _, f := range files {
		p := filepath.Join(dir, f.name)
		if err := podconfig.WriteFileAtomic(p, f.data, 0o644); err != nil {
			return nil, fmt.Errorf("writing the pod's %s: %w", f.target, err)
		}
		out = append(out, podconfig.EtcFile{Target: f.target, Source: p})
	}
	return out, nil
}

// podResolvConf returns the pod's resolv.conf (podDNS over the host's),
// recording a DNSConfigForming Warning event for each limit it cut.
func (a *Agent) podResolvConf(pod *corev1.Pod) []byte {
	host, _ := os.ReadFile(a.opts.ResolvConf)
	c, warnings := podconfig.PodDNS(pod, podconfig.ParseResolvConf(host), a.opts.ClusterDNS)
	for _, w := range warnings {
		a.event(pod, corev1.EventTypeWarning, "DNSConfigForming", w)
	}
	return c.ResolvConf()
}

// hostModeResolvConf returns the mount of a pod's own resolv.conf for a
// container of host mode, which otherwise reads the host's: only for a pod
// whose DNS differs from the host's (ownDNS), and not over a volume the
// container mounts there.
func (a *Agent) hostModeResolvConf(pod *corev1.Pod, mounts []runtime.Mount) (*runtime.Mount, error) {
	ownDNS := podconfig.OwnDNS(pod) || (len(a.opts.ClusterDNS) > 0 && podconfig.ClusterFirstDNS(pod))
	if !ownDNS || !a.isolated() {
		return nil, nil
	}
	for _, m := range mounts {
		if filepath.Clean(m.Target) == podconfig.HostResolvConf {
			return nil, nil
		}
	}
	dir := filepath.Join(a.podDir(pod.UID), "etc")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the pod's managed files: %w", err)
	}
	p := filepath.Join(dir, "resolv.conf")
	if err := podconfig.WriteFileAtomic(p, a.podResolvConf(pod), 0o644); err != nil {
		return nil, fmt.Errorf("writing the pod's /etc/resolv.conf: %w", err)
	}
	return &runtime.Mount{Source: p, Target: podconfig.HostResolvConf}, nil
}

// servicesEnv is the service variables of pod, from the agent's Service
// cache.
func (a *Agent) servicesEnv(pod *corev1.Pod) (*podconfig.EnvList, error) {
	if a.serviceLister == nil {
		return &podconfig.EnvList{}, nil
	}
	all, err := a.serviceLister.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("listing services for the environment: %w", err)
	}
	links := pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks
	return podconfig.ServiceEnv(podconfig.PodServices(all, pod.Namespace, links, a.apiserver)), nil
}

// hostModeIDs are the user and group a host mode container runs as.
func (a *Agent) hostModeIDs() (uid, gid int64) {
	uid, gid = int64(os.Getuid()), int64(os.Getgid())
	if uid != 0 && a.isolated() {
		// Root of the sandbox's user namespace.
		return 0, 0
	}
	return uid, gid
}

// podFeatures returns the node features decideFeatures needs.
func (a *Agent) podFeatures() podconfig.NodeFeatures {
	userns, why := a.userNamespaces()
	return podconfig.NodeFeatures{Isolated: a.isolated(), Root: a.euid == 0, HostMode: !a.imageMode(), Limits: a.enforcesLimits(),
		MemoryMedium: a.volumes != nil && a.volumes.MemoryMediumHonoured(), UserNamespaces: userns, NoUserNamespaces: why}
}

// ephemeralRefusal decides the fields of an ephemeral container, which
// joins a pod already admitted: a reason and message when it cannot run
// here, empty when it can.
func (a *Agent) ephemeralRefusal(pod *corev1.Pod, c *container) (string, string) {
	if c.info.Kind != lifecycle.KindEphemeral {
		return "", ""
	}
	if _, ok := a.runtime.(runtime.Isolator); !ok {
		return "", ""
	}
	alone := &corev1.Pod{Spec: corev1.PodSpec{EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon(*c.spec)}}}}
	d := podconfig.DecideFeatures(alone, a.podFeatures())
	return d.Reason, d.Message
}

// envSources gives podconfig.ResolveEnv the agent's reads of the
// ConfigMaps, Secrets and volume files a container's environment refers
// to.
type envSources struct{ a *Agent }

// VolumeFile implements podconfig.SourceLookup: the file is opened inside
// the volume's host directory with openat2's RESOLVE_IN_ROOT (or
// pathrs-lite's emulation of it), so that neither a symbolic link nor ..
// written by a container leads out of it. As the kubelet, only a volume
// some container mounts can be read (the kubelet sets up no other).
func (s envSources) VolumeFile(ctx context.Context, pod *corev1.Pod, name, path string) (io.ReadCloser, string, error) {
	root := s.a.volumes.Source(pod, name)
	if root == "" || !volumeMounted(pod, name) {
		return nil, "", fmt.Errorf("cannot find the volume %q referenced by FileKeyRef", name)
	}
	hostPath := filepath.Join(root, path)
	h, err := pathrs.OpenInRoot(root, path)
	if err != nil {
		return nil, hostPath, &podconfig.FileOpenError{Path: hostPath, Err: err}
	}
	defer func() { _ = h.Close() }()
	// Non-blocking, and only a regular file: a FIFO a container put
	// there must not hold the pod's worker.
	f, err := pathrs.Reopen(h, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK)
	if err != nil {
		return nil, hostPath, &podconfig.FileOpenError{Path: hostPath, Err: err}
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		_ = f.Close()
		if err == nil {
			err = fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
		}
		return nil, hostPath, &podconfig.FileOpenError{Path: hostPath, Err: err}
	}
	return f, hostPath, nil
}

// volumeMounted reports whether one of the pod's containers mounts its
// volume called name.
func volumeMounted(pod *corev1.Pod, name string) bool {
	mounts := func(mounts []corev1.VolumeMount, devices []corev1.VolumeDevice) bool {
		for _, m := range mounts {
			if m.Name == name {
				return true
			}
		}
		for _, d := range devices {
			if d.Name == name {
				return true
			}
		}
		return false
	}
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			if mounts(c.VolumeMounts, c.VolumeDevices) {
				return true
			}
		}
	}
	for _, c := range pod.Spec.EphemeralContainers {
		if mounts(c.VolumeMounts, c.VolumeDevices) {
			return true
		}
	}
	return false
}

// ConfigMap implements podconfig.SourceLookup.
func (s envSources) ConfigMap(ctx context.Context, ns, name string) (map[string]string, error) {
	return s.a.configMap(ctx, ns, name)
}

// Secret implements podconfig.SourceLookup.
func (s envSources) Secret(ctx context.Context, ns, name string) (map[string][]byte, error) {
	return s.a.secret(ctx, ns, name)
}

// terminationFile is the host file of one attempt's termination message,
// bound at the container's terminationMessagePath (the kubelet makes one
// per container instance in the pod's directory).
func (a *Agent) terminationFile(uid types.UID, container string, attempt int32) string {
	return filepath.Join(a.podDir(uid), "termination", container, strconv.Itoa(int(attempt)))
}

// terminationMount creates the empty, world-writable termination message
// file of an attempt and returns its mount, or nothing when the container
// has no terminationMessagePath, a volume is mounted there, or containers
// get no private view to mount it in (the message then comes from the log
// only, with FallbackToLogsOnError). The file of the attempt before the
// previous one is removed, as its log is.
func (a *Agent) terminationMount(spec *runtime.Spec, c *corev1.Container) (*runtime.Mount, error) {
	if c.TerminationMessagePath == "" || !a.isolated() {
		return nil, nil
	}
	if _, host := a.runtime.(runtime.HostDirs); !host {
		return nil, nil
	}
	target := filepath.Clean(c.TerminationMessagePath)
	for _, m := range spec.Mounts {
		if filepath.Clean(m.Target) == target {
			return nil, nil
		}
	}
	uid := types.UID(spec.PodUID)
	p := a.terminationFile(uid, c.Name, spec.Attempt)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, fmt.Errorf("creating the termination message file: %w", err)
	}
	if err := os.WriteFile(p, nil, 0o666); err != nil {
		return nil, fmt.Errorf("creating the termination message file: %w", err)
	}
	// Whatever the umask, as the kubelet.
	if err := os.Chmod(p, 0o666); err != nil {
		return nil, fmt.Errorf("creating the termination message file: %w", err)
	}
	if spec.Attempt >= 2 {
		_ = os.Remove(a.terminationFile(uid, c.Name, spec.Attempt-2))
	}
	return &runtime.Mount{Source: p, Target: target}, nil
}

// hiddenPaths are the paths host-mode views hide: each of paths as given
// and, where links lead elsewhere (a /home that links to /var/home), as
// its links resolve, since the view shows the host's tree as it is.
func hiddenPaths(paths []string) []string {
	var out []string
	for _, p := range paths {
		if p == "" {
			continue
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			continue
		}
		out = append(out, abs)
		if real, err := filepath.EvalSymlinks(abs); err == nil && real != abs {
			out = append(out, real)
		}
	}
	return out
}
