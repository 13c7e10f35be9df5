// Package sandbox runs one container attempt of the local node agent inside
// a small supervisor process, the sandbox, so that the attempt gets a private
// view of the filesystem and can be exec'd into, and so that nothing it
// starts outlives it.
//
// The model is "the host is the image": the container sees the host's
// filesystems, but through copy-on-write overlays whose upper layers live on
// a tmpfs private to the attempt, so writes to / stay in the container and
// vanish with it. /proc, /dev and /sys are the host's; /tmp is a fresh
// tmpfs; the pod's volumes (prepared on the host by the agent) are bind
// mounted at their mount paths, read-only where asked. A host filesystem
// that cannot be overlaid is mounted read-only instead: nothing a container
// writes reaches the host except through a volume.
//
// The sandbox is the agent's own executable started again under the name
// ArgvName; the package's init function recognises that name and runs the
// supervisor instead of the program's main. It is started in a new mount
// namespace (and, for a user other than root, a new user namespace mapping
// that user to root), so nothing it mounts is visible outside. Where that
// is not possible, Config.Isolate is false and the sandbox runs the attempt
// on the host filesystem; the agent then refuses pods that have volumes.
//
// The agent and the sandbox talk over a socket pair (SOCK_SEQPACKET) that
// also carries file descriptors: the sandbox reports the main process's
// start and exit, runs exec requests inside its view, and relays signals.
// When the agent goes away (even by SIGKILL) the socket closes and the
// sandbox kills everything the attempt started. It is a child subreaper, so
// processes that daemonise are still its descendants and die with it.
//
// Files: config.go (what the agent asks for), plan.go (which mounts make
// the view; pure), setup_linux.go (making them), supervisor.go (the sandbox
// process), client.go (the agent's side), protocol.go (the messages),
// procfs.go (finding a session's processes).
package sandbox
