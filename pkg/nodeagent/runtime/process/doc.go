// Package process is the node agent's default runtime: every container
// attempt is a host process.
//
// The container's command and args (already expanded by the pod worker) are
// executed directly, without a shell, in their own process group, in the
// working directory the worker chose, with exactly the resolved environment
// (the agent's own environment is not inherited; PATH defaults to the
// agent's PATH when the container does not set one). The image is never
// pulled nor looked at. stdout and stderr go to the attempt's log file
// (package logfile), rotated at a size limit.
//
// Like a container whose init process exits, the whole process group is
// killed with SIGKILL as soon as the main process ends. Stop sends SIGTERM to
// the group, waits the grace period and then sends SIGKILL.
//
// Every running attempt's process group id is recorded as a file in the
// runtime's state directory. If the agent dies without stopping its
// processes, New kills the recorded groups that are still alive, so the
// processes of a previous run are gone when a new run starts. On Linux the
// main process also gets SIGKILL when the agent dies (PR_SET_PDEATHSIG).
//
// Anyone who can create pods runs commands as the user running the agent.
package process
