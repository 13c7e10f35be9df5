package images

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Names in the store directory.
const (
	lockFile  = "lock"
	indexFile = "index.json"
	layersDir = "l"
	useDir    = "use"
	tmpDir    = "tmp"
	// workPrefix starts the name of each open Store's work directory
	// under tmp/; its lock file is the same name plus lockSuffix.
	workPrefix = "w-"
	lockSuffix = ".lock"
)

// lockStore takes the store's exclusive lock: held while the index is read
// and rewritten, and while work directories are made or cleaned. Every call
// opens its own file description, so the lock also excludes other
// goroutines of this process.
func (s *Store) lockStore() (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(s.dir, lockFile), os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the image store's lock: %w", err)
	}
	if err := flock(f, unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking the image store: %w", err)
	}
	return func() { f.Close() }, nil
}

// flock is flock(2), retried on EINTR.
func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// makeWorkDir creates this Store's work directory under tmp/ and holds
// the flock on its lock file until Close. Called with the store locked, so
// that a concurrent cleanTemp never sees the directory without its lock.
func (s *Store) makeWorkDir() error {
	work, err := os.MkdirTemp(filepath.Join(s.dir, tmpDir), workPrefix)
	if err != nil {
		return fmt.Errorf("creating a work directory in the image store: %w", err)
	}
	f, err := os.OpenFile(work+lockSuffix, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		os.Remove(work)
		return fmt.Errorf("creating a work directory in the image store: %w", err)
	}
	if err := flock(f, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		os.Remove(work)
		return fmt.Errorf("locking the image store's work directory: %w", err)
	}
	s.work, s.workLock = work, f
	return nil
}

// cleanTemp removes what processes that died left under tmp/: work
// directories whose lock no one holds, and anything else that is not the
// work directory of a live Store. Called with the store locked.
func (s *Store) cleanTemp() error {
	dir := filepath.Join(s.dir, tmpDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("cleaning the image store's temp files: %w", err)
	}
	live := map[string]bool{}
	for _, e := range entries {
		name := e.Name()
		base, isLock := strings.CutSuffix(name, lockSuffix)
		if !isLock {
			continue
		}
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		if flock(f, unix.LOCK_EX|unix.LOCK_NB) != nil {
			live[base] = true
		}
		f.Close()
	}
	for _, e := range entries {
		name := e.Name()
		base, _ := strings.CutSuffix(name, lockSuffix)
		if live[base] {
			continue
		}
		if err := removeAll(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("cleaning the image store's temp files: %w", err)
		}
	}
	return nil
}

// removeAll is os.RemoveAll that also removes directories whose mode
// denies their owner write or search (an image may ship them; as a
// non-root user the store's owner then could not empty them).
func removeAll(path string) error {
	err := os.RemoveAll(path)
	if err == nil || !errors.Is(err, fs.ErrPermission) {
		return err
	}
	filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		if err != nil && d != nil && d.IsDir() {
			// Unreadable before the chmod above: walk it again.
			os.Chmod(p, 0o700)
			return nil
		}
		return nil
	})
	return os.RemoveAll(path)
}
