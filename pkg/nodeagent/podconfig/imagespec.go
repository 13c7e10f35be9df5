package podconfig

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// ReasonCreateContainerError is the kubelet's waiting reason of a
// container the runtime refused to create.
const ReasonCreateContainerError = "CreateContainerError"

// CreateError is a container the runtime would refuse to create (no
// command at all): it waits with CreateContainerError, as with containerd.
type CreateError struct{ Msg string }

// Error implements error.
func (e *CreateError) Error() string { return e.Msg }

// ByDepth orders mounts by the depth of their target, keeping the order of
// mounts at one depth, as containerd orders a container's mounts: a volume
// on /etc is mounted before the managed /etc/hosts, which stays visible.
func ByDepth(mounts []runtime.Mount) []runtime.Mount {
	slices.SortStableFunc(mounts, func(a, b runtime.Mount) int {
		return strings.Count(filepath.Clean(a.Target), "/") - strings.Count(filepath.Clean(b.Target), "/")
	})
	return mounts
}

// ContainerUser is who a container runs as: the image's USER, overridden
// by runAsUser and runAsGroup of the container's securityContext, else the
// pod's, with the pod's supplemental groups, and without the groups the
// image gives the user under supplementalGroupsPolicy Strict (the default,
// Merge, keeps them). runAsNonRoot is checked as
// the kubelet checks it: a user that is, or cannot be shown not to be,
// root is refused.
func ContainerUser(pod *corev1.Pod, c *corev1.Container, imageUser string) (*runtime.User, error) {
	u := &runtime.User{Image: imageUser}
	var nonRoot *bool
	if psc := pod.Spec.SecurityContext; psc != nil {
		u.RunAsUser, u.RunAsGroup, nonRoot = psc.RunAsUser, psc.RunAsGroup, psc.RunAsNonRoot
		u.SupplementalGroups = psc.SupplementalGroups
		u.StrictGroups = strictGroups(psc)
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

// strictGroups reports whether the pod's supplementalGroupsPolicy is
// Strict.
func strictGroups(psc *corev1.PodSecurityContext) bool {
	return psc.SupplementalGroupsPolicy != nil && *psc.SupplementalGroupsPolicy == corev1.SupplementalGroupsPolicyStrict
}

// EtcFile is one file the kubelet manages in every container.
type EtcFile struct {
	// Target is the path in the container, source the host file.
	Target, Source string
}

// HostsFile is the kubelet's managed /etc/hosts of a pod.
func HostsFile(pod *corev1.Pod, hostname, ip string) []byte {
	var b strings.Builder
	b.WriteString("# Kubernetes-managed hosts file.\n")
	b.WriteString("127.0.0.1\tlocalhost\n")
	b.WriteString("::1\tlocalhost ip6-localhost ip6-loopback\n")
	b.WriteString("fe00::0\tip6-localnet\n")
	b.WriteString("fe00::0\tip6-mcastprefix\n")
	b.WriteString("fe00::1\tip6-allnodes\n")
	b.WriteString("fe00::2\tip6-allrouters\n")
	name := hostname
	if sub := podSubdomain(pod); sub != "" {
		name = fmt.Sprintf("%s.%s.%s.svc.cluster.local\t%s", hostname, sub, pod.Namespace, hostname)
	}
	fmt.Fprintf(&b, "%s\t%s\n", ip, name)
	writeHostAliases(&b, pod.Spec.HostAliases)
	return []byte(b.String())
}

// NodeHostsFile is the node's hosts file, which hostNetwork pods get.
const NodeHostsFile = "/etc/hosts"

// HostNetworkHostsFile is the kubelet's /etc/hosts of a hostNetwork pod:
// the node's own hosts file (nodeHosts) under a header saying so, then the
// pod's hostAliases.
func HostNetworkHostsFile(pod *corev1.Pod, nodeHosts []byte) []byte {
	var b strings.Builder
	b.WriteString("# Kubernetes-managed hosts file (host network).\n")
	b.Write(nodeHosts)
	writeHostAliases(&b, pod.Spec.HostAliases)
	return []byte(b.String())
}

// writeHostAliases appends the hostAliases section of a managed hosts file.
func writeHostAliases(b *strings.Builder, aliases []corev1.HostAlias) {
	if len(aliases) == 0 {
		return
	}
	b.WriteString("\n# Entries added by HostAliases.\n")
	for _, h := range aliases {
		fmt.Fprintf(b, "%s\t%s\n", h.IP, strings.Join(h.Hostnames, "\t"))
	}
}

// ManagedFiles returns the file mounts of files whose path the container
// does not mount a volume on (a volume there wins, as with the kubelet).
func ManagedFiles(files []EtcFile, volumes []runtime.Mount) []runtime.Mount {
	taken := map[string]bool{}
	for _, m := range volumes {
		taken[filepath.Clean(m.Target)] = true
	}
	var out []runtime.Mount
	for _, f := range files {
		if !taken[f.Target] {
			out = append(out, runtime.Mount{Source: f.Source, Target: f.Target})
		}
	}
	return out
}

// WriteFileAtomic replaces p with data (a temporary file renamed over it),
// so a container bound to the old file never sees a partial one.
func WriteFileAtomic(p string, data []byte, mode os.FileMode) error {
	if old, err := os.ReadFile(p); err == nil && string(old) == string(data) {
		return nil
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}
