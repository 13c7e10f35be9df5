// Package process is the node agent's default runtime: every container
// attempt is a set of host processes under a sandbox (package sandbox).
//
// The container's command and args (already expanded by the pod worker) are
// executed directly, without a shell, with exactly the resolved environment
// (the agent's own environment is not inherited) in the working directory
// the worker chose. The image is never pulled nor looked at: the host is the
// image. Where this machine allows private mount namespaces (probed by New),
// the sandbox gives the container a copy-on-write view of the host's
// filesystems with the pod's volumes mounted in it, so the container's
// writes never reach the host except through a volume; where it does not,
// the container sees the host's filesystem and specs with mounts are
// refused (Isolation reports which). stdout and stderr go to the attempt's
// log file (package logfile), rotated at a size limit.
//
// Like a container whose init process exits, everything the attempt started
// is killed as soon as the main process ends. Stop sends SIGTERM to the main
// process's group, waits the grace period and then kills every process of
// the attempt. exec runs commands inside the sandbox (runtime.Execer).
//
// Every running sandbox is recorded as a file in the runtime's state
// directory (its PID, which is also its session id, and its start time). If
// the agent dies, each sandbox sees its control socket close and kills its
// attempt; and New kills whatever is still left in a recorded session, so
// the processes of a previous run are gone when a new run starts.
//
// Anyone who can create pods runs commands as the user running the agent.
package process
