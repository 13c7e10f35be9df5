package sandbox

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
)

// CgroupFiles are the cgroup.procs files, open for writing, that put a
// container's processes in its cgroups: Enter the container's, Leave the
// sandbox's own, one per hierarchy in the same order. The caller keeps and
// closes them; the sandbox gets copies.
//
// The sandbox moves itself into Enter just before it forks a process of
// the container (the main process where there is no init stage, an
// exec'd command) and back into Leave right after: the child is born in
// the container's cgroups, before it runs anything of the container, and
// the sandbox's own memory is not charged to the container. A sandbox
// that cannot move itself fails the fork: a container never runs outside
// its limits. The init stage is moved instead (move), before it is given
// the container's command.
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
	m.warm()
	return m, nil
}

// warm makes the kernel's wait for the first move of a burst happen now,
// beside the sandbox's own setup, instead of in the fork's first write.
//
// Moving a process between cgroups takes a lock that, on cgroup v1 (and
// on v2 without favordynmods), first waits for an RCU grace period, some
// 10 to 20 ms, unless another move took it within about one grace period
// before. The sandbox writes its own cgroup once, in the background, as
// soon as it starts: a move to where it already is, which changes
// nothing but starts that wait, so the fork's moves, a few milliseconds
// later, find it over or under way. The fork waits for this write (mu):
// the two never interleave.
func (m *cgroupMover) warm() {
	m.mu.Lock()
	go func() {
		defer m.mu.Unlock()
		_, _ = m.leave[0].Write([]byte("0"))
	}()
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

// move puts process pid, a child just forked that runs nothing of the
// container yet (the init stage, which waits for its configuration),
// into the container's cgroups, in the background: the kernel's wait
// that the first move of a burst pays (an RCU grace period, 10 to 20 ms
// on cgroup v1) then overlaps the building of the container's view
// instead of adding to it. The returned function waits for the move and
// says whether it failed; the stage must not be given its command before
// it returned nil. runc moves its init process the same way, after it
// started and before it runs the container's command. Without a mover it
// does nothing.
func (m *cgroupMover) move(pid int) func() error {
	if m == nil {
		return func() error { return nil }
	}
	done := make(chan error, 1)
	go func() {
		id := []byte(strconv.Itoa(pid))
		for _, f := range m.enter {
			if _, err := f.Write(id); err != nil {
				done <- fmt.Errorf("entering the container's cgroup: %w", err)
				return
			}
		}
		done <- nil
	}()
	var err error
	var waited bool
	return func() error {
		if !waited {
			err, waited = <-done, true
		}
		return err
	}
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
