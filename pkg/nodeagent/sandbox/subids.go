package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// SubIDs are the subordinate ids a user other than root may map into
// the user namespace of its sandboxes (/etc/subuid and /etc/subgid, as
// rootless Podman and Docker use them), and the setuid helpers that
// write such a mapping (newuidmap and newgidmap, from shadow's uidmap
// package). With them a sandbox maps the user to 0 and ids 1 to 65536
// onto the user's range, so a container can run as uid 1000; without
// them it maps the user alone, as 0.
type SubIDs struct {
	// UID and GID are the first subordinate uid and gid, and Size how
	// many ids are mapped after 0 (at most MappedIDs).
	UID, GID, Size uint32
	// newuidmap and newgidmap are the helpers' paths.
	newuidmap, newgidmap string
	// direct: this process writes the mappings itself, holding
	// CAP_SETUID and CAP_SETGID in its user namespace, where the ids are
	// mapped (the rootless node's up, whose namespace maps the user's
	// subordinate ids to themselves; the setuid helpers are not privileged
	// there).
	direct bool
}

// MappedIDs is how many ids a sandbox maps above 0 with subordinate ids:
// those of a container image's users (65534 is nobody).
const MappedIDs = 65536

// SubIDAdvice says what a user needs for containers that run as another
// user than root.
const SubIDAdvice = "give the agent's user subordinate ids (a line user:100000:65536 in /etc/subuid and in /etc/subgid) and install newuidmap and newgidmap (Debian's uidmap package)"

// DetectSubIDs finds the current user's subordinate ids and the helpers;
// an error says what is missing. For root there is nothing to find.
func DetectSubIDs() (*SubIDs, error) {
	if os.Getuid() == 0 {
		return nil, errors.New("root maps every id")
	}
	u, err := user.Current()
	if err != nil {
		return nil, err
	}
	s := &SubIDs{direct: canSetIDs()}
	if !s.direct {
		if s.newuidmap, err = exec.LookPath("newuidmap"); err != nil {
			return nil, errors.New("newuidmap is not installed")
		}
		if s.newgidmap, err = exec.LookPath("newgidmap"); err != nil {
			return nil, errors.New("newgidmap is not installed")
		}
	}
	uidStart, uidSize, err := subordinate("/etc/subuid", u.Username, u.Uid)
	if err != nil {
		return nil, err
	}
	gidStart, gidSize, err := subordinate("/etc/subgid", u.Username, u.Uid)
	if err != nil {
		return nil, err
	}
	s.UID, s.GID, s.Size = uidStart, gidStart, min(uidSize, gidSize, MappedIDs)
	return s, nil
}

// subordinate is the first range of file granted to the user (by name or
// uid).
func subordinate(file, name, uid string) (start, size uint32, err error) {
	f, err := os.Open(file)
	if err != nil {
		return 0, 0, fmt.Errorf("no %s: %w", file, err)
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(parts) != 3 || (parts[0] != name && parts[0] != uid) {
			continue
		}
		first, err1 := strconv.ParseUint(parts[1], 10, 32)
		count, err2 := strconv.ParseUint(parts[2], 10, 32)
		if err1 != nil || err2 != nil || count == 0 {
			continue
		}
		return uint32(first), uint32(count), nil
	}
	return 0, 0, fmt.Errorf("%s grants %s no range", file, name)
}

// mapIDs writes the user namespace mappings of the sandbox pid with the
// helpers (or itself, direct): 0 is the user (and group), 1 to Size the
// subordinate range.
func (s *SubIDs) mapIDs(pid int) error {
	p := strconv.Itoa(pid)
	if s.direct {
		for _, m := range []struct {
			file       string
			own, first uint32
		}{{"uid_map", uint32(os.Getuid()), s.UID}, {"gid_map", uint32(os.Getgid()), s.GID}} {
			line := fmt.Sprintf("0 %d 1\n1 %d %d\n", m.own, m.first, s.Size)
			if err := os.WriteFile("/proc/"+p+"/"+m.file, []byte(line), 0); err != nil {
				return fmt.Errorf("writing the sandbox's %s: %w", m.file, err)
			}
		}
		return nil
	}
	for _, m := range []struct {
		helper     string
		own, first uint32
	}{{s.newuidmap, uint32(os.Getuid()), s.UID}, {s.newgidmap, uint32(os.Getgid()), s.GID}} {
		out, err := exec.Command(m.helper, p, "0", strconv.FormatUint(uint64(m.own), 10), "1",
			"1", strconv.FormatUint(uint64(m.first), 10), strconv.FormatUint(uint64(s.Size), 10)).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %v: %s", m.helper, err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// MapIdentity maps, with the helpers, the user and its subordinate ids to
// themselves in the user namespace of process pid (the rootless node's):
// the node's up then maps them into its sandboxes itself (direct).
func (s *SubIDs) MapIdentity(pid int) error {
	p := strconv.Itoa(pid)
	for _, m := range []struct {
		helper     string
		own, first uint32
	}{{s.newuidmap, uint32(os.Getuid()), s.UID}, {s.newgidmap, uint32(os.Getgid()), s.GID}} {
		own, first, size := strconv.FormatUint(uint64(m.own), 10), strconv.FormatUint(uint64(m.first), 10), strconv.FormatUint(uint64(s.Size), 10)
		out, err := exec.Command(m.helper, p, own, own, "1", first, first, size).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %v: %s", m.helper, err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// canSetIDs says whether this process, not root, holds CAP_SETUID and
// CAP_SETGID in its user namespace: it may then map the ids of that
// namespace into its sandboxes' itself.
func canSetIDs() bool {
	return os.Getuid() != 0 && holds(unix.CAP_SETUID, unix.CAP_SETGID)
}

// holds says whether this thread has every one of caps in its effective
// set (in its own user namespace).
func holds(caps ...int) bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	for _, c := range caps {
		if data[c/32].Effective&(1<<(uint(c)%32)) == 0 {
			return false
		}
	}
	return true
}

// argIDMapWait is the sandbox's argv[1] when it starts in a user namespace
// its parent maps afterwards (with subordinate ids).
const argIDMapWait = "idmap-wait"

// waitForIDMap is the first step of a sandbox whose user namespace its
// parent maps after it started: it waits for the mapping, then executes
// itself again, now as root of the namespace, so that the sandbox runs
// with the namespace's capabilities (a process executed before the
// mapping has none). It returns only on failure.
func waitForIDMap() error {
	deadline := time.Now().Add(DefaultStartTimeout)
	for {
		uids, err := os.ReadFile("/proc/self/uid_map")
		if err != nil {
			return err
		}
		gids, err := os.ReadFile("/proc/self/gid_map")
		if err != nil {
			return err
		}
		if strings.TrimSpace(string(uids)) != "" && strings.TrimSpace(string(gids)) != "" {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("the user namespace was never mapped")
		}
		time.Sleep(time.Millisecond)
	}
	return syscall.Exec("/proc/self/exe", []string{ArgvName}, os.Environ())
}
