package sandbox

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
)

// CgroupFiles are the cgroup.procs files, open for writing, that put a
// container's processes in its cgroups: Enter the container's, Leave the
// sandbox's own, one per hierarchy in the same order. The caller keeps and
// closes them; the sandbox gets copies.
//
// The sandbox moves itself into Enter just before it forks a process of
// the container (the init stage, the main process, an exec'd command) and
// back into Leave right after: the child is born in the container's
// cgroups, before it runs anything of the container, and the sandbox's
// own memory is not charged to the container. A sandbox that cannot move
// itself fails the fork: a container never runs outside its limits.
type CgroupFiles struct {
	Enter, Leave []*os.File
}

// cgroupMover moves the sandbox between its own cgroups and the
// container's around a fork.
type cgroupMover struct {
	// mu makes one fork at a time happen inside the container's cgroups.
	mu           sync.Mutex
	enter, leave []*os.File
}

// newCgroupMover takes over the descriptors the config names; nil when
// it names none.
func newCgroupMover(cfg Config) (*cgroupMover, error) {
	if len(cfg.CgroupEnter) == 0 {
		return nil, nil
	}
	if len(cfg.CgroupEnter) != len(cfg.CgroupLeave) {
		return nil, errors.New("the container's cgroups and the sandbox's do not match")
	}
	m := &cgroupMover{}
	for _, fd := range cfg.CgroupEnter {
		syscall.CloseOnExec(fd)
		m.enter = append(m.enter, os.NewFile(uintptr(fd), "cgroup.procs"))
	}
	for _, fd := range cfg.CgroupLeave {
		syscall.CloseOnExec(fd)
		m.leave = append(m.leave, os.NewFile(uintptr(fd), "cgroup.procs"))
	}
	return m, nil
}

// fork runs fork (which starts one process) with the sandbox in the
// container's cgroups. Without a mover it just runs it.
func (m *cgroupMover) fork(fork func() (int, error)) (int, error) {
	if m == nil {
		return fork()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	// "0" is the writing process, all of its threads.
	if err := writeAll(m.enter); err != nil {
		// Some hierarchies may have taken it: back out of them.
		_ = writeAll(m.leave)
		return 0, fmt.Errorf("entering the container's cgroup: %w", err)
	}
	pid, err := fork()
	if lerr := writeAll(m.leave); lerr != nil {
		// The sandbox's own memory would be charged to the container
		// from now on: the start fails instead.
		if err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		return 0, fmt.Errorf("leaving the container's cgroup: %w", lerr)
	}
	return pid, err
}

// writeAll writes "0" to each file.
func writeAll(files []*os.File) error {
	for _, f := range files {
		if _, err := f.Write([]byte("0")); err != nil {
			return err
		}
	}
	return nil
}
