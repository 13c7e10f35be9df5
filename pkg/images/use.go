package images

import (
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Use records that a container runs from the image with this ID until
// release is called: Remove and CollectGarbage leave the image alone
// meanwhile, in this process and in others (the hold is a shared flock on
// use/<id>, which a process's death releases). It sets the image's
// LastUsed, at Use and again at release.
func (s *Store) Use(id string) (release func()) {
	s.touch(id)
	f, err := os.OpenFile(s.usePath(id), os.O_RDONLY|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err == nil && flock(f, unix.LOCK_SH) != nil {
		f.Close()
		f = nil
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			s.touch(id)
			if f != nil {
				f.Close()
			}
		})
	}
}

// touch sets the image's last-used time to now, in memory until the
// index is next written.
func (s *Store) touch(id string) {
	s.mu.Lock()
	s.lastUsed[id] = s.now()
	s.mu.Unlock()
}

// usePath is the file whose shared flock marks the image in use.
func (s *Store) usePath(id string) string {
	return filepath.Join(s.dir, useDir, strings.TrimPrefix(id, "sha256:"))
}

// lockUnused takes the exclusive flock of the image's use file. If a
// container holds the image, ok is false. Otherwise the caller holds the
// lock until it calls unlock, so that no Use starts in between.
func (s *Store) lockUnused(id string) (unlock func(), ok bool) {
	f, err := os.OpenFile(s.usePath(id), os.O_RDONLY|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return func() {}, true
	}
	if flock(f, unix.LOCK_EX|unix.LOCK_NB) != nil {
		f.Close()
		return nil, false
	}
	return func() { f.Close() }, true
}
