// Package process is the node agent's default runtime: every container
// attempt is a set of host processes under a sandbox (package sandbox).
//
// The container's command and args (already expanded, and merged with the
// image's entrypoint and cmd, by the pod worker) are executed directly,
// without a shell, with exactly the resolved environment (the agent's own
// environment is not inherited) in the working directory the worker chose;
// the command is looked up in the environment's PATH inside the
// container's view. stdout and stderr go to the attempt's log file
// (package logfile), rotated at a size limit, and to the clients attached
// (runtime.Attacher, stdio.go). As a container runtime's shim, the runtime
// holds the main process's stdin when the spec asks for one (Spec.Stdin: a
// pipe, so the container blocks reading it until a client writes), and its
// terminal (Spec.TTY: a pseudo-terminal, the main process's controlling
// one, whose output is logged as stdout); StdinOnce closes stdin when the
// first client that wrote to it leaves (without a terminal, as containerd).
//
// A spec runs in one of two modes:
//   - Image mode (Spec.Rootfs set): the container's root filesystem is its
//     image, one overlay of its layers with an upper layer private to the
//     attempt, the pod's volumes and the agent's per-pod files mounted in
//     it; the processes run as Spec.User, resolved in the image's
//     /etc/passwd and /etc/group. This needs a private mount namespace: on
//     a node that cannot give one Start fails with CreateContainerError.
//     Without root the only identity available is root (the agent's user
//     mapped to 0); other users fail with CreateContainerError.
//   - Host mode (Rootfs nil): the host is the image and is never looked
//     at. Where this machine allows private mount namespaces (probed by
//     New), the sandbox gives the container a copy-on-write view of the
//     host's filesystems with the pod's volumes mounted in it, so the
//     container's writes never reach the host except through a volume;
//     where it does not, the container sees the host's filesystem and specs
//     with mounts are refused.
//
// Isolation reports whether this machine gives private views, whatever the
// specs ask for.
//
// Where it does, each container also gets a UTS namespace of its own named
// Spec.Hostname (the pod's hostname), in both modes, so hostname and
// uname -n print it, in exec'd commands too. New probes for it and logs the
// answer; UTS reports it. Where the machine does not allow it (or without
// isolation) containers see the host's name: that never fails a container.
//
// Where the machine allows it (New probes with sandbox.ProbePID, logs the
// answer; PIDNamespaces reports it), each container also gets a PID
// namespace (pidns.go): its own, whose PID 1 is the main process
// (runtime.PIDNamespaceContainer); its pod's (PIDNamespacePod,
// shareProcessNamespace), whose PID 1 is a pause sandbox started with the
// first container of the pod that runs and killed with the last; or a
// running target's (PIDNamespaceTarget, an ephemeral container's). Where it
// does not, containers are in the host's.
//
// Start returns once the command runs. A sandbox that has not got that far
// within Options.StartTimeout (two minutes by default), or when Start's
// context ends, is killed with everything it started, and Start fails with
// CreateContainerError; so does an image whose /etc/passwd or /etc/group is
// not a regular file. An exec into a wedged sandbox ends with its context.
//
// Like a container whose init process exits, everything the attempt started
// is killed as soon as the main process ends. Stop sends SIGTERM to the main
// process alone, as a container runtime signals PID 1 (a shell that traps
// it stops its children itself), waits the grace period and then kills
// every process of the attempt. exec runs commands inside the sandbox (runtime.Execer), with
// the container's user.
//
// Every running sandbox is recorded as a file in the runtime's state
// directory (its PID, which is also its session id, and its start time).
// A spec with a StateDir runs in a durable sandbox (sandbox.Config.StateDir):
// it outlives the agent, stores the container's log itself, and a restarted
// agent takes it over with Adopt (runtime.Adopter), or reads there how its
// container ended while no agent held it; one that no agent adopts within
// Options.OrphanTimeout (5 minutes by default) stops its container with
// SIGTERM and, after the spec's GracePeriod, SIGKILL. A spec without one runs
// in a sandbox that kills its attempt when the agent dies. New kills
// whatever is left in a recorded session, except a durable sandbox that
// still runs, so the processes of a previous run that no agent can take
// over are gone when a new run starts.
//
// Anyone who can create pods runs commands with the privileges of the user
// running the agent: a container may ask to run as root (in host mode it
// always runs as the agent's user), and it sees the host's devices,
// processes and network: there are no PID, IPC or network namespaces.
package process
