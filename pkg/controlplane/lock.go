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
			return nil, inUseError(dir, path)
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

// inUseError is the error of a data directory whose lock another process
// holds.
func inUseError(dir, lockPath string) error {
	return fmt.Errorf("data directory %s is in use by another jobkeeper (lock %s is held)", dir, lockPath)
}

// CheckDirLock reports whether another process holds the lock on dir, with
// the message Start would give, without creating anything: callers check it
// before anything else that can fail (a busy port), so that a second
// jobkeeper on the same data directory is told why. A lock file that cannot
// be opened (missing, or its directory is not one) is not in use. The lock is taken and dropped at once; Start
// takes it for good.
func CheckDirLock(dir string) error {
	path := dir + "/lock"
	f, err := os.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		// No lock file, or no directory to hold one: nobody holds it.
		// What is wrong with the directory is for the checks that create
		// it to say.
		return nil
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return inUseError(dir, path)
		}
		return fmt.Errorf("locking %s: %w", path, err)
	}
	return nil
}
