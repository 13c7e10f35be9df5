package sandbox

import (
	"errors"

	"golang.org/x/sys/unix"
)

// RecursiveReadOnlySupported reports whether this kernel has mount_setattr
// (Linux 5.12), which recursively read-only mounts (Mount.RecursiveReadOnly)
// need, as runc needs it for the OCI rro mount option.
func RecursiveReadOnlySupported() bool {
	// An invalid descriptor: EBADF where the call exists, ENOSYS where not.
	err := unix.MountSetattr(-1, "", 0, &unix.MountAttr{})
	return !errors.Is(err, unix.ENOSYS)
}
