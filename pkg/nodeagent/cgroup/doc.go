// Package cgroup gives the local node agent's pods and containers control
// groups laid out as the kubelet lays them out with its cgroupfs driver,
// and the limits the kubelet and its runtime write into them, so that a
// container over its memory limit is killed and reported OOMKilled and a
// container's CPU is held to its limit.
//
// Layout, below a root (Manager.Root):
//
//	<root>/kubepods/pod<uid>                      Guaranteed pods
//	<root>/kubepods/burstable/pod<uid>            Burstable pods
//	<root>/kubepods/besteffort/pod<uid>           BestEffort pods
//	<pod cgroup>/<container>-<attempt>            one per container attempt
//
// The pod cgroup gets what the kubelet computes for a pod
// (cm.ResourceConfigForPod: the sum of its containers' limits when every
// container has one, pod-level resources, CPU shares from the requests);
// the container cgroup what the kubelet asks its runtime for (memory limit,
// CPU shares from the request, CFS quota from the limit over a 100ms
// period). Writing them is the kubelet's own cgroup manager
// (k8s.io/kubernetes/pkg/kubelet/cm, over opencontainers/cgroups), on
// cgroup v1 and v2 alike.
//
// The root: on cgroup v2, "/jobkeeper-<instance>" at the top of the
// unified hierarchy, as the kubelet creates /kubepods there (a cgroup that
// holds processes cannot also give its controllers to children, so the
// agent's own cgroup cannot be the parent); on v1, below the agent's own
// memory cgroup, so that the pods stay inside whatever limit the agent
// itself was given.
//
// Putting a container's processes in its cgroup is the sandbox's part: the
// runtime opens the cgroup.procs files of the container cgroup (one per v1
// hierarchy) and of the sandbox's own cgroups (Container.ProcsFiles); the
// sandbox writes the container's init stage into the first before the
// stage runs the container's command, and itself into the first just
// before it forks another process of the container and back into the
// second right after, so that the container's processes, and only they,
// are charged to the container.
//
// A user other than root gets cgroups only where one was delegated to it
// (delegated.go): its root is then below its own cgroup; elsewhere New
// fails, saying what to configure, and the agent says that limits are not
// enforced.
package cgroup
