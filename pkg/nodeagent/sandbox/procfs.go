package sandbox

import (
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// procStat is what the sandbox needs from /proc/<pid>/stat.
type procStat struct {
	// pid, ppid, pgrp and session are the process's ids.
	pid, ppid, pgrp, session int
	// startTime is when the process started, in clock ticks after boot.
	startTime uint64
	// state is the process's state letter (R, S, Z...).
	state byte
}

// procFS, when set, is the procfs processes are read from, opened by a
// sandbox before it builds its view: the view's /proc is the container's
// (or, in the host's PID namespace, one a container could cover), which
// the sandbox must not trust. Nil: /proc, by path.
var procFS *os.File

// openProcFS makes the current /proc the one processes are read from.
func openProcFS() error {
	f, err := os.Open("/proc")
	if err != nil {
		return err
	}
	procFS = f
	return nil
}

// readStat parses /proc/<pid>/stat.
func readStat(pid int) (procStat, bool) {
	var b []byte
	if procFS != nil {
		fd, err := unix.Openat(int(procFS.Fd()), strconv.Itoa(pid)+"/stat", unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err != nil {
			return procStat{}, false
		}
		f := os.NewFile(uintptr(fd), "stat")
		b, err = io.ReadAll(f)
		_ = f.Close()
		if err != nil {
			return procStat{}, false
		}
	} else {
		var err error
		if b, err = os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err != nil {
			return procStat{}, false
		}
	}
	// The command name is in parentheses and may hold anything, ")"
	// included: the fields start after the last ")".
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); ppid is field 4, pgrp 5, session 6,
	// starttime 22.
	if len(f) < 20 {
		return procStat{}, false
	}
	st := procStat{pid: pid}
	if len(f[0]) > 0 {
		st.state = f[0][0]
	}
	st.ppid, _ = strconv.Atoi(f[1])
	st.pgrp, _ = strconv.Atoi(f[2])
	st.session, _ = strconv.Atoi(f[3])
	st.startTime, _ = strconv.ParseUint(f[19], 10, 64)
	return st, true
}

// processes lists the processes visible in /proc (procFS when set).
func processes() []procStat {
	var entries []os.DirEntry
	var err error
	if procFS != nil {
		if _, err = procFS.Seek(0, io.SeekStart); err == nil {
			entries, err = procFS.ReadDir(-1)
		}
	} else {
		entries, err = os.ReadDir("/proc")
	}
	if err != nil {
		return nil
	}
	var out []procStat
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readStat(pid); ok {
			out = append(out, st)
		}
	}
	return out
}

// StartTime returns when process pid started (clock ticks after boot), 0
// when it is gone.
func StartTime(pid int) uint64 {
	st, _ := readStat(pid)
	return st.startTime
}

// KillSession kills, with SIGKILL, every process left in the session that
// a sandbox started as leader, and returns how many it signalled. sid is
// the sandbox's PID and startTime its start time: when a process with that
// PID exists but started at another time, the PID was reused by an
// unrelated session and nothing is killed. Processes that moved to another
// process group or lost their leader are still in the session and are
// found; a PID stays reserved while any process uses it as session id.
func KillSession(sid int, startTime uint64) int {
	if sid <= 1 || sid == os.Getpid() {
		return 0
	}
	if st, ok := readStat(sid); ok && st.startTime != startTime {
		return 0
	}
	n := 0
	for _, p := range processes() {
		if p.session == sid || p.pgrp == sid || p.pid == sid {
			if syscall.Kill(p.pid, syscall.SIGKILL) == nil {
				n++
			}
		}
	}
	return n
}
