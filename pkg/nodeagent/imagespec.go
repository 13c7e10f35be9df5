package nodeagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"jobkeeper.dev/jobkeeper/pkg/images"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// imageContainerSpec completes spec for a container run from img: its argv,
// environment, working directory and user by Kubernetes' rules over the
// image's config, its root filesystem, and its volumes plus the files the
// kubelet manages (/etc/hosts, /etc/hostname, /etc/resolv.conf).
func (a *Agent) imageContainerSpec(ctx context.Context, pod *corev1.Pod, c *container, img *images.Image, spec runtime.Spec, env *envList, hostname string) (runtime.Spec, error) {
	defs := defaultsOf(img)
	set := []string{"HOSTNAME=" + hostname}
	set = append(set, env.pairs()...)
	spec.Env = imageEnv(defs, set)
	var command, args []string
	for _, s := range c.spec.Command {
		command = append(command, expand(s, env.get))
	}
	for _, s := range c.spec.Args {
		args = append(args, expand(s, env.get))
	}
	spec.Command = processArgs(command, args, defs)
	if len(spec.Command) == 0 {
		return spec, &createError{msg: fmt.Sprintf("no command specified: image %q has neither ENTRYPOINT nor CMD and container %s sets no command", c.spec.Image, c.spec.Name)}
	}
	spec.WorkingDir = imageWorkingDir(c.spec, defs)
	user, err := containerUser(pod, c.spec, defs.user)
	if err != nil {
		return spec, err
	}
	spec.User = user
	spec.Rootfs = &runtime.Rootfs{Layers: img.Layers}
	mounts, err := a.volumes.mounts(ctx, pod, c.spec, env.get)
	if err != nil {
		return spec, err
	}
	files, err := a.podEtcFiles(pod, hostname)
	if err != nil {
		return spec, err
	}
	spec.Mounts = byDepth(append(mounts, managedFiles(files, mounts)...))
	return spec, nil
}

// ReasonCreateContainerError is the kubelet's waiting reason of a
// container the runtime refused to create.
const ReasonCreateContainerError = "CreateContainerError"

// createError is a container the runtime would refuse to create (no
// command at all): it waits with CreateContainerError, as with containerd.
type createError struct{ msg string }

// Error implements error.
func (e *createError) Error() string { return e.msg }

// byDepth orders mounts by the depth of their target, keeping the order of
// mounts at one depth, as containerd orders a container's mounts: a volume
// on /etc is mounted before the managed /etc/hosts, which stays visible.
func byDepth(mounts []runtime.Mount) []runtime.Mount {
	slices.SortStableFunc(mounts, func(a, b runtime.Mount) int {
		return strings.Count(filepath.Clean(a.Target), "/") - strings.Count(filepath.Clean(b.Target), "/")
	})
	return mounts
}

// containerUser is who a container runs as: the image's USER, overridden
// by runAsUser and runAsGroup of the container's securityContext, else the
// pod's, with the pod's supplemental groups. runAsNonRoot is checked as
// the kubelet checks it: a user that is, or cannot be shown not to be,
// root is refused.
func containerUser(pod *corev1.Pod, c *corev1.Container, imageUser string) (*runtime.User, error) {
	u := &runtime.User{Image: imageUser}
	var nonRoot *bool
	if psc := pod.Spec.SecurityContext; psc != nil {
		u.RunAsUser, u.RunAsGroup, nonRoot = psc.RunAsUser, psc.RunAsGroup, psc.RunAsNonRoot
		u.SupplementalGroups = psc.SupplementalGroups
		if psc.FSGroup != nil {
			// The kubelet adds the fsGroup to the groups of every
			// container's processes.
			u.SupplementalGroups = append(slices.Clone(psc.SupplementalGroups), *psc.FSGroup)
		}
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			u.RunAsUser = sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			u.RunAsGroup = sc.RunAsGroup
		}
		if sc.RunAsNonRoot != nil {
			nonRoot = sc.RunAsNonRoot
		}
	}
	if nonRoot == nil || !*nonRoot {
		return u, nil
	}
	if u.RunAsUser != nil {
		if *u.RunAsUser == 0 {
			return nil, fmt.Errorf("container's runAsUser breaks non-root policy (pod: %q, container: %s)", pod.Namespace+"/"+pod.Name, c.Name)
		}
		return u, nil
	}
	name, _, _ := strings.Cut(imageUser, ":")
	if name == "" {
		return nil, fmt.Errorf("container has runAsNonRoot and image will run as root (pod: %q, container: %s)", pod.Namespace+"/"+pod.Name, c.Name)
	}
	uid, err := strconv.ParseInt(name, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root (pod: %q, container: %s)", name, pod.Namespace+"/"+pod.Name, c.Name)
	}
	if uid == 0 {
		return nil, fmt.Errorf("container has runAsNonRoot and image will run as root (pod: %q, container: %s)", pod.Namespace+"/"+pod.Name, c.Name)
	}
	return u, nil
}

// etcFile is one file the kubelet manages in every container.
type etcFile struct {
	// target is the path in the container, source the host file.
	target, source string
}

// podEtcFiles writes the pod's /etc/hosts, /etc/hostname and
// /etc/resolv.conf into its directory and returns them. The hosts file is
// the kubelet's (localhost, the pod's IP and hostname, hostAliases);
// resolv.conf is composed from this host's by the pod's dnsPolicy and
// dnsConfig (podDNS), as pods here share its network.
func (a *Agent) podEtcFiles(pod *corev1.Pod, hostname string) ([]etcFile, error) {
	dir := filepath.Join(a.podDir(pod.UID), "etc")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the pod's managed files: %w", err)
	}
	files := []struct {
		name, target string
		data         []byte
	}{
		{"hosts", "/etc/hosts", hostsFile(pod, podHostname(pod), nodeIP)},
		{"hostname", "/etc/hostname", []byte(hostname + "\n")},
		{"resolv.conf", "/etc/resolv.conf", a.podResolvConf(pod)},
	}
	out := make([]etcFile, 0, len(files))
	for _, f := range files {
		p := filepath.Join(dir, f.name)
		if err := writeFileAtomic(p, f.data, 0o644); err != nil {
			return nil, fmt.Errorf("writing the pod's %s: %w", f.target, err)
		}
		out = append(out, etcFile{target: f.target, source: p})
	}
	return out, nil
}

// hostsFile is the kubelet's managed /etc/hosts of a pod.
func hostsFile(pod *corev1.Pod, hostname, ip string) []byte {
	var b strings.Builder
	b.WriteString("# Kubernetes-managed hosts file.\n")
	b.WriteString("127.0.0.1\tlocalhost\n")
	b.WriteString("::1\tlocalhost ip6-localhost ip6-loopback\n")
	b.WriteString("fe00::0\tip6-localnet\n")
	b.WriteString("fe00::0\tip6-mcastprefix\n")
	b.WriteString("fe00::1\tip6-allnodes\n")
	b.WriteString("fe00::2\tip6-allrouters\n")
	name := hostname
	if pod.Spec.Subdomain != "" {
		name = fmt.Sprintf("%s.%s.%s.svc.cluster.local\t%s", hostname, pod.Spec.Subdomain, pod.Namespace, hostname)
	}
	fmt.Fprintf(&b, "%s\t%s\n", ip, name)
	if len(pod.Spec.HostAliases) > 0 {
		b.WriteString("\n# Entries added by HostAliases.\n")
		for _, h := range pod.Spec.HostAliases {
			fmt.Fprintf(&b, "%s\t%s\n", h.IP, strings.Join(h.Hostnames, "\t"))
		}
	}
	return []byte(b.String())
}

// managedFiles returns the file mounts of files whose path the container
// does not mount a volume on (a volume there wins, as with the kubelet).
func managedFiles(files []etcFile, volumes []runtime.Mount) []runtime.Mount {
	taken := map[string]bool{}
	for _, m := range volumes {
		taken[filepath.Clean(m.Target)] = true
	}
	var out []runtime.Mount
	for _, f := range files {
		if !taken[f.target] {
			out = append(out, runtime.Mount{Source: f.source, Target: f.target})
		}
	}
	return out
}

// writeFileAtomic replaces p with data (a temporary file renamed over it),
// so a container bound to the old file never sees a partial one.
func writeFileAtomic(p string, data []byte, mode os.FileMode) error {
	if old, err := os.ReadFile(p); err == nil && string(old) == string(data) {
		return nil
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}
