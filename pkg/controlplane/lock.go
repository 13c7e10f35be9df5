package controlplane

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// dirLock is an exclusive advisory lock on a data directory.
type dirLock struct {
	// f is the open lock file; closing it releases the lock.
	f *os.File
}

// lockDir takes the exclusive lock on dir/lock without waiting. A second
// jobkeeper on the same data directory fails here, before it touches etcd.
func lockDir(dir string) (*dirLock, error) {
	path := dir + "/lock"
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("data directory %s is in use by another jobkeeper (lock %s is held)", dir, path)
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	f.Truncate(0)
	fmt.Fprintf(f, "%d\n", os.Getpid())
	return &dirLock{f: f}, nil
}

// release drops the lock.
func (l *dirLock) release() {
	if l != nil && l.f != nil {
		l.f.Close()
	}
}
