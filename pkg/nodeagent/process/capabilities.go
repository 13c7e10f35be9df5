package process

import "jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"

var _ runtime.HostDirs = (*Runtime)(nil)

// UsesHostDirs implements runtime.HostDirs: attempts run in a directory of
// the host and log to Spec.LogPath.
func (*Runtime) UsesHostDirs() {}
