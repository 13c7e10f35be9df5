package sandbox

// ArgvName is argv[0] of a sandbox process. The package's init function
// turns a process started under this name into a sandbox.
const ArgvName = "jobkeeper-sandbox"

// Config is what one sandbox runs. The agent sends it over a pipe as JSON.
type Config struct {
	// Isolate asks for the private filesystem view (the process must have
	// been started in a new mount namespace). False runs on the host's.
	Isolate bool `json:"isolate,omitempty"`
	// Scratch is an existing, empty host directory on which the sandbox
	// mounts the tmpfs that holds the overlays' upper layers and the new
	// root. Required with Isolate.
	Scratch string `json:"scratch,omitempty"`
	// Mounts are the container's volume mounts, in the order given.
	Mounts []Mount `json:"mounts,omitempty"`
	// Probe makes the sandbox build the view and exit without running
	// anything (the agent's availability check).
	Probe bool `json:"probe,omitempty"`
	// Command is the container's command and arguments, expanded. The first
	// element is looked up in the container's PATH inside the view.
	Command []string `json:"command,omitempty"`
	// Env is the container's environment as NAME=value pairs. exec
	// requests run with it too.
	Env []string `json:"env,omitempty"`
	// WorkingDir is the directory the main process and exec'd commands
	// start in; it is created inside the view when missing.
	WorkingDir string `json:"workingDir,omitempty"`
}

// Mount is one volume mount of the container.
type Mount struct {
	// Source is the host path: a directory or file the agent prepared for
	// the volume, or a hostPath.
	Source string `json:"source"`
	// Target is the absolute path inside the container.
	Target string `json:"target"`
	// ReadOnly mounts it read-only.
	ReadOnly bool `json:"readOnly,omitempty"`
}
