package podconfig

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Reasons of the security-context decisions (decideFeatures).
const (
	// ReasonPodFeatureUnsupported: the pod asks for something this node
	// cannot give (a privileged container when the agent is not root, a
	// seccomp profile of the host's); the kubelet's reason for a pod
	// whose features a node lacks.
	ReasonPodFeatureUnsupported = "PodFeatureUnsupported"
	// ReasonAppArmor: the pod asks for an AppArmor profile; the kubelet's
	// reason when the node cannot enforce AppArmor.
	ReasonAppArmor = "AppArmor"
	// ReasonSysctlForbidden: the pod sets sysctls; the kubelet's reason
	// for a sysctl it does not allow.
	ReasonSysctlForbidden = "SysctlForbidden"
	// ReasonNotEnforced is the Warning event of a pod that runs although
	// the node does not enforce some of its fields (resource limits,
	// SELinux options).
	ReasonNotEnforced = "NotEnforced"
	// ReasonInvalidDNSConfig: the pod's dnsConfig has an entry that
	// cannot be written into a resolv.conf as one entry (the apiserver
	// checks only that an option has a name).
	ReasonInvalidDNSConfig = "InvalidDNSConfig"
)

// NodeFeatures is what this node can do, for decideFeatures.
type NodeFeatures struct {
	// Isolated: containers get a private filesystem view.
	Isolated bool
	// Root: the agent runs as root, so it can give files and processes
	// any group.
	Root bool
	// HostMode: containers run host programs as the agent's user
	// (--images=host).
	HostMode bool
	// Limits: containers get cgroups with their cpu and memory limits.
	Limits bool
	// MemoryMedium: memory-backed emptyDirs are a tmpfs.
	MemoryMedium bool
	// UserNamespaces: as root, a pod with hostUsers: false gets a user
	// namespace of its own; NoUserNamespaces says why not.
	UserNamespaces   bool
	NoUserNamespaces string
}

// FeatureDecision is decideFeatures' answer. A non-empty reason refuses
// the pod (message says which field and why); otherwise unenforced names
// the fields that are accepted but not enforced, for one Warning event.
type FeatureDecision struct {
	// Reason and message refuse the pod; empty: it may run.
	Reason, Message string
	// Unenforced are the fields the node accepts without enforcing them,
	// each with where it is set, in a stable order.
	Unenforced []string
}

// DecideFeatures decides, field by field, what the node does with a pod's
// security context and resources, as docs/node-agent.md's table says:
//
//   - honoured: readOnlyRootFilesystem (with a private view),
//     allowPrivilegeEscalation, capabilities (the runtime's default set,
//     add and drop), privileged as root (every capability, the host's
//     devices, /proc unmasked, /sys writable), seccomp profiles
//     (RuntimeDefault, Localhost from <data-dir>/seccomp, Unconfined; with
//     namespaces), fsGroup (as root), hostPID, hostIPC and hostNetwork
//     (pods share the host's network and IPC anyway), procMount Unmasked,
//     AppArmor Unconfined, hostUsers false (as root where the runtime
//     has user namespaces; as another user every sandbox has one);
//   - refused, because running without them would change what the program
//     sees or drop a protection the user named: privileged when the agent
//     is not root, a Localhost seccomp profile without namespaces, an
//     AppArmor profile other than Unconfined (as a
//     kubelet on a host without AppArmor), sysctls (they would be set on
//     the host), readOnlyRootFilesystem, dnsPolicy None and dnsConfig
//     without a private view, fsGroup when the agent cannot change groups,
//     a dnsConfig entry that would not be one entry of resolv.conf,
//     hostUsers false as root where the runtime has no user namespaces;
//   - accepted with a Warning event: resource limits where containers
//     get no cgroups (not root, --cgroups=off), and limits other than
//     cpu, memory and ephemeral-storage (local storage eviction)
//     everywhere, capabilities added and a RuntimeDefault seccomp profile where
//     containers get no namespaces, and SELinux options (what most pods
//     carry: refusing them would refuse ordinary pods);
//     supplementalGroups in host mode when the agent is not root (the
//     processes keep the agent's groups).
//
// The first refusal found wins: pod fields, then containers in spec order
// (init, regular, ephemeral).
func DecideFeatures(pod *corev1.Pod, node NodeFeatures) FeatureDecision {
	var d FeatureDecision
	refuse := func(reason, format string, args ...any) FeatureDecision {
		return FeatureDecision{Reason: reason, Message: fmt.Sprintf(format, args...)}
	}
	warn := func(field, where string) {
		d.Unenforced = append(d.Unenforced, fmt.Sprintf("%s (%s)", field, where))
	}
	if psc := pod.Spec.SecurityContext; psc != nil {
		if len(psc.Sysctls) > 0 {
			names := make([]string, 0, len(psc.Sysctls))
			for _, s := range psc.Sysctls {
				names = append(names, s.Name)
			}
			return refuse(ReasonSysctlForbidden, "forbidden sysctl: %s: the local node agent cannot set sysctls (pods share the host's namespaces, so they would change the host)", strings.Join(names, ", "))
		}
		if p := psc.SeccompProfile; p != nil && p.Type == corev1.SeccompProfileTypeLocalhost && !node.Isolated {
			return refuse(ReasonPodFeatureUnsupported, "spec.securityContext.seccompProfile: this node gives containers no namespaces, so it cannot apply seccomp profiles, and a Localhost profile is not run without")
		}
		if p := psc.AppArmorProfile; p != nil && p.Type != corev1.AppArmorProfileTypeUnconfined {
			return refuse(ReasonAppArmor, "Cannot enforce AppArmor: spec.securityContext.appArmorProfile: the local node agent does not apply AppArmor profiles")
		}
		if psc.FSGroup != nil && !node.Root {
			return refuse(ReasonPodFeatureUnsupported, "spec.securityContext.fsGroup: the local node agent does not run as root, so it cannot give volumes or processes group %d", *psc.FSGroup)
		}
		if node.HostMode && !node.Root && len(psc.SupplementalGroups) > 0 {
			// Host mode's processes then keep the agent's groups
			// (hostuser.go); as root they get them.
			warn("securityContext.supplementalGroups", "pod")
		}
		if node.HostMode && !node.Root && strictGroups(psc) {
			warn("securityContext.supplementalGroupsPolicy Strict", "pod")
		}
		if p := psc.SeccompProfile; p != nil && p.Type == corev1.SeccompProfileTypeRuntimeDefault && !node.Isolated {
			warn("securityContext.seccompProfile RuntimeDefault", "pod")
		}
		if psc.SELinuxOptions != nil {
			warn("securityContext.seLinuxOptions", "pod")
		}
	}
	if pod.Spec.HostUsers != nil && !*pod.Spec.HostUsers && node.Root && !node.UserNamespaces {
		// Without one the container's root would be the host's, the very
		// thing the field rules out. (As another user each sandbox has
		// one, mapping only that user.)
		return refuse(ReasonPodFeatureUnsupported, "can't set `spec.hostUsers: false`, runtime does not support user namespaces: %s", node.NoUserNamespaces)
	}
	if len(pod.Spec.ResourceClaims) > 0 {
		// Run without them, the containers would miss the devices they
		// asked for.
		return refuse(ReasonPodFeatureUnsupported, "spec.resourceClaims: the local node agent does not prepare dynamic resources (DynamicResourceAllocation), so it cannot give containers the devices they claim")
	}
	for _, k := range sortedKeys(pod.Annotations) {
		if strings.HasPrefix(k, corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix) && pod.Annotations[k] != corev1.DeprecatedAppArmorBetaProfileNameUnconfined {
			return refuse(ReasonAppArmor, "Cannot enforce AppArmor: annotation %s: the local node agent does not apply AppArmor profiles", k)
		}
	}
	if msg := checkDNSConfig(pod.Spec.DNSConfig); msg != "" {
		return refuse(ReasonInvalidDNSConfig, "%s", msg)
	}
	if OwnDNS(pod) && !node.Isolated {
		return refuse(ReasonPodFeatureUnsupported, "spec.dnsPolicy None or spec.dnsConfig: this node cannot give containers a private filesystem view, so they read the host's /etc/resolv.conf")
	}
	if r := pod.Spec.Resources; r != nil {
		for _, f := range unenforcedLimits(r.Limits, node.Limits) {
			warn(f, "pod")
		}
	}
	for _, v := range pod.Spec.Volumes {
		if v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumMemory && !node.MemoryMedium {
			warn("emptyDir.medium: Memory", fmt.Sprintf("volume %q", v.Name))
		}
	}
	for _, c := range podContainers(pod) {
		where := fmt.Sprintf("%s %q", c.kind, c.spec.Name)
		for _, f := range unenforcedLimits(c.spec.Resources.Limits, node.Limits) {
			warn(f, where)
		}
		sc := c.spec.SecurityContext
		if sc == nil {
			continue
		}
		switch {
		case sc.Privileged != nil && *sc.Privileged && !node.Root:
			return refuse(ReasonPodFeatureUnsupported, "%s: securityContext.privileged: the local node agent does not run as root, so a container cannot have the host's capabilities and devices", where)
		case sc.SeccompProfile != nil && sc.SeccompProfile.Type == corev1.SeccompProfileTypeLocalhost && !node.Isolated:
			return refuse(ReasonPodFeatureUnsupported, "%s: securityContext.seccompProfile: this node gives containers no namespaces, so it cannot apply seccomp profiles, and a Localhost profile is not run without", where)
		case sc.AppArmorProfile != nil && sc.AppArmorProfile.Type != corev1.AppArmorProfileTypeUnconfined:
			return refuse(ReasonAppArmor, "Cannot enforce AppArmor: %s: securityContext.appArmorProfile: the local node agent does not apply AppArmor profiles", where)
		case sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem && !node.Isolated:
			return refuse(ReasonPodFeatureUnsupported, "%s: securityContext.readOnlyRootFilesystem: this node cannot give containers a private filesystem view, so their root cannot be made read-only", where)
		}
		if caps := sc.Capabilities; caps != nil && len(caps.Add) > 0 && !node.Isolated {
			// Without namespaces the agent is not root (root always has
			// them): its containers hold no capability to add to.
			warn("securityContext.capabilities.add", where)
		}
		if sc.SeccompProfile != nil && sc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault && !node.Isolated {
			warn("securityContext.seccompProfile RuntimeDefault", where)
		}
		if sc.SELinuxOptions != nil {
			warn("securityContext.seLinuxOptions", where)
		}
	}
	return d
}

// containerRef is one container of a pod with the name of its list.
type containerRef struct {
	// kind is "container", "init container" or "ephemeral container".
	kind string
	// spec is the container.
	spec *corev1.Container
}

// podContainers lists the pod's init, regular and ephemeral containers.
func podContainers(pod *corev1.Pod) []containerRef {
	var out []containerRef
	for i := range pod.Spec.InitContainers {
		out = append(out, containerRef{"init container", &pod.Spec.InitContainers[i]})
	}
	for i := range pod.Spec.Containers {
		out = append(out, containerRef{"container", &pod.Spec.Containers[i]})
	}
	for i := range pod.Spec.EphemeralContainers {
		out = append(out, containerRef{"ephemeral container", (*corev1.Container)(&pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)})
	}
	return out
}

// unenforcedLimits names the limits that are not enforced. ephemeral-storage
// always is (local storage eviction); without cgroups, any other makes
// "resources.limits"; with them, those other than cpu and memory are named
// one by one, in order.
func unenforcedLimits(limits corev1.ResourceList, cgroups bool) []string {
	var out []string
	for name := range limits {
		switch {
		case name == corev1.ResourceEphemeralStorage:
		case !cgroups:
			return []string{"resources.limits"}
		case name != corev1.ResourceCPU && name != corev1.ResourceMemory:
			out = append(out, "resources.limits."+string(name))
		}
	}
	sort.Strings(out)
	return out
}

// NotEnforcedMessage is the Warning event of a pod whose fields are
// accepted without being enforced.
func NotEnforcedMessage(fields []string) string {
	fields = append([]string(nil), fields...)
	sort.Strings(fields)
	return "The local node agent runs this pod without enforcing: " + strings.Join(fields, ", ") + " (see docs/node-agent.md)"
}
