package podconfig

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// In host mode (--images=host) a container's processes run as the user
// its sandbox has: the agent's, or, for an agent that is not root and gives
// containers a private view, root of a user namespace that maps only the
// agent's user. runAsUser, runAsGroup and runAsNonRoot cannot change that,
// so a container asking for something else waits with
// CreateContainerConfigError saying why, as the kubelet's runAsNonRoot
// check does, rather than run as another user. As root the processes also
// get the pod's supplementalGroups and fsGroup, as in images mode
// (hostModeUser); as another user they keep the agent's groups, and
// supplementalGroups are named in the NotEnforced warning (decideFeatures;
// fsGroup is refused there).

// CheckHostModeUser checks container c of pod against the user (uid, gid)
// its processes would have in host mode.
func CheckHostModeUser(pod *corev1.Pod, c *corev1.Container, uid, gid int64) error {
	var runAsUser, runAsGroup *int64
	var nonRoot *bool
	if psc := pod.Spec.SecurityContext; psc != nil {
		runAsUser, runAsGroup, nonRoot = psc.RunAsUser, psc.RunAsGroup, psc.RunAsNonRoot
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			runAsUser = sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			runAsGroup = sc.RunAsGroup
		}
		if sc.RunAsNonRoot != nil {
			nonRoot = sc.RunAsNonRoot
		}
	}
	who := fmt.Sprintf("(pod: %q, container: %s)", pod.Namespace+"/"+pod.Name, c.Name)
	if nonRoot != nil && *nonRoot {
		if runAsUser != nil && *runAsUser == 0 {
			return fmt.Errorf("container's runAsUser breaks non-root policy %s", who)
		}
		if uid == 0 {
			return fmt.Errorf("container has runAsNonRoot and image will run as root %s: in host mode (--images=host) containers run as the node agent's user, here root", who)
		}
	}
	if runAsUser != nil && *runAsUser != uid {
		return fmt.Errorf("runAsUser %d %s: in host mode (--images=host) containers run as the node agent's user, here %d", *runAsUser, who, uid)
	}
	if runAsGroup != nil && *runAsGroup != gid {
		return fmt.Errorf("runAsGroup %d %s: in host mode (--images=host) containers run with the node agent's group, here %d", *runAsGroup, who, gid)
	}
	return nil
}

// HostModeUser is the User of a host mode container of pod run by an agent
// whose processes have (uid, gid): with root the agent's user given the
// pod's supplementalGroups and its fsGroup (which the kubelet adds to every
// container's groups), without the groups /etc/group gives it under
// supplementalGroupsPolicy Strict; nil (the agent's user and groups,
// unchanged) when the pod asks for neither or the agent cannot give
// groups.
func HostModeUser(pod *corev1.Pod, uid, gid int64, root bool) *runtime.User {
	psc := pod.Spec.SecurityContext
	if !root || psc == nil || (len(psc.SupplementalGroups) == 0 && psc.FSGroup == nil && !strictGroups(psc)) {
		return nil
	}
	groups := slices.Clone(psc.SupplementalGroups)
	if psc.FSGroup != nil {
		groups = append(groups, *psc.FSGroup)
	}
	return &runtime.User{RunAsUser: &uid, RunAsGroup: &gid, SupplementalGroups: groups, StrictGroups: strictGroups(psc)}
}
